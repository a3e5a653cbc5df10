"""RunContext: everything one run owns, passed explicitly to the gate, the interceptor and hooks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from plugin.errors import BudgetStop, StopReason
from plugin.harness.budget import Budgets, Usage
from plugin.harness.hooks import HookSet, ModelRound
from plugin.harness.ledger import InvocationLedger

__all__ = ["RunContext", "new_run_id"]


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:16]}"


@dataclass(slots=True)
class RunContext:
    """The identity, budgets, clock, cancellation, usage, ledger and hooks of one run."""

    session_id: str
    run_id: str
    budgets: Budgets
    hooks: HookSet
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], float] = time.monotonic
    usage: Usage = field(default_factory=Usage)
    rounds: list[ModelRound] = field(default_factory=list)
    started_at: float = 0.0
    asked_at: datetime | None = None
    """When the question was asked (what the model was told); recorded in the audit."""
    abort_reason: StopReason | None = None
    """Set when the run is being aborted from outside the loop (deadline, Cancel, a stop):
    how a tool call cut off mid-call is recorded."""
    ledger: InvocationLedger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = InvocationLedger(run_id=self.run_id)
        self.started_at = self.clock()

    @property
    def deadline(self) -> float:
        return self.started_at + self.budgets.deadline_seconds

    def elapsed_ms(self) -> float:
        return (self.clock() - self.started_at) * 1000.0

    def remaining_seconds(self) -> float:
        return self.deadline - self.clock()

    def cancel(self) -> None:
        """Ask the run to stop; an in-flight model request is aborted."""
        self.cancel_event.set()

    def check_before_model_call(self) -> None:
        """In order: cancellation, deadline, model-call budget, token budget."""
        if self.cancel_event.is_set():
            raise BudgetStop(StopReason.CANCELLED)
        if self.remaining_seconds() <= 0:
            raise BudgetStop(
                StopReason.DEADLINE_EXCEEDED, f"deadline_seconds={self.budgets.deadline_seconds}"
            )
        self.budgets.check_before_model_call(self.usage)
