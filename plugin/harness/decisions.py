"""The interceptor's tagged decisions (``ToolInterceptor.decide`` returns one; ``handle`` applies
it): run the adapter (``Execute``), answer without running it (``Respond``), or end the run now
(``Stop``), each with the ledger effects it implies (the evaluation it consumes, a duplicate
counted as NO_GAIN, a stop to require)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sre_diag.contract.envelope import Evaluation
from sre_diag.errors import CollectionStopped, RunStop, StopReason
from sre_diag.harness.ledger import Invocation
from sre_diag.tools.base import ToolName

__all__ = ["AFTER_STOP_REQUIRED", "Consumed", "Decision", "Execute", "Respond", "Stop"]

AFTER_STOP_REQUIRED = "tool requested after STOP_REQUIRED"


@dataclass(frozen=True, slots=True)
class Consumed:
    """The pending call's evaluation this request carries."""

    tool_call_id: str
    evaluation: Evaluation


@dataclass(frozen=True, slots=True)
class Execute:
    """Run the adapter with this unwrapped business input."""

    tool: ToolName
    tool_call_id: str
    business: Any
    canonical: str
    scope: str
    consumed: Consumed | None = None


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer with this observation; record ``invocation`` unless it is None.

    ``duplicate`` counts one NO_GAIN; ``stop_cause`` marks the answer as STOP_REQUIRED, sent
    for that cause (the stop reason if the model ignores it).
    """

    observation: str
    invocation: Invocation | None
    consumed: Consumed | None = None
    duplicate: bool = False
    stop_cause: StopReason | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """End the run now with this controlled stop; the request gets no answer."""

    reason: StopReason
    detail: str

    def signal(self) -> RunStop:
        if self.detail == AFTER_STOP_REQUIRED:
            return CollectionStopped(self.reason)
        return RunStop(self.reason, self.detail)


Decision = Execute | Respond | Stop
