"""AuditTrail: the harness's ``RunAudit`` port — builds each finished run's record and hands it
to the background ``AuditWriter``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugin.audit.base import AuditSink
from plugin.audit.record import audit_record
from plugin.audit.writer import DEFAULT_CAPACITY, AuditWriter
from plugin.log import failure_reason
from plugin.settings import Settings

if TYPE_CHECKING:
    from plugin.contract.result import ExecutionResult
    from plugin.harness.context import RunContext

__all__ = ["AuditTrail"]


class AuditTrail(AuditWriter):
    """An ``AuditWriter`` that also turns a finished run into its record (``audit_record``)."""

    def __init__(
        self, sink: AuditSink, *, timeout_seconds: float, capacity: int = DEFAULT_CAPACITY
    ) -> None:
        super().__init__(sink, timeout_seconds=timeout_seconds, capacity=capacity)

    @classmethod
    def for_settings(cls, sink: AuditSink, settings: Settings) -> AuditTrail:
        """``sink`` behind a writer bounded by ``DIAG_AUDIT_TIMEOUT_SECONDS``."""
        return cls(sink, timeout_seconds=settings.audit_timeout_seconds)

    def hand_over(self, ctx: RunContext, result: ExecutionResult) -> None:
        """Build the run's record and submit it; a record that cannot be built is lost."""
        try:
            record = audit_record(ctx, result)
        except Exception as exc:
            self.lose(ctx.state.run_id, f"the record could not be built ({failure_reason(exc)})")
            return
        self.submit(record)
