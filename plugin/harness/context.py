"""RunContext: one run's state and its dependencies, passed to the gate and the interceptor.

::

    RunContext
    ├── state: RunState   what the run did (sre_diag.harness.state): identity, usage, rounds, ledger
    └── deps:  RunDeps    what the run is given: budgets, hooks, clock, cancellation token

Hooks see only the state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sre_diag.errors import BudgetStop, StopReason
from sre_diag.harness.budget import Budgets
from sre_diag.harness.hooks import HookSet
from sre_diag.harness.state import RunState, new_run_id

__all__ = ["RunContext", "RunDeps", "new_run_id"]


@dataclass(frozen=True, slots=True)
class RunDeps:
    """What one run is given from outside: limits, observers, clock and cancellation."""

    budgets: Budgets
    hooks: HookSet
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], float] = time.monotonic


@dataclass(slots=True)
class RunContext:
    """The state and the dependencies of one run; the clock starts when it is built."""

    state: RunState
    deps: RunDeps

    def __post_init__(self) -> None:
        self.state.started_at = self.deps.clock()

    @classmethod
    def start(
        cls,
        *,
        session_id: str,
        run_id: str,
        budgets: Budgets,
        hooks: HookSet,
        cancel_event: asyncio.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        asked_at: datetime | None = None,
    ) -> RunContext:
        """A new run's context, its clock started now."""
        deps = RunDeps(budgets, hooks, cancel_event or asyncio.Event(), clock)
        return cls(RunState(session_id, run_id, asked_at=asked_at), deps)

    @property
    def deadline(self) -> float:
        return self.state.started_at + self.deps.budgets.deadline_seconds

    def elapsed_ms(self) -> float:
        return (self.deps.clock() - self.state.started_at) * 1000.0

    def remaining_seconds(self) -> float:
        return self.deadline - self.deps.clock()

    def cancel(self) -> None:
        """Ask the run to stop; an in-flight model request is aborted."""
        self.deps.cancel_event.set()

    def check_before_model_call(self) -> None:
        """In order: cancellation, deadline, model-call budget, token budget."""
        if self.deps.cancel_event.is_set():
            raise BudgetStop(StopReason.CANCELLED)
        if self.remaining_seconds() <= 0:
            raise BudgetStop(
                StopReason.DEADLINE_EXCEEDED,
                f"deadline_seconds={self.deps.budgets.deadline_seconds}",
            )
        self.deps.budgets.check_before_model_call(self.state.usage)
