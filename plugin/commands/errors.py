"""The commands' errors: what the operator gave a command that it cannot use.

Each carries a stable ``code`` where the command prints one (CONTRACTS §1: ``error.code``).
"""

from __future__ import annotations

from plugin.errors import OperatorError

__all__ = ["ReplayError"]


class ReplayError(OperatorError):
    """The file is not a replayable event envelope, or the gate ignored it."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
