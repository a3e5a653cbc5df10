"""The exact edges of the Tool interceptor (``sre_diag.harness.interceptor``; mutation, issue 22).

Pure and fast (the first step of ``mutation/interceptor.toml``): no model, no server, no
conftest. ``decide`` is called on a RunContext built here; ``handle`` only with in-file adapters
under ``asyncio.run``. Every rule is tested on both sides of its edge: the decision table row by
row, each observation and error code, a duplicate against its near misses, the evaluation that
must name exactly the pending call (``C1 `` is not ``c1``), the NO_GAIN streak at, one below and
one above its threshold, each cause of STOP_REQUIRED, the byte capacity and the observation bound
counted in UTF-8 bytes (CJK) at exactly the limit and one byte past it, an adapter crash told
from a cut-off, every emitted id burned whatever its answer, and the whitelist applied to what
an adapter returns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import ConfigDict

from sre_diag.contract.envelope import Evaluation
from sre_diag.contract.observations import (
    RejectCode,
    error_observation,
    ready_observation,
    rejected_observation,
    rejection_bound,
    stop_required_bound,
    stop_required_observation,
)
from sre_diag.contract.prompts import prompt_set
from sre_diag.errors import CollectionStopped, RunStop, StopReason
from sre_diag.harness.budget import Budgets
from sre_diag.harness.context import RunContext
from sre_diag.harness.decisions import AFTER_STOP_REQUIRED, Consumed, Execute, Respond, Stop
from sre_diag.harness.hooks import HookSet
from sre_diag.harness.interceptor import OVER_CAPACITY, ToolInterceptor
from sre_diag.harness.ledger import CANCELLED, HarnessCode, Invocation, InvocationStatus
from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready, ToolName
from sre_diag.tools.schemas import KnowledgeInput, KnowledgeItem

BUDGETS = Budgets(
    max_model_calls=8, max_total_tokens=60_000, deadline_seconds=120.0, max_tool_calls=6,
    no_gain_streak=2, max_observation_bytes=4096, max_draft_bytes=16_384,
    run_capacity_bytes=65_536,
)  # fmt: skip
ZH = prompt_set().hints
EN = prompt_set("en").hints
KB = ToolName.LOOKUP_KNOWLEDGE
QUERY = {"query": "连接池耗尽", "top_k": 2}
CANONICAL = KnowledgeInput(query="连接池耗尽", top_k=2).canonical()
READY, ERROR, REJECTED = InvocationStatus.READY, InvocationStatus.ERROR, InvocationStatus.REJECTED
SATURATED = StopReason.INFORMATION_SATURATED
TOOLS_SPENT = StopReason.TOOL_CALL_BUDGET_EXHAUSTED
LAST_ROUND = StopReason.MODEL_CALL_BUDGET_EXHAUSTED
TOKENS = StopReason.TOKEN_BUDGET_EXHAUSTED
UNKNOWN, ONE_PER_ROUND = RejectCode.UNKNOWN_TOOL, RejectCode.ONE_TOOL_PER_ROUND


def args(query: dict[str, Any] = QUERY, previous: tuple[str, str] | None = None) -> str:
    envelope: dict[str, Any] = {"input": query}
    if previous is not None:
        envelope["previous_observation"] = {"tool_call_id": previous[0], "evaluation": previous[1]}
    return json.dumps(envelope, ensure_ascii=False)


class Clock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def context(
    usage: Mapping[str, int] | None = None,
    *,
    budgets: Budgets = BUDGETS,
    clock: Clock | None = None,
    **more: int,
) -> RunContext:
    ctx = RunContext.start(
        session_id="s",
        run_id="r",
        budgets=budgets,
        hooks=HookSet(()),
        cancel_event=asyncio.Event(),
        clock=clock or Clock(),
    )
    ctx.state.usage.model_calls = 1
    for name, value in {**(usage or {}), **more}.items():
        setattr(ctx.state.usage, name, value)
    return ctx


def item(n: int = 0) -> KnowledgeItem:
    return KnowledgeItem(title="支付", heading=f"步骤 {n}", path="p.zh.md", score=1.0, snippet="池")


Answer = Callable[[AdapterCall[Any]], object]


class Adapter:
    """An in-file adapter: answers with what ``answer`` returns (or raises)."""

    def __init__(self, answer: Answer | None = None, clock: Clock | None = None) -> None:
        self.answer: Answer = answer or (lambda call: Ready(items=[item()]))
        self.clock = clock
        self.calls: list[AdapterCall[Any]] = []

    @property
    def tool(self) -> ToolName:
        return KB

    async def invoke(self, call: AdapterCall[Any]) -> Any:
        self.calls.append(call)
        if self.clock is not None:
            self.clock.now += 1.5
        return self.answer(call)

    async def aclose(self) -> None:
        return None


def interceptor(
    ctx: RunContext, adapter: Adapter | None = None, hints: Any = None
) -> ToolInterceptor:
    table: dict[ToolName, Any] = {tool: Adapter() for tool in ToolName}
    if adapter is not None:
        table[KB] = adapter
    return ToolInterceptor(ctx, table, hints)


def decide(
    ctx: RunContext,
    name: str = "lookup_knowledge",
    call_id: str = "c9",
    raw: str | None = None,
    *,
    first: bool = True,
    later: tuple[tuple[str, str], ...] = (),
    hints: Any = None,
) -> Execute | Respond | Stop:
    run = ctx.state
    before = (
        run.usage.bytes,
        run.usage.tool_calls,
        run.ledger.no_gain_streak,
        run.ledger.pending_evaluation,
        run.ledger.stop_required_round,
        len(run.ledger),
    )
    decision = interceptor(ctx, hints=hints).decide(
        name, call_id, args() if raw is None else raw, first_in_round=first, later=later
    )
    after = (
        run.usage.bytes,
        run.usage.tool_calls,
        run.ledger.no_gain_streak,
        run.ledger.pending_evaluation,
        run.ledger.stop_required_round,
        len(run.ledger),
    )
    assert after == before  # decide changes nothing
    return decision


def handle(
    ctx: RunContext,
    name: str = "lookup_knowledge",
    call_id: str = "c9",
    raw: str | None = None,
    *,
    adapter: Adapter | None = None,
    first: bool = True,
) -> str:
    tool = interceptor(ctx, adapter)
    coroutine = tool.handle(name, call_id, args() if raw is None else raw, first_in_round=first)
    return asyncio.run(coroutine)


def observed(decision: object) -> dict[str, Any]:
    assert isinstance(decision, Respond)
    value: dict[str, Any] = json.loads(decision.observation)
    return value


def code(decision: object) -> str:
    if isinstance(decision, Execute):
        return "EXECUTE"
    if isinstance(decision, Stop):
        return f"STOP {decision.reason.value}"
    observation = observed(decision)
    return str(observation.get("error_code") or observation["evidence_status"])


def ran(
    ctx: RunContext,
    call_id: str,
    items: int = 1,
    status: InvocationStatus = READY,
    canonical: str = '{"query": "其他", "top_k": 3}',
) -> None:
    """A call of this run that reached its adapter, with ``items`` items."""
    call = Invocation(call_id, "r", KB, status, canonical=canonical, item_count=items)
    ctx.state.ledger.record(call)
    ctx.state.usage.tool_calls += 1


def pending(ctx: RunContext, call_id: str = "c1") -> None:
    ran(ctx, call_id)
    ctx.state.ledger.pending_evaluation = call_id


# -- the decision table, row by row ---------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "name", "first", "expected"),
    [
        ({}, "lookup_knowledge", True, "EXECUTE"),
        ({}, "query_logs", True, "INVALID_ENVELOPE"),  # the knowledge input is not a logs one
        ({}, "lookup_knowledge", False, "ONE_TOOL_PER_ROUND"),
        ({}, "run_shell", True, "UNKNOWN_TOOL"),
        ({}, "run_shell", False, "UNKNOWN_TOOL"),
        ({}, "Lookup_knowledge", True, "UNKNOWN_TOOL"),  # tool names match exactly
        ({"model_calls": 6}, "lookup_knowledge", True, "EXECUTE"),
        ({"model_calls": 7}, "lookup_knowledge", True, "EXECUTE"),  # round 8 reads its result
        ({"model_calls": 8}, "lookup_knowledge", True, "STOP_REQUIRED"),  # no round after it
        ({"model_calls": 9}, "lookup_knowledge", True, "STOP_REQUIRED"),
        ({"model_calls": 8}, "run_shell", True, "STOP_REQUIRED"),
        ({"model_calls": 8}, "run_shell", False, "UNKNOWN_TOOL"),
        ({"model_calls": 8}, "lookup_knowledge", False, "ONE_TOOL_PER_ROUND"),
        ({"tool_calls": 5}, "lookup_knowledge", True, "EXECUTE"),
        ({"tool_calls": 6}, "lookup_knowledge", True, "STOP_REQUIRED"),
        ({"tool_calls": 7}, "lookup_knowledge", True, "STOP_REQUIRED"),
    ],
)  # fmt: skip
def test_each_row_of_the_decision_table(
    usage: dict[str, int], name: str, first: bool, expected: str
) -> None:
    assert code(decide(context(usage), name, first=first)) == expected


def test_an_execute_carries_the_unwrapped_input_and_its_canonical_form() -> None:
    decision = decide(context(), call_id="编号-1")
    assert isinstance(decision, Execute)
    assert (decision.tool, decision.tool_call_id, decision.consumed) == (KB, "编号-1", None)
    assert decision.business == KnowledgeInput(query="连接池耗尽", top_k=2)
    assert decision.canonical == CANONICAL
    assert decision.scope == KnowledgeInput(query="连接池耗尽", top_k=2).scope()


def test_an_unknown_tool_and_a_bad_id_create_no_invocation() -> None:
    ctx = context()
    unknown = decide(ctx, "run_shell")
    assert isinstance(unknown, Respond) and unknown.invocation is None
    assert (unknown.consumed, unknown.duplicate, unknown.stop_cause) == (None, False, None)
    assert observed(unknown) == json.loads(
        rejected_observation("c9", "run_shell", UNKNOWN, max_bytes=4096, hints=ZH)
    )
    for call_id, field in (("", "tool_call_id missing"), ("x" * 129, "tool_call_id too long")):
        bad = decide(ctx, call_id=call_id)
        assert isinstance(bad, Respond) and bad.invocation is None and bad.stop_cause is None
        assert observed(bad)["error_code"] == "INVALID_ENVELOPE"
        assert field in observed(bad)["hint"]


def test_a_request_that_is_not_first_is_rejected_and_recorded() -> None:
    decision = decide(context(), first=False)
    assert isinstance(decision, Respond) and decision.invocation is not None
    invocation = decision.invocation
    assert (invocation.tool_call_id, invocation.run_id, invocation.tool) == ("c9", "r", KB)
    assert (invocation.status, invocation.code) == (REJECTED, "ONE_TOOL_PER_ROUND")
    assert (invocation.business_input, invocation.scope, invocation.canonical) == (None, None, None)
    assert (decision.duplicate, decision.stop_cause, decision.consumed) == (False, None, None)


def test_an_invalid_envelope_names_its_field() -> None:
    decision = decide(context(), raw=args({"query": "池", "top_k": 9}))
    assert code(decision) == "INVALID_ENVELOPE" and "input.top_k" in observed(decision)["hint"]
    assert isinstance(decision, Respond) and decision.invocation is not None
    assert decision.invocation.code == "INVALID_ENVELOPE" and decision.stop_cause is None


@pytest.mark.parametrize(
    ("usage", "streak", "expected"),
    [({"tool_calls": 6}, 0, TOOLS_SPENT), ({"model_calls": 8}, 0, LAST_ROUND), ({}, 2, SATURATED)],
)
def test_an_invalid_envelope_in_a_run_that_must_stop_is_stop_required(
    usage: dict[str, int], streak: int, expected: StopReason
) -> None:
    ctx = context(usage)
    ctx.state.ledger.no_gain_streak = streak
    decision = decide(ctx, raw="{")
    assert isinstance(decision, Respond) and decision.stop_cause is expected
    assert observed(decision)["evidence_status"] == "STOP_REQUIRED"
    assert decision.invocation is not None and decision.invocation.code == "STOP_REQUIRED"
    assert decision.invocation.business_input is None and decision.invocation.canonical is None


# -- the tool call id -------------------------------------------------------------------------


def test_a_reused_id_is_refused_whatever_its_status_and_a_near_miss_is_not_reused() -> None:
    ctx = context()
    ran(ctx, "c1", status=ERROR)
    ctx.state.ledger.record(Invocation("c2", "r", KB, REJECTED))
    for reused in ("c1", "c2"):
        decision = decide(ctx, call_id=reused)
        assert code(decision) == "INVALID_ENVELOPE"
        assert "tool_call_id reused" in observed(decision)["hint"]
    for fresh in ("C1", "c1 ", " c1", "c3"):
        assert code(decide(ctx, call_id=fresh)) == "EXECUTE"


def test_an_id_of_exactly_the_maximum_length_is_accepted() -> None:
    ctx = context()
    assert code(decide(ctx, call_id="x" * 128)) == "EXECUTE"
    assert code(decide(ctx, call_id="x" * 127)) == "EXECUTE"
    assert code(decide(ctx, call_id="编" * 128)) == "EXECUTE"  # 128 characters, 384 bytes: fits
    assert "too long" in observed(decide(ctx, call_id="x" * 129))["hint"]
    assert "too long" in observed(decide(ctx, call_id="编" * 129))["hint"]


def _largest_answer(call_id: str) -> int:
    """The bytes of the largest observation an executed call gets besides its items."""
    empty = ready_observation(call_id, "lookup_knowledge", (), truncated=True, max_bytes=1 << 30)
    failed = error_observation(call_id, "lookup_knowledge", "FORBIDDEN_QUERY")
    return max(len(empty[0].encode("utf-8")), len(failed.encode("utf-8")))


@pytest.mark.parametrize("call_id", ["编号" * 60, "c" * 120, "c" * 128])
def test_an_id_must_leave_room_in_the_observation_bound_counted_in_bytes(call_id: str) -> None:
    need = _largest_answer(call_id)
    for bound, accepted in ((need, True), (need + 1, True), (need - 1, False)):
        budgets = Budgets(**{**_fields(BUDGETS), "max_observation_bytes": bound})
        decision = decide(context(budgets=budgets), call_id=call_id)
        if accepted:
            assert code(decision) == "EXECUTE"
        else:  # a fresh, non-empty id: refused as too long (the hint itself is cut to fit)
            assert code(decision) == "INVALID_ENVELOPE"
            assert isinstance(decision, Respond) and decision.invocation is None
    # The CJK id: 120 characters, 360 bytes; counted in characters it would fit at need - 1.
    assert len(call_id.encode("utf-8")) == (360 if call_id.startswith("编") else len(call_id))


def _fields(budgets: Budgets) -> dict[str, Any]:
    return {name: getattr(budgets, name) for name in Budgets.__dataclass_fields__}


# -- the evaluation of the pending call -------------------------------------------------------


def test_with_a_result_pending_the_request_must_evaluate_it() -> None:
    ctx = context()
    pending(ctx, "c1")
    missing = decide(ctx)
    assert code(missing) == "PREVIOUS_OBSERVATION_REQUIRED"
    assert observed(missing)["expected_previous_tool_call_id"] == "c1"
    assert isinstance(missing, Respond) and missing.invocation is not None
    assert missing.invocation.code == "PREVIOUS_OBSERVATION_REQUIRED"
    assert missing.consumed is None and missing.duplicate is False


@pytest.mark.parametrize("other", ["C1 ", "C1", "c1 ", "c0", "c2", "b", "d", "c10"])
def test_an_evaluation_of_any_other_id_is_a_mismatch(other: str) -> None:
    ctx = context()
    pending(ctx, "c1")
    decision = decide(ctx, raw=args(previous=(other, "GAINED")))
    assert code(decision) == "PREVIOUS_OBSERVATION_MISMATCH"
    assert observed(decision)["expected_previous_tool_call_id"] == "c1"
    assert isinstance(decision, Respond) and decision.consumed is None


@pytest.mark.parametrize("evaluation", [Evaluation.GAINED, Evaluation.NO_GAIN])
def test_the_exact_pending_id_is_consumed_with_its_evaluation(evaluation: Evaluation) -> None:
    ctx = context()
    pending(ctx, "c1")
    decision = decide(ctx, raw=args(previous=("c1", evaluation.value)))
    assert isinstance(decision, Execute)
    assert decision.consumed == Consumed("c1", evaluation)


def test_with_nothing_pending_an_evaluation_is_refused() -> None:
    ctx = context()
    ran(ctx, "c1", items=0)  # an empty READY result: nothing to evaluate
    decision = decide(ctx, raw=args(previous=("c1", "GAINED")))
    assert code(decision) == "PREVIOUS_OBSERVATION_MISMATCH"
    assert observed(decision)["hint"] == ZH["NOTHING_PENDING"]
    assert "expected_previous_tool_call_id" not in observed(decision)
    english = decide(ctx, raw=args(previous=("c1", "GAINED")), hints=EN)
    assert observed(english)["hint"] == EN["NOTHING_PENDING"] != ZH["NOTHING_PENDING"]


@pytest.mark.parametrize(
    ("usage", "streak", "expected"),
    [({"tool_calls": 6}, 0, TOOLS_SPENT), ({"model_calls": 8}, 0, LAST_ROUND), ({}, 2, SATURATED)],
)
def test_a_refused_evaluation_in_a_run_that_must_stop_is_stop_required(
    usage: dict[str, int], streak: int, expected: StopReason
) -> None:
    for previous in (None, ("C1 ", "GAINED")):
        ctx = context(usage)
        pending(ctx, "c1")
        ctx.state.usage.tool_calls = usage.get("tool_calls", 1)
        ctx.state.ledger.no_gain_streak = streak
        decision = decide(ctx, raw=args(previous=previous))
        assert isinstance(decision, Respond) and decision.stop_cause is expected
        assert observed(decision)["evidence_status"] == "STOP_REQUIRED"
        assert decision.consumed is None  # the refused evaluation is not consumed


# -- the NO_GAIN streak and saturation --------------------------------------------------------


def test_a_no_gain_evaluation_that_reaches_the_streak_requires_the_stop() -> None:
    ctx = context()
    pending(ctx, "c1")
    ctx.state.ledger.no_gain_streak = 1
    decision = decide(ctx, raw=args({"query": "新的"}, previous=("c1", "NO_GAIN")))
    assert isinstance(decision, Respond) and decision.stop_cause is SATURATED
    assert decision.consumed == Consumed("c1", Evaluation.NO_GAIN)  # consumed even so
    invocation = decision.invocation
    assert invocation is not None and invocation.code == "STOP_REQUIRED"
    assert invocation.canonical == KnowledgeInput(query="新的").canonical()
    assert invocation.business_input == {"query": "新的", "top_k": 3}
    assert invocation.scope == KnowledgeInput(query="新的").scope()
    assert invocation.status is REJECTED


def test_a_gained_evaluation_clears_the_streak_before_the_budgets_are_checked() -> None:
    ctx = context()
    pending(ctx, "c1")
    ctx.state.ledger.no_gain_streak = 1
    decision = decide(ctx, raw=args({"query": "新的"}, previous=("c1", "GAINED")))
    assert isinstance(decision, Execute) and decision.consumed == Consumed("c1", Evaluation.GAINED)


@pytest.mark.parametrize(
    ("streak", "expected"), [(1, "EXECUTE"), (2, "STOP_REQUIRED"), (3, "STOP_REQUIRED")]
)
def test_the_streak_threshold_at_one_below_and_one_above(streak: int, expected: str) -> None:
    ctx = context()
    ctx.state.ledger.no_gain_streak = streak
    decision = decide(ctx)
    assert code(decision) == expected
    if expected != "EXECUTE":
        assert isinstance(decision, Respond) and decision.stop_cause is SATURATED


@pytest.mark.parametrize(
    ("threshold", "streak", "saturates"),
    [(2, 0, False), (2, 1, True), (1, 0, True), (4, 2, False), (4, 3, True), (3, 1, False)],
)
def test_a_duplicate_counts_one_no_gain_toward_saturation(
    threshold: int, streak: int, saturates: bool
) -> None:
    budgets = Budgets(**{**_fields(BUDGETS), "no_gain_streak": threshold})
    ctx = context(budgets=budgets)
    ran(ctx, "c1", items=0, canonical=CANONICAL)
    ctx.state.ledger.no_gain_streak = streak
    decision = decide(ctx)
    assert isinstance(decision, Respond) and decision.duplicate is True
    invocation = decision.invocation
    assert invocation is not None and invocation.business_input == {
        "query": "连接池耗尽",
        "top_k": 2,
    }
    if saturates:
        assert decision.stop_cause is SATURATED
        assert observed(decision)["evidence_status"] == "STOP_REQUIRED"
        assert invocation.code == "STOP_REQUIRED" and invocation.canonical == CANONICAL
    else:
        assert decision.stop_cause is None and code(decision) == "DUPLICATE_CALL"
        assert invocation.code == "DUPLICATE_CALL" and invocation.canonical is None
        assert invocation.scope == KnowledgeInput(query="连接池耗尽", top_k=2).scope()


def test_a_duplicate_is_the_same_canonical_input_of_a_call_that_ran() -> None:
    ctx = context()
    ran(ctx, "c1", items=0, canonical=CANONICAL)
    # The default top_k written out, keys in another order: the same request.
    same = json.dumps({"input": {"top_k": 2, "query": "连接池耗尽"}}, ensure_ascii=False)
    assert code(decide(ctx, raw=same)) == "DUPLICATE_CALL"
    # Spaces and case do not make a knowledge query new (its canonical form).
    assert code(decide(ctx, raw=args({"query": "  连接池耗尽 ", "top_k": 2}))) == "DUPLICATE_CALL"
    for near in ({"query": "连接池耗尽了", "top_k": 2}, {"query": "连接池耗尽", "top_k": 3}):
        assert code(decide(ctx, raw=args(near))) == "EXECUTE"
    assert code(decide(ctx, "query_mysql", raw=args())) == "INVALID_ENVELOPE"
    rejected = context()
    rejected.state.ledger.record(Invocation("c1", "r", KB, REJECTED, canonical=CANONICAL))
    assert code(decide(rejected)) == "EXECUTE"  # a REJECTED call never ran


def test_a_duplicate_carries_the_evaluation_it_consumed() -> None:
    ctx = context()
    ran(ctx, "c0", items=0, canonical=CANONICAL)
    pending(ctx, "c1")
    decision = decide(ctx, raw=args(previous=("c1", "GAINED")))
    assert isinstance(decision, Respond) and code(decision) == "DUPLICATE_CALL"
    assert decision.duplicate is True and decision.consumed == Consumed("c1", Evaluation.GAINED)


# -- STOP_REQUIRED: its causes and the stop that follows it -----------------------------------


@pytest.mark.parametrize(
    ("usage", "streak", "expected"),
    [
        ({"tool_calls": 6}, 0, TOOLS_SPENT),
        ({"model_calls": 8}, 0, LAST_ROUND),
        ({}, 2, SATURATED),
        ({"model_calls": 8, "tool_calls": 6}, 2, SATURATED),
        ({"model_calls": 8, "tool_calls": 6}, 0, TOOLS_SPENT),
        # one more round like the last (600) plus the observation's estimate (1024): 1624
        ({"prompt_tokens": 58_377, "last_round_tokens": 600}, 0, TOKENS),
        ({"completion_tokens": 58_977}, 0, TOKENS),
    ],
)
def test_each_cause_of_stop_required_is_named_for_every_kind_of_request(
    usage: dict[str, int], streak: int, expected: StopReason
) -> None:
    ctx = context(usage)
    ctx.state.ledger.no_gain_streak = streak
    for name, call_id in (
        ("lookup_knowledge", "c9"),
        ("run_shell", "c9"),
        ("lookup_knowledge", ""),
    ):
        decision = decide(ctx, name, call_id)
        assert isinstance(decision, Respond) and decision.stop_cause is expected
        assert observed(decision) == json.loads(
            stop_required_observation(call_id, name, max_bytes=4096, hints=ZH)
        )
    # The same request in a healthy run is not stopped.
    assert code(decide(context(prompt_tokens=58_376, last_round_tokens=600))) == "EXECUTE"
    assert code(decide(context(completion_tokens=58_976))) == "EXECUTE"
    assert code(decide(context(model_calls=7))) == "EXECUTE"


def test_an_unrecorded_stop_required_records_nothing() -> None:
    decision = decide(context(tool_calls=6), "run_shell")
    assert isinstance(decision, Respond) and decision.invocation is None
    assert decision.consumed is None and decision.duplicate is False


@pytest.mark.parametrize("cause", [SATURATED, LAST_ROUND, TOOLS_SPENT, TOKENS])
def test_a_stop_required_of_an_earlier_round_ends_the_run(cause: StopReason) -> None:
    ctx = context(model_calls=3)
    ctx.state.ledger.require_stop(2, cause)
    for name, first in (("lookup_knowledge", True), ("run_shell", False), ("x", True)):
        decision = decide(ctx, name, first=first)
        assert decision == Stop(cause, AFTER_STOP_REQUIRED)
        assert isinstance(decision, Stop)
        signal = decision.signal()
        assert type(signal) is CollectionStopped and signal.reason is cause


def test_a_stop_required_of_this_round_leaves_the_model_its_answer() -> None:
    ctx = context(model_calls=3)
    ctx.state.ledger.require_stop(3, TOOLS_SPENT)
    later = decide(ctx, first=False)
    assert code(later) == "ONE_TOOL_PER_ROUND"
    # A first request in a round that already met its stop is never run.
    assert decide(ctx) == Stop(TOKENS, OVER_CAPACITY)


def test_the_stop_signals() -> None:
    after = Stop(SATURATED, "".join(["tool requested ", "after STOP_REQUIRED"]))  # an equal text
    assert type(after.signal()) is CollectionStopped and after.signal().reason is SATURATED
    for detail in (OVER_CAPACITY, "zzz", "a", ""):
        signal = Stop(TOKENS, detail).signal()
        assert type(signal) is RunStop and (signal.reason, signal.detail) == (TOKENS, detail)


def test_the_decisions_cannot_change_once_made() -> None:
    values: list[tuple[object, str]] = [
        (Consumed("c1", Evaluation.GAINED), "tool_call_id"),
        (Execute(KB, "c1", None, "{}", "s"), "tool_call_id"),
        (Respond("{}", None), "observation"),
        (Stop(TOKENS, OVER_CAPACITY), "detail"),
    ]
    for value, name in values:
        with pytest.raises(AttributeError):  # FrozenInstanceError is an AttributeError
            setattr(value, name, "c2")
    respond = Respond("{}", None)
    assert (respond.consumed, respond.duplicate, respond.stop_cause) == (None, False, None)
    assert Execute(KB, "c1", None, "{}", "s").consumed is None


def test_options_are_passed_by_name() -> None:
    tool = interceptor(context())
    with pytest.raises(TypeError):
        tool.decide("lookup_knowledge", "c1", args(), True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        tool.handle("lookup_knowledge", "c1", args(), True)  # type: ignore[call-arg, unused-coroutine]


# -- byte capacity, at the last byte ----------------------------------------------------------

CAPACITY, DRAFT, OBSERVATION = 65_536, 16_384, 4096
STOP_BOUND = stop_required_bound(OBSERVATION, ZH)


def _stop_text(call_id: str = "c9", name: str = "lookup_knowledge") -> int:
    return len(stop_required_observation(call_id, name, max_bytes=OBSERVATION, hints=ZH).encode())


def test_an_execution_keeps_room_for_a_full_observation_a_stop_and_the_draft() -> None:
    room = CAPACITY - DRAFT - OBSERVATION - STOP_BOUND
    assert code(decide(context(bytes=room))) == "EXECUTE"
    stopped = decide(context(bytes=room + 1))
    assert isinstance(stopped, Respond) and stopped.stop_cause is TOKENS
    invocation = stopped.invocation
    assert invocation is not None and invocation.canonical == CANONICAL
    assert invocation.code == "STOP_REQUIRED" and invocation.business_input is not None


@pytest.mark.parametrize("bound", [3000, 1000])
def test_the_room_for_an_execution_is_the_sum_of_the_bounds(bound: int) -> None:
    # With a bound that is a power of two (4096) and a smaller stop bound, ``|`` adds alike.
    stop_bound = stop_required_bound(bound, ZH)
    assert bound | stop_bound != bound + stop_bound
    budgets = Budgets(**{**_fields(BUDGETS), "max_observation_bytes": bound})
    room = CAPACITY - DRAFT - bound - stop_bound
    assert code(decide(context(budgets=budgets, bytes=room))) == "EXECUTE"
    assert code(decide(context(budgets=budgets, bytes=room + 1))) == "STOP_REQUIRED"


def test_a_stop_answer_needs_only_to_fit_the_capacity() -> None:
    last = CAPACITY - _stop_text()
    assert decide(context(bytes=last)) == Respond(
        stop_required_observation("c9", "lookup_knowledge", max_bytes=OBSERVATION, hints=ZH),
        Invocation(
            "c9",
            "r",
            KB,
            REJECTED,
            business_input={"query": "连接池耗尽", "top_k": 2},
            canonical=CANONICAL,
            scope=KnowledgeInput(query="连接池耗尽", top_k=2).scope(),
            code=HarnessCode.STOP_REQUIRED,
        ),
        stop_cause=TOKENS,
    )
    assert decide(context(bytes=last + 1)) == Stop(TOKENS, OVER_CAPACITY)


def test_a_stop_required_for_a_budget_keeps_its_cause_when_the_draft_room_is_short() -> None:
    size = _stop_text()
    at_room = CAPACITY - DRAFT - size
    kept = decide(context(tool_calls=6, bytes=at_room))
    assert isinstance(kept, Respond) and kept.stop_cause is TOOLS_SPENT
    short = decide(context(tool_calls=6, bytes=at_room + 1))
    assert isinstance(short, Respond) and short.stop_cause is TOOLS_SPENT  # not turned into tokens
    assert decide(context(tool_calls=6, bytes=CAPACITY - size)) == short
    assert decide(context(tool_calls=6, bytes=CAPACITY - size + 1)) == Stop(TOKENS, OVER_CAPACITY)


def test_a_rejection_keeps_room_for_a_stop_and_the_draft_counted_in_bytes() -> None:
    text = rejected_observation("c9", "run_shell", UNKNOWN, max_bytes=OBSERVATION, hints=ZH)
    size = len(text.encode("utf-8"))
    assert size > len(text)  # the zh hint: bytes, not characters
    room = CAPACITY - DRAFT - size - STOP_BOUND
    fits = decide(context(bytes=room), "run_shell")
    assert code(fits) == "UNKNOWN_TOOL"
    over = decide(context(bytes=room + 1), "run_shell")
    assert isinstance(over, Respond) and over.stop_cause is TOKENS and over.invocation is None
    assert over.observation == stop_required_observation(
        "c9", "run_shell", max_bytes=OBSERVATION, hints=ZH
    )
    last = CAPACITY - _stop_text(name="run_shell")
    assert code(decide(context(bytes=last), "run_shell")) == "STOP_REQUIRED"
    assert decide(context(bytes=last + 1), "run_shell") == Stop(TOKENS, OVER_CAPACITY)


def test_a_recorded_rejection_turned_into_stop_required_keeps_its_invocation() -> None:
    text = rejected_observation("c9", "lookup_knowledge", ONE_PER_ROUND, max_bytes=4096, hints=ZH)
    room = CAPACITY - DRAFT - len(text.encode("utf-8")) - STOP_BOUND
    assert code(decide(context(bytes=room), first=False)) == "ONE_TOOL_PER_ROUND"
    over = decide(context(bytes=room + 1), first=False)
    assert isinstance(over, Respond) and over.stop_cause is TOKENS
    assert over.invocation is not None and over.invocation.code == "STOP_REQUIRED"
    assert over.invocation.status is REJECTED and over.duplicate is False


def test_a_duplicate_turned_into_stop_required_is_still_a_duplicate() -> None:
    ctx = context()
    ran(ctx, "c0", items=0, canonical=CANONICAL)
    pending(ctx, "c1")
    ctx.state.usage.bytes = CAPACITY - DRAFT
    decision = decide(ctx, raw=args(previous=("c1", "GAINED")))
    assert isinstance(decision, Respond) and decision.stop_cause is TOKENS
    assert decision.duplicate is True and decision.consumed == Consumed("c1", Evaluation.GAINED)


def test_the_later_requests_of_the_round_are_reserved_first() -> None:
    later = (("c10", "query_logs"), ("编号", "run_shell"))
    reserve = sum(rejection_bound(i, n, OBSERVATION, ZH) for i, n in later)
    room = CAPACITY - DRAFT - OBSERVATION - STOP_BOUND - reserve
    assert code(decide(context(bytes=room), later=later)) == "EXECUTE"
    assert code(decide(context(bytes=room + 1), later=later)) == "STOP_REQUIRED"
    last = CAPACITY - _stop_text() - reserve
    assert code(decide(context(bytes=last), later=later)) == "STOP_REQUIRED"
    assert decide(context(bytes=last + 1), later=later) == Stop(TOKENS, OVER_CAPACITY)
    # The same call asked twice in one message is reserved twice.
    twice = later + later[:1]
    extra = rejection_bound("c10", "query_logs", OBSERVATION, ZH)
    assert code(decide(context(bytes=room - extra), later=twice)) == "EXECUTE"
    assert code(decide(context(bytes=room - extra + 1), later=twice)) == "STOP_REQUIRED"


def test_after_a_stop_required_the_round_only_has_to_fit_the_capacity() -> None:
    text = rejected_observation("c9", "lookup_knowledge", ONE_PER_ROUND, max_bytes=4096, hints=ZH)
    size = len(text.encode("utf-8"))
    reserve = rejection_bound("c10", "run_shell", OBSERVATION, ZH)
    later = (("c10", "run_shell"),)
    for extra, the_later in ((0, ()), (reserve, later)):
        ctx = context(bytes=CAPACITY - size - extra)
        ctx.state.ledger.require_stop(1, TOOLS_SPENT)
        assert code(decide(ctx, first=False, later=the_later)) == "ONE_TOOL_PER_ROUND"
        ctx.state.usage.bytes += 1
        assert decide(ctx, first=False, later=the_later) == Stop(TOKENS, OVER_CAPACITY)


# -- handle: what a decision does to the run --------------------------------------------------


def test_an_execution_is_run_recorded_and_accounted() -> None:
    clock = Clock()
    ctx = context(clock=clock)
    clock.now += 0.25
    adapter = Adapter(clock=clock)
    text = handle(ctx, call_id="编号", adapter=adapter)
    expected = ready_observation(
        "编号", "lookup_knowledge", [item()], truncated=False, max_bytes=4096
    )
    assert text == expected[0]
    assert [(c.tool_call_id, c.run_id, c.input) for c in adapter.calls] == [
        ("编号", "r", KnowledgeInput(query="连接池耗尽", top_k=2))
    ]
    assert ctx.state.usage.tool_calls == 1
    assert ctx.state.usage.bytes == len(text.encode("utf-8")) > len(text)
    [invocation] = ctx.state.ledger
    assert (invocation.status, invocation.code, invocation.item_count) == (READY, None, 1)
    assert invocation.observation_bytes == len(text.encode("utf-8"))
    assert (invocation.started_ms, invocation.duration_ms) == (250.0, 1500.0)
    assert invocation.canonical == CANONICAL and invocation.truncated is False
    assert ctx.state.ledger.pending_evaluation == "编号"
    assert ctx.state.ledger.no_gain_streak == 0 and invocation.evaluation is None


def test_a_truncated_result_is_recorded_truncated() -> None:
    ctx = context()
    handle(ctx, adapter=Adapter(lambda call: Ready(items=[item(), item(1)], truncated=True)))
    [invocation] = ctx.state.ledger
    assert (invocation.item_count, invocation.truncated) == (2, True)


def test_an_empty_result_counts_as_no_gain_and_leaves_nothing_pending() -> None:
    ctx = context()
    ctx.state.ledger.no_gain_streak = 1
    handle(ctx, adapter=Adapter(lambda call: Ready(items=[])))
    [invocation] = ctx.state.ledger
    assert (invocation.item_count, invocation.evaluation) == (0, Evaluation.NO_GAIN)
    assert ctx.state.ledger.pending_evaluation is None
    assert ctx.state.ledger.no_gain_streak == 2


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda call: Failed(AdapterErrorCode.TIMEOUT), AdapterErrorCode.TIMEOUT),
        # not an AdapterErrorCode
        (lambda call: Failed("TIMEOUT"), AdapterErrorCode.INTERNAL),  # type: ignore[arg-type]
        (lambda call: "READY", AdapterErrorCode.INTERNAL),  # not a result at all
        # unusable items
        (lambda call: Ready(items=[object()]), AdapterErrorCode.INTERNAL),  # type: ignore[list-item]
        (lambda call: 1 / 0, AdapterErrorCode.INTERNAL),  # the adapter raised
    ],
)
def test_what_is_not_a_ready_result_is_an_error_that_ran(
    answer: Answer, expected: AdapterErrorCode
) -> None:
    ctx = context()
    text = handle(ctx, adapter=Adapter(answer))
    assert text == error_observation("c9", "lookup_knowledge", expected.value, max_bytes=4096)
    [invocation] = ctx.state.ledger
    assert (invocation.status, invocation.code) == (ERROR, expected)
    assert ctx.state.usage.tool_calls == 1 and ctx.state.ledger.pending_evaluation is None
    assert invocation.observation_bytes == ctx.state.usage.bytes == len(text.encode("utf-8"))


@pytest.mark.parametrize(
    ("abort", "expected"),
    [
        (None, CANCELLED),
        (StopReason.CANCELLED, CANCELLED),
        (StopReason.DEADLINE_EXCEEDED, AdapterErrorCode.TIMEOUT),
        (StopReason.TOKEN_BUDGET_EXHAUSTED, CANCELLED),
    ],
)
def test_a_call_cut_off_is_recorded_without_an_observation(
    abort: StopReason | None, expected: object
) -> None:
    ctx = context()
    ctx.state.abort_reason = abort

    def cut(call: AdapterCall[Any]) -> object:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        handle(ctx, adapter=Adapter(cut))
    [invocation] = ctx.state.ledger
    assert (invocation.status, invocation.code) == (ERROR, expected)
    assert invocation.canonical == CANONICAL and invocation.observation_bytes == 0
    assert ctx.state.usage.bytes == 0 and ctx.state.usage.tool_calls == 1


def test_a_consumed_evaluation_is_applied() -> None:
    ctx = context()
    pending(ctx, "c1")
    ctx.state.ledger.no_gain_streak = 1
    handle(ctx, raw=args({"query": "新的"}, previous=("c1", "GAINED")))
    first, second = ctx.state.ledger
    assert first.evaluation is Evaluation.GAINED and ctx.state.ledger.no_gain_streak == 0
    assert ctx.state.ledger.pending_evaluation == second.tool_call_id == "c9"


def test_a_rejection_is_recorded_and_counted_but_changes_no_streak() -> None:
    ctx = context()
    ctx.state.ledger.no_gain_streak = 1
    text = handle(ctx, first=False)
    [invocation] = ctx.state.ledger
    assert invocation.code == "ONE_TOOL_PER_ROUND" and invocation.observation_bytes == len(
        text.encode("utf-8")
    )
    assert ctx.state.usage.bytes == len(text.encode("utf-8"))
    assert ctx.state.ledger.no_gain_streak == 1 and ctx.state.usage.tool_calls == 0
    assert not ctx.state.ledger.stop_required


def test_an_unrecorded_answer_is_counted_in_bytes_only() -> None:
    ctx = context()
    text = handle(ctx, "run_shell")
    assert len(ctx.state.ledger) == 0 and ctx.state.usage.bytes == len(text.encode("utf-8"))


def test_a_duplicate_counts_one_no_gain() -> None:
    ctx = context()
    ran(ctx, "c1", items=0, canonical=CANONICAL)
    text = handle(ctx)
    assert json.loads(text)["error_code"] == "DUPLICATE_CALL"
    assert ctx.state.ledger.no_gain_streak == 1 and ctx.state.usage.tool_calls == 1


def test_a_stop_required_is_remembered_with_its_round_and_cause() -> None:
    ctx = context(model_calls=4, tool_calls=6)
    text = handle(ctx)
    assert json.loads(text)["evidence_status"] == "STOP_REQUIRED"
    assert (ctx.state.ledger.stop_required_round, ctx.state.ledger.stop_cause) == (4, TOOLS_SPENT)
    ctx.state.usage.model_calls = 5
    with pytest.raises(CollectionStopped) as stopped:
        handle(ctx, call_id="c10")
    assert stopped.value.reason is TOOLS_SPENT


def test_a_stop_for_capacity_raises_its_run_stop() -> None:
    ctx = context(bytes=CAPACITY)
    with pytest.raises(RunStop) as stopped:
        handle(ctx)
    assert type(stopped.value) is RunStop and stopped.value.detail == OVER_CAPACITY
    assert len(ctx.state.ledger) == 0 and ctx.state.usage.bytes == CAPACITY


def test_the_default_hints_are_the_zh_set_and_others_can_be_given() -> None:
    ctx = context()
    zh = interceptor(ctx).decide("run_shell", "c9", args(), first_in_round=True)
    en = interceptor(ctx, hints=EN).decide("run_shell", "c9", args(), first_in_round=True)
    assert observed(zh)["hint"] == ZH["UNKNOWN_TOOL"] and observed(en)["hint"] == EN["UNKNOWN_TOOL"]


# -- an adapter crash is INTERNAL, a cut-off is not ------------------------------------------


class AdapterCrash(BaseException):
    """What an adapter may raise that no ``except Exception`` catches."""


@pytest.mark.parametrize(
    ("raised", "abort", "expected"),
    [
        (AdapterCrash, None, AdapterErrorCode.INTERNAL),
        (AdapterCrash, StopReason.CANCELLED, AdapterErrorCode.INTERNAL),
        (AdapterCrash, StopReason.DEADLINE_EXCEEDED, AdapterErrorCode.INTERNAL),
        (GeneratorExit, None, AdapterErrorCode.INTERNAL),
        (KeyboardInterrupt, None, CANCELLED),
        (SystemExit, None, CANCELLED),
        (KeyboardInterrupt, StopReason.DEADLINE_EXCEEDED, AdapterErrorCode.TIMEOUT),
    ],
)
def test_a_crash_is_internal_and_a_signal_a_cut_off(
    raised: type[BaseException], abort: StopReason | None, expected: object
) -> None:
    ctx = context()
    ctx.state.abort_reason = abort

    def crash(call: AdapterCall[Any]) -> object:
        raise raised

    with pytest.raises(raised):
        handle(ctx, adapter=Adapter(crash))
    [invocation] = ctx.state.ledger
    assert (invocation.status, invocation.code) == (ERROR, expected)
    assert invocation.observation_bytes == 0 and ctx.state.usage.tool_calls == 1


# -- every id the framework emitted is burned -------------------------------------------------


def test_a_burned_id_is_refused_before_anything_else_of_the_request() -> None:
    ctx = context()
    ctx.state.ledger.burn("u1")
    for name in ("lookup_knowledge", "query_mysql"):
        decision = decide(ctx, name, "u1")
        assert code(decision) == "INVALID_ENVELOPE" and isinstance(decision, Respond)
        assert decision.invocation is None  # no canonical invocation
        assert "reused" in observed(decision)["hint"]
    assert code(decide(ctx, "lookup_knowledge", "U1")) == "EXECUTE"  # ids match exactly
    assert code(decide(ctx, "lookup_knowledge", "u1 ")) == "EXECUTE"
    assert code(decide(ctx, "run_shell", "u1")) == "UNKNOWN_TOOL"  # an unknown tool stays so


@pytest.mark.parametrize(
    ("first_name", "first_raw", "first_in_round", "usage", "first_answer"),
    [
        ("run_shell", None, True, {}, "UNKNOWN_TOOL"),
        ("lookup_knowledge", "{", True, {}, "INVALID_ENVELOPE"),
        ("lookup_knowledge", None, False, {}, "ONE_TOOL_PER_ROUND"),
        ("lookup_knowledge", None, True, {"tool_calls": 6}, "STOP_REQUIRED"),
        ("lookup_knowledge", None, True, {}, "READY"),
        ("", None, True, {}, "UNKNOWN_TOOL"),
    ],
)
def test_an_id_answered_any_way_is_never_used_again(
    first_name: str,
    first_raw: str | None,
    first_in_round: bool,
    usage: dict[str, int],
    first_answer: str,
) -> None:
    ctx = context(usage)
    adapter = Adapter()
    first = handle(ctx, first_name, "u1", first_raw, adapter=adapter, first=first_in_round)
    assert _status(first) == first_answer
    recorded = len(ctx.state.ledger)
    ran_before = len(adapter.calls)
    ctx.state.usage.model_calls += 1
    ctx.state.ledger.stop_required_round = None  # a later round that may run tools again
    ctx.state.usage.tool_calls = 0
    again = handle(ctx, "lookup_knowledge", "u1", args({"query": "其他"}), adapter=adapter)
    assert _status(again) == "INVALID_ENVELOPE"
    assert len(adapter.calls) == ran_before  # never executed
    assert len(ctx.state.ledger) == recorded  # no canonical invocation


def test_handle_burns_the_id_even_when_the_run_stops() -> None:
    ctx = context(model_calls=3)
    ctx.state.ledger.require_stop(2, TOOLS_SPENT)
    with pytest.raises(CollectionStopped):
        handle(ctx, "lookup_knowledge", "s1")
    assert ctx.state.ledger.burned("s1") and not ctx.state.ledger.burned("s2")


def test_decide_burns_nothing() -> None:
    ctx = context()
    decide(ctx, "run_shell", "u1")
    assert not ctx.state.ledger.burned("u1")
    assert code(decide(ctx, "lookup_knowledge", "u1")) == "EXECUTE"


def _status(text: str) -> str:
    observation = json.loads(text)
    return str(observation.get("error_code") or observation["evidence_status"])


# -- the whitelist is applied at the boundary ------------------------------------------------


class _Leaky(KnowledgeItem):
    """An item of the right shape carrying what must never reach the model."""

    model_config = ConfigDict(extra="allow", frozen=True)


def test_a_ready_result_carries_only_the_whitelisted_fields() -> None:
    ctx = context()
    leaky = _Leaky(
        title="t", heading="h", path="p.md", score=2.0, snippet="s",
        password="hunter2", raw_response="Traceback (most recent call last): boom",
    )  # type: ignore[call-arg]  # fmt: skip
    mapping = {"title": "t2", "heading": "h", "path": "p.md", "score": 1, "snippet": "x",
               "api_key": "sk-live-1"}  # fmt: skip
    text = handle(ctx, adapter=Adapter(lambda call: Ready(items=[leaky, mapping])))
    assert "hunter2" not in text and "Traceback" not in text and "sk-live" not in text
    observation = json.loads(text)
    assert [sorted(item) for item in observation["items"]] == [
        ["heading", "path", "score", "snippet", "title"]
    ] * 2
    assert observation["items"][1]["score"] == 1.0 and observation["item_count"] == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"ts": "2026-11-28T10:00:00Z", "service": "a", "level": "ERROR", "message": "m"},
        {"cells": {"password": "hunter2"}},
        {"title": "t", "heading": "h", "path": "p", "score": float("nan"), "snippet": "s"},
        {"title": "t", "heading": "h", "path": "p", "score": True, "snippet": "s"},
        {"title": 1, "heading": "h", "path": "p", "score": 1.0, "snippet": "s"},
        "Traceback (most recent call last): hunter2",
    ],
)
def test_an_item_outside_the_tools_shape_is_internal_with_nothing_raw(bad: object) -> None:
    ctx = context()
    text = handle(ctx, adapter=Adapter(lambda call: Ready(items=[item(), bad])))  # type: ignore[list-item]
    assert text == error_observation("c9", "lookup_knowledge", "INTERNAL", max_bytes=4096)
    [invocation] = ctx.state.ledger
    assert (invocation.status, invocation.code) == (ERROR, AdapterErrorCode.INTERNAL)
    assert ctx.state.ledger.pending_evaluation is None
