"""``ToolInterceptor.decide`` as a pure function: a RunContext in, a tagged decision out, and
the run's state unchanged (no model involved: nothing here reaches a model round)."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from sre_diag.contract.envelope import Evaluation
from sre_diag.errors import StopReason
from sre_diag.harness.budget import Budgets
from sre_diag.harness.context import RunContext
from sre_diag.harness.decisions import Execute, Respond, Stop
from sre_diag.harness.hooks import HookSet
from sre_diag.harness.interceptor import ToolInterceptor
from tests.harness.support import LOGS_INPUT, adapters

BUDGETS = Budgets(
    max_model_calls=8, max_total_tokens=60000, deadline_seconds=120, max_tool_calls=6,
    no_gain_streak=2, max_observation_bytes=4096, max_draft_bytes=16384,
    run_capacity_bytes=65536,
)  # fmt: skip
LOGS = json.dumps({"input": LOGS_INPUT})


def context(**usage: int) -> RunContext:
    ctx = RunContext.start(
        session_id="s", run_id="r", budgets=BUDGETS, hooks=HookSet(()), cancel_event=asyncio.Event()
    )
    for name, value in usage.items():
        setattr(ctx.state.usage, name, value)
    return ctx


def decide(ctx: RunContext, name: str = "query_logs", raw: str = LOGS, **kw: object) -> object:
    run = ctx.state
    before = (copy.deepcopy(run.usage), run.ledger.no_gain_streak, len(run.ledger))
    decision = ToolInterceptor(ctx, adapters()).decide(name, "c9", raw, **kw)  # type: ignore[arg-type]
    assert (run.usage, run.ledger.no_gain_streak, len(run.ledger)) == before  # pure
    return decision


def status(decision: object) -> str:
    if isinstance(decision, Execute):
        return "EXECUTE"
    if isinstance(decision, Stop):
        return f"STOP {decision.reason.value}"
    assert isinstance(decision, Respond)
    observation = json.loads(decision.observation)
    return str(observation.get("error_code") or observation["evidence_status"])


@pytest.mark.parametrize(
    ("usage", "name", "first", "expected"),
    [
        ({"model_calls": 1}, "query_logs", True, "EXECUTE"),
        ({"model_calls": 1}, "query_logs", False, "ONE_TOOL_PER_ROUND"),
        ({"model_calls": 1}, "run_shell", True, "UNKNOWN_TOOL"),
        ({"model_calls": 7}, "query_logs", True, "EXECUTE"),  # round 8 reads its result
        ({"model_calls": 8}, "query_logs", True, "STOP_REQUIRED"),  # no round after the last
        ({"model_calls": 8}, "run_shell", True, "STOP_REQUIRED"),
        ({"model_calls": 8}, "run_shell", False, "UNKNOWN_TOOL"),
        ({"model_calls": 1, "tool_calls": 6}, "query_logs", True, "STOP_REQUIRED"),
        ({"model_calls": 1, "bytes": 45000}, "query_logs", True, "STOP_REQUIRED"),
        ({"model_calls": 1, "bytes": 65400}, "query_logs", True, "STOP TOKEN_BUDGET_EXHAUSTED"),
    ],
)  # fmt: skip
def test_decision_table(usage: dict[str, int], name: str, first: bool, expected: str) -> None:
    assert status(decide(context(**usage), name, first_in_round=first)) == expected


CAUSES = [
    StopReason.INFORMATION_SATURATED,
    StopReason.MODEL_CALL_BUDGET_EXHAUSTED,
    StopReason.TOOL_CALL_BUDGET_EXHAUSTED,
    StopReason.TOKEN_BUDGET_EXHAUSTED,
]


def cause_of(decision: object) -> str:
    """What a decision says about stopping: the STOP_REQUIRED's cause, a Stop's reason."""
    if isinstance(decision, Stop):
        return f"STOP {decision.reason.value}"
    if isinstance(decision, Respond) and decision.stop_cause is not None:
        assert json.loads(decision.observation)["evidence_status"] == "STOP_REQUIRED"
        return decision.stop_cause.value
    return status(decision)


@pytest.mark.parametrize(
    ("usage", "streak", "name", "raw", "expected"),
    [
        ({"model_calls": 1}, 2, "query_logs", LOGS, "INFORMATION_SATURATED"),
        ({"model_calls": 1, "tool_calls": 6}, 0, "query_logs", LOGS, "TOOL_CALL_BUDGET_EXHAUSTED"),
        ({"model_calls": 1, "tool_calls": 9}, 0, "run_shell", LOGS, "TOOL_CALL_BUDGET_EXHAUSTED"),
        ({"model_calls": 1, "tool_calls": 6}, 0, "query_logs", "{", "TOOL_CALL_BUDGET_EXHAUSTED"),
        ({"model_calls": 8}, 0, "query_logs", LOGS, "MODEL_CALL_BUDGET_EXHAUSTED"),
        ({"model_calls": 8}, 1, "run_shell", LOGS, "MODEL_CALL_BUDGET_EXHAUSTED"),
        ({"model_calls": 7}, 0, "query_logs", LOGS, "EXECUTE"),
        # the streak wins over a budget reached at the same time, a budget over the later ones
        ({"model_calls": 8, "tool_calls": 6}, 2, "query_logs", LOGS, "INFORMATION_SATURATED"),
        ({"model_calls": 8, "tool_calls": 6}, 0, "query_logs", LOGS, "TOOL_CALL_BUDGET_EXHAUSTED"),
        # tokens: room for one more round as costly as the last one plus the observation's
        # estimate (4096 bytes: 1024 tokens), 1624 here
        ({"model_calls": 2, "prompt_tokens": 59000, "last_round_tokens": 600}, 0, "query_logs",
         LOGS, "TOKEN_BUDGET_EXHAUSTED"),
        ({"model_calls": 2, "prompt_tokens": 58377, "last_round_tokens": 600}, 0, "query_logs",
         LOGS, "TOKEN_BUDGET_EXHAUSTED"),
        ({"model_calls": 2, "prompt_tokens": 58376, "last_round_tokens": 600}, 0, "query_logs",
         LOGS, "EXECUTE"),
        ({"model_calls": 2, "completion_tokens": 58976}, 0, "query_logs", LOGS,
         "EXECUTE"),  # no round cost known yet: the observation's estimate alone
        ({"model_calls": 2, "completion_tokens": 58977}, 0, "query_logs", LOGS,
         "TOKEN_BUDGET_EXHAUSTED"),
        ({"model_calls": 8, "prompt_tokens": 59990, "last_round_tokens": 600}, 0, "query_logs",
         LOGS, "MODEL_CALL_BUDGET_EXHAUSTED"),
        # byte capacity: the run's context budget, reported as the token budget
        ({"model_calls": 1, "bytes": 45000}, 0, "query_logs", LOGS, "TOKEN_BUDGET_EXHAUSTED"),
        ({"model_calls": 1, "bytes": 65400}, 0, "query_logs", LOGS, "STOP TOKEN_BUDGET_EXHAUSTED"),
        ({"model_calls": 1, "bytes": 65400}, 2, "query_logs", LOGS, "STOP TOKEN_BUDGET_EXHAUSTED"),
    ],
)  # fmt: skip
def test_a_stop_required_names_its_cause(
    usage: dict[str, int], streak: int, name: str, raw: str, expected: str
) -> None:
    ctx = context(**usage)
    ctx.state.ledger.no_gain_streak = streak
    assert cause_of(decide(ctx, name, raw, first_in_round=True)) == expected


@pytest.mark.parametrize("cause", CAUSES)
def test_a_stop_required_in_an_earlier_round_ends_the_run_whatever_is_asked(
    cause: StopReason,
) -> None:
    ctx = context(model_calls=3)
    ctx.state.ledger.require_stop(2, cause)
    ctx.state.ledger.require_stop(2, StopReason.INFORMATION_SATURATED)  # the first cause is kept
    for name in ("query_logs", "run_shell"):
        decision = decide(ctx, name, first_in_round=True)
        assert isinstance(decision, Stop) and decision.reason is cause
        assert decision.signal().reason is cause
    ctx.state.ledger.stop_required_round = 3  # the same round: the model has not seen it yet
    assert status(decide(ctx, "query_logs", first_in_round=False)) == "ONE_TOOL_PER_ROUND"


def test_the_evaluation_a_request_carries_is_an_effect_of_the_decision() -> None:
    ctx = context(model_calls=2)
    ctx.state.ledger.pending_evaluation = "c1"
    raw = json.dumps(
        {"previous_observation": {"tool_call_id": "c1", "evaluation": "GAINED"},
         "input": LOGS_INPUT}
    )  # fmt: skip
    decision = decide(ctx, raw=raw, first_in_round=True)
    assert isinstance(decision, Execute) and decision.consumed is not None
    assert decision.consumed.evaluation is Evaluation.GAINED
    assert ctx.state.ledger.pending_evaluation == "c1"  # only ``handle`` applies it
