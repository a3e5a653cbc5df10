"""What the harness needs from the audit: the port it hands finished runs to.

The harness imports no audit code; ``sre_diag.audit.AuditTrail`` implements this protocol (it
builds the record and writes it in the background) and ``sre_diag.wiring`` injects it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sre_diag.contract.result import ExecutionResult
    from sre_diag.harness.context import RunContext

__all__ = ["RunAudit"]


class RunAudit(Protocol):
    """Takes every finished run's record off the harness's hands; never blocks the answer."""

    def hand_over(self, ctx: RunContext, result: ExecutionResult) -> None:
        """Record the finished run (written later, off the caller's loop); never raises."""

    def submit(self, record: dict[str, Any]) -> None:
        """Hand over a record built elsewhere (a Slack feedback vote); never raises."""

    async def drain(self, timeout_seconds: float) -> bool:
        """Wait for the records handed over so far; False when some are still being written."""

    async def aclose(self, timeout_seconds: float) -> None:
        """Refuse new records, drain within the bound, close the sink."""

    @property
    def records_lost(self) -> int:
        """Records handed over (or meant to be) that did not reach the sink."""

    @property
    def pending(self) -> int:
        """Records handed over and not yet written or lost."""
