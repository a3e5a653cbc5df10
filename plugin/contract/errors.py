"""The contract's errors: a tool call's arguments that are not an Envelope, a final text that is
not a Draft, a prompt that cannot be used, and the one strict JSON object hook both parsers use.

Each carries a stable code or field name, never the offending text (it is model output).
"""

from __future__ import annotations

from enum import StrEnum

from sre_diag.errors import OperatorError, RunError

__all__ = [
    "DraftDefect",
    "DraftRejected",
    "DuplicateKey",
    "EnvelopeError",
    "PromptError",
    "pairs_without_duplicates",
]


class DraftDefect(StrEnum):
    """Stable reasons a final text is not a Draft (``failure.detail``)."""

    EMPTY = "EMPTY"
    OVERSIZED = "OVERSIZED"
    FENCED = "FENCED"
    PREFIXED = "PREFIXED"
    SUFFIXED = "SUFFIXED"
    MALFORMED = "MALFORMED"
    TOO_DEEP = "TOO_DEEP"
    """Arrays/objects nested deeper than any Draft can be (refused before decoding)."""
    DUPLICATE_KEY = "DUPLICATE_KEY"
    SCHEMA = "SCHEMA"
    UNKNOWN_CITATION = "UNKNOWN_CITATION"


class DraftRejected(RunError):
    """The final text failed the strict gate; only the defect travels on."""

    def __init__(self, defect: DraftDefect) -> None:
        self.defect = defect
        super().__init__(defect.value)


class EnvelopeError(RunError):
    """The arguments are not a valid Envelope; ``field`` names where (never the value)."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(field)


class DuplicateKey(RunError, ValueError):
    """A JSON object names one key twice (which value would win is parser-dependent)."""


class PromptError(OperatorError, ValueError):
    """A prompt choice or file that cannot be used (what is wrong, never the file's text)."""


def pairs_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for :class:`json.JSONDecoder`: refuse an object with a repeated key."""
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise DuplicateKey
    return dict(pairs)
