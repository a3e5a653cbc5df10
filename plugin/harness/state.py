"""RunState: what one run has done so far — identity, timing, usage, rounds, ledger.

The run's dependencies (budgets, hooks, clock, cancellation) live apart, in
``sre_diag.harness.context.RunDeps`` (as pydantic-ai's ``GraphAgentState`` / ``GraphAgentDeps``).
Hooks and the audit record read this state; nothing here imports the hooks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sre_diag.errors import StopReason
from sre_diag.harness.budget import Usage
from sre_diag.harness.ledger import InvocationLedger

__all__ = ["ModelRound", "RoundOutcome", "RunState", "new_run_id"]


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:16]}"


class RoundOutcome(StrEnum):
    """How a model round ended, as the harness saw it (the audit's ``rounds[].outcome``)."""

    IN_FLIGHT = "IN_FLIGHT"
    TOOL_CALLS = "TOOL_CALLS"
    FINAL = "FINAL"
    ERROR = "ERROR"


@dataclass(slots=True)
class ModelRound:
    """One model round as the harness saw it."""

    index: int
    started_ms: float
    duration_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_reported: bool = True
    tool_calls: int = 0
    outcome: RoundOutcome = RoundOutcome.IN_FLIGHT
    max_tokens: int | None = None
    """The ``max_tokens`` its request carried (the completion tokens the run had left)."""
    cut: bool = False
    """The server stopped the answer at ``max_tokens`` (``finish_reason`` ``length``)."""


@dataclass(slots=True)
class RunState:
    """The identity of one run and everything it has consumed and recorded so far."""

    session_id: str
    run_id: str
    started_at: float = 0.0
    """The run clock's reading when the run started."""
    asked_at: datetime | None = None
    """When the question was asked (what the model was told); recorded in the audit."""
    usage: Usage = field(default_factory=Usage)
    rounds: list[ModelRound] = field(default_factory=list)
    abort_reason: StopReason | None = None
    """Set when the run is being aborted from outside the loop (deadline, Cancel, a stop):
    how a tool call cut off mid-call is recorded."""
    ledger: InvocationLedger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = InvocationLedger(run_id=self.run_id)
