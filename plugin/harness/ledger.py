"""The ToolBoundary: one canonical invocation per handled tool request, and the run's progress.

The ledger is the single source of truth for what the run checked. Citations are verified
against it, the ProgressSnapshot is built from it, the audit record copies it. Nothing outside
it may claim a check happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sre_diag.contract.envelope import Evaluation
from sre_diag.contract.observations import RejectCode
from sre_diag.contract.result import Check, CheckedTool, InvocationStatus, ProgressSnapshot
from sre_diag.errors import StopReason
from sre_diag.tools.base import AdapterErrorCode, ToolName

__all__ = [
    "CANCELLED",
    "HarnessCode",
    "Invocation",
    "InvocationCode",
    "InvocationLedger",
    "InvocationStatus",
    "next_streak",
]


class HarnessCode(StrEnum):
    """Invocation codes the harness itself records (not the model's input, not an adapter)."""

    STOP_REQUIRED = "STOP_REQUIRED"
    """The request was answered STOP_REQUIRED (CONTRACTS §4)."""
    CANCELLED = "CANCELLED"
    """A Cancel or a stop cut the call off mid-call (in the ledger only: the model never sees
    it). One the deadline cut off is ``AdapterErrorCode.TIMEOUT``."""


CANCELLED = HarnessCode.CANCELLED

InvocationCode = RejectCode | AdapterErrorCode | HarnessCode
"""What ``Invocation.code`` holds: why a request was rejected or a call failed."""


@dataclass(slots=True)
class Invocation:
    """One handled tool request, with the exact framework tool call id."""

    tool_call_id: str
    run_id: str
    tool: ToolName
    status: InvocationStatus
    business_input: dict[str, Any] | None = None
    canonical: str | None = None
    scope: str | None = None
    code: InvocationCode | None = None
    item_count: int = 0
    truncated: bool = False
    evaluation: Evaluation | None = None
    started_ms: float = 0.0
    duration_ms: float = 0.0
    observation_bytes: int = 0

    def executed(self) -> bool:
        """The adapter ran (READY or ERROR), so the request counts against the tool budget."""
        return self.status is not InvocationStatus.REJECTED


@dataclass(slots=True)
class InvocationLedger:
    """The invocations of one run, plus the evaluation state the interceptor enforces."""

    run_id: str
    _invocations: list[Invocation] = field(default_factory=list)
    pending_evaluation: str | None = None
    """The READY, non-empty call whose evaluation the next request must carry."""
    no_gain_streak: int = 0
    stop_required_round: int | None = None
    """The model round whose tool request was answered STOP_REQUIRED, if any."""
    stop_cause: StopReason | None = None
    """Why that STOP_REQUIRED was sent: the stop reason when the model ignores it."""
    _burned: set[str] = field(default_factory=set)
    """Every tool call id the framework emitted in this run, whatever it was answered."""

    def burn(self, tool_call_id: str) -> None:
        """``tool_call_id`` was emitted in this run: no later request may use it."""
        self._burned.add(tool_call_id)

    def burned(self, tool_call_id: str) -> bool:
        """The id was emitted before in this run (answered, recorded or not)."""
        return tool_call_id in self._burned or self.find(tool_call_id) is not None

    @property
    def stop_required(self) -> bool:
        return self.stop_required_round is not None

    def stop_required_before(self, model_round: int) -> StopReason | None:
        """The cause of a STOP_REQUIRED answered in an EARLIER round (the model has seen it)."""
        if self.stop_required_round is not None and self.stop_required_round < model_round:
            return self.stop_cause
        return None

    def require_stop(self, model_round: int, cause: StopReason) -> None:
        """The first STOP_REQUIRED of the run: its round and its cause are kept."""
        if self.stop_required_round is None:
            self.stop_required_round = model_round
            self.stop_cause = cause

    def __iter__(self) -> Iterator[Invocation]:
        return iter(self._invocations)

    def progress(self) -> ProgressSnapshot:
        """What the run checked, for the Execution Result: taken only from this ledger."""
        return ProgressSnapshot(checks=tuple(_check(i) for i in self._invocations))

    def __len__(self) -> int:
        return len(self._invocations)

    def record(self, invocation: Invocation) -> None:
        if invocation.run_id != self.run_id:
            raise ValueError("an invocation must belong to the ledger's run")
        self._invocations.append(invocation)
        self._burned.add(invocation.tool_call_id)

    def find(self, tool_call_id: str) -> Invocation | None:
        return next((i for i in self._invocations if i.tool_call_id == tool_call_id), None)

    def ready_ids(self) -> frozenset[str]:
        return frozenset(
            i.tool_call_id for i in self._invocations if i.status is InvocationStatus.READY
        )

    def has_ready(self) -> bool:
        return any(i.status is InvocationStatus.READY for i in self._invocations)

    def already_executed(self, tool: ToolName, canonical: str) -> bool:
        return any(
            i.executed() and i.tool is tool and i.canonical == canonical for i in self._invocations
        )

    def apply_evaluation(self, tool_call_id: str, evaluation: Evaluation) -> None:
        """Record the model's verdict on a call and update the NO_GAIN streak."""
        invocation = self.find(tool_call_id)
        if invocation is not None:
            invocation.evaluation = evaluation
        self.count(evaluation)

    def consume(self, tool_call_id: str, evaluation: Evaluation) -> None:
        """The pending call got its evaluation: record it; nothing is pending any more."""
        self.apply_evaluation(tool_call_id, evaluation)
        if self.pending_evaluation == tool_call_id:
            self.pending_evaluation = None

    def count(self, evaluation: Evaluation) -> None:
        self.no_gain_streak = next_streak(self.no_gain_streak, evaluation)


def next_streak(streak: int, evaluation: Evaluation) -> int:
    """The NO_GAIN streak after one more evaluation."""
    return 0 if evaluation is Evaluation.GAINED else streak + 1


def _check(invocation: Invocation) -> Check:
    """One invocation as the Execution Result shows it (CONTRACTS §6)."""
    return Check(
        tool_call_id=invocation.tool_call_id,
        tool=CheckedTool(invocation.tool.value),
        status=invocation.status,
        item_count=invocation.item_count,
        evaluation=invocation.evaluation,
        scope=invocation.scope,
        error_code=invocation.code.value if invocation.code is not None else None,
    )
