"""The audit sinks' errors: a record that was not written, with a reason safe to log."""

from __future__ import annotations

from sre_diag.errors import RunError

__all__ = ["AuditWriteError", "MysqlAuditFailure"]


class AuditWriteError(RunError):
    """One record was not written; ``reason`` is a short operator-facing explanation."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MysqlAuditFailure(AuditWriteError):
    """The MySQL sink failed; ``code`` is the server's error number when there is one."""

    def __init__(self, reason: str, code: int | None) -> None:
        super().__init__(reason)
        self.code = code
