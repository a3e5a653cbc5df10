"""Plain text from untrusted text: one line that cannot steer the terminal or the layout.

:func:`clean_entry`, for catalogues and probes that show names: control, format and separator
characters become spaces, runs of whitespace one space, and the line is cut at ``limit``
characters (``…`` marks a cut), so a pushed label value or a runbook title can neither break a
line nor reorder or hide what follows it.

:func:`visible_controls`, for text that is shown whole and must stay recognisable (a log
pattern printed by ``sre-diag patterns``, a file name in an error): every character that a
terminal acts on or that breaks or reorders a line is replaced by a visible escape, the rest is
kept as it is:

==========================================================  ==================================
characters                                                  shown as
==========================================================  ==================================
C0 controls U+0000–U+001F except TAB (ESC, BEL, CR, LF,     ``\\x1b``, ``\\x07``, ``\\x0d``… as
VT, FF…), DEL U+007F, C1 controls U+0080–U+009F (CSI        ``\\x`` and two lowercase hex
U+009B, NEL U+0085…)                                        digits
bidi controls U+061C, U+200E, U+200F, U+202A–U+202E,        ``\\u`` and four lowercase hex
U+2066–U+2069; line and paragraph separators U+2028,        digits: ``\\u202e``
U+2029
lone surrogates U+DC80–U+DCFF (a byte that was not UTF-8,   ``\\x`` and the byte: ``\\xff``
as Python carries it in a file name)
other lone surrogates U+D800–U+DFFF                         ``\\u`` and four hex digits
==========================================================  ==================================

A backslash is kept as it is, so a text that already holds ``\\x1b`` literally prints the same
as one that held ESC: the form is meant to be read, not parsed back. The result never holds a
character that ends or splits a line, moves the cursor or starts a terminal sequence.
"""

from __future__ import annotations

import unicodedata

__all__ = ["clean_entry", "visible_controls"]


def clean_entry(text: str, limit: int) -> str:
    """One line of plain text: control, format and separator characters become spaces, runs of
    whitespace one space, at most ``limit`` characters (``…`` marks a cut)."""
    chars = [
        " " if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in text[: limit * 4]
    ]
    line = " ".join("".join(chars).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _escapes() -> dict[int, str]:
    table = {code: f"\\x{code:02x}" for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
    del table[ord("\t")]
    bidi = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    table.update({code: f"\\u{code:04x}" for code in [*bidi, 0x2028, 0x2029]})
    table.update({code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)})
    table.update({code: f"\\x{code - 0xDC00:02x}" for code in range(0xDC80, 0xDD00)})
    return table


_ESCAPES = _escapes()


def visible_controls(text: str) -> str:
    """``text`` with every terminal control, bidi control, line separator and lone surrogate
    replaced by a visible ``\\xNN`` / ``\\uNNNN`` escape (the table in the module docstring);
    linear in the length of ``text``."""
    return text.translate(_ESCAPES)
