"""What every audit sink offers, and the one error a sink raises with a reason safe to log.

::

    AuditWriteError(Exception)      a sink refused or failed one write; ``reason`` names why
                                    (never a credential, never a raw backend response)
"""

from __future__ import annotations

from typing import Any, Protocol

from sre_diag.audit.errors import AuditWriteError

__all__ = ["AuditSink", "AuditWriteError"]


class AuditSink(Protocol):
    """Where run records go. ``write`` is awaited on the audit writer's own loop, under its
    timeout; ``phase`` says what a write is waiting for, for the log line when it times out."""

    phase: str

    async def write(self, record: dict[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


