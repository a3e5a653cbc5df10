"""AuditTrail: the harness's ``RunAudit`` port — builds each finished run's record and hands it
to the background ``AuditWriter``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sre_diag.audit.base import AuditSink
from sre_diag.audit.record import audit_record
from sre_diag.audit.writer import DEFAULT_CAPACITY, AuditWriter
from sre_diag.log import failure_reason
from sre_diag.settings import Settings

if TYPE_CHECKING:
    from sre_diag.contract.result import ExecutionResult
    from sre_diag.harness.context import RunContext

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
