"""One line of plain text from untrusted text: for catalogues and probes that show names.

Control, format and separator characters become spaces, runs of whitespace one space, and the
line is cut at ``limit`` characters (``…`` marks a cut), so a pushed label value or a runbook
title can neither break a line nor reorder or hide what follows it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["clean_entry"]


def clean_entry(text: str, limit: int) -> str:
    """One line of plain text: control, format and separator characters become spaces, runs of
    whitespace one space, at most ``limit`` characters (``…`` marks a cut)."""
    chars = [
        " " if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in text[: limit * 4]
    ]
    line = " ".join("".join(chars).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
