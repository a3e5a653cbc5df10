"""The commands' errors: what the operator gave a command that it cannot use.

Each carries a stable ``code`` where the command prints one (CONTRACTS §1: ``error.code``).
"""

from __future__ import annotations

from sre_diag.errors import InputRejection, OperatorError

__all__ = [
    "EvalDatabaseError",
    "EvalUsageError",
    "PatternsInputError",
    "ReplayError",
    "SetupError",
]


class ReplayError(OperatorError):
    """The file is not a replayable event envelope, or the gate ignored it."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class EvalUsageError(OperatorError):
    """Bad arguments: a path that does not exist, no case found, a malformed admin DSN."""


class EvalDatabaseError(OperatorError):
    """The throwaway database could not be prepared (a stable, credential-free reason)."""


class SetupError(OperatorError):
    """A failure worth one clear line to the operator."""


class PatternsInputError(OperatorError):
    """``patterns`` refuses its input: ``code`` a stable :class:`InputRejection` value."""

    def __init__(self, code: InputRejection, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
