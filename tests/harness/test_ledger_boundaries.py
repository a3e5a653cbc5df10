"""The ToolBoundary ledger (``plugin/harness/ledger.py``) rule by rule (for its cosmic-ray run):
what counts as executed, which ids are READY (exactly, never near-misses), what an evaluation
does to the NO_GAIN streak, which STOP_REQUIRED the model has already seen, that the first
stop's round and cause are kept, that a canonical invocation starts empty, and which tool call
ids are burned (every id emitted in the run, recorded or not, matched exactly)."""

from __future__ import annotations

import pytest

from sre_diag.contract.envelope import Evaluation
from sre_diag.errors import StopReason
from sre_diag.harness.ledger import (
    CANCELLED,
    Invocation,
    InvocationLedger,
    InvocationStatus,
    next_streak,
)
from sre_diag.tools.base import ToolName

RUN = "run-1"
READY, ERROR, REJECTED = InvocationStatus.READY, InvocationStatus.ERROR, InvocationStatus.REJECTED
LOGS, MYSQL = ToolName.QUERY_LOGS, ToolName.QUERY_MYSQL


def _call(
    call_id: str,
    status: InvocationStatus = READY,
    tool: ToolName = LOGS,
    canonical: str | None = '{"q":1}',
) -> Invocation:
    return Invocation(call_id, RUN, tool, status, canonical=canonical)


def _ledger(*calls: Invocation) -> InvocationLedger:
    ledger = InvocationLedger(RUN)
    for call in calls:
        ledger.record(call)
    return ledger


def test_a_canonical_invocation_starts_empty() -> None:
    call = Invocation("c1", RUN, LOGS, REJECTED)
    assert (call.business_input, call.canonical, call.scope, call.code) == (None, None, None, None)
    assert (call.item_count, call.truncated, call.evaluation) == (0, False, None)
    assert (call.started_ms, call.duration_ms, call.observation_bytes) == (0.0, 0.0, 0)
    with pytest.raises(AttributeError):
        call.error_cod = "TIMEOUT"  # type: ignore[attr-defined]  # slots: no misspelt field
    ledger = InvocationLedger(RUN)
    assert (ledger.pending_evaluation, ledger.no_gain_streak) == (None, 0)
    assert (ledger.stop_required_round, ledger.stop_cause, ledger.stop_required) == (
        None,
        None,
        False,
    )
    assert len(ledger) == 0 and list(ledger) == []
    with pytest.raises(AttributeError):
        ledger.no_gain_streek = 1  # type: ignore[attr-defined]
    assert CANCELLED == "CANCELLED"


def test_each_ledger_has_its_own_invocations() -> None:
    first, second = InvocationLedger(RUN), InvocationLedger(RUN)
    first.record(_call("c1"))
    assert len(first) == 1 and len(second) == 0


@pytest.mark.parametrize(("status", "executed"), [(READY, True), (ERROR, True), (REJECTED, False)])
def test_ready_and_error_calls_ran_a_rejected_one_did_not(
    status: InvocationStatus, executed: bool
) -> None:
    assert _call("c1", status).executed() is executed


def test_an_invocation_of_another_run_is_refused() -> None:
    ledger = InvocationLedger(RUN)
    for other in ("run-2", "run-0", "run-1 "):  # after, before and near the ledger's own
        with pytest.raises(ValueError):
            ledger.record(Invocation("c1", other, LOGS, READY))
    assert len(ledger) == 0
    ledger.record(_call("c1"))
    assert [i.tool_call_id for i in ledger] == ["c1"]


def test_calls_are_kept_in_order_and_found_by_their_exact_id() -> None:
    ledger = _ledger(_call("c1"), _call("C1 ", ERROR), _call("c2", REJECTED))
    assert [i.tool_call_id for i in ledger] == ["c1", "C1 ", "c2"]
    assert len(ledger) == 3
    first, second, _ = ledger
    assert ledger.find("c1") is first
    assert ledger.find("C1 ") is second
    assert ledger.find("C1") is None and ledger.find("c3") is None


def test_only_ready_calls_are_ready() -> None:
    ledger = _ledger(_call("c1", ERROR), _call("c2", REJECTED))
    assert ledger.ready_ids() == frozenset() and not ledger.has_ready()
    ledger.record(_call("c3"))
    ledger.record(_call("c4"))
    assert ledger.ready_ids() == frozenset({"c3", "c4"}) and ledger.has_ready()


def test_a_duplicate_is_the_same_tool_and_canonical_input_that_ran() -> None:
    ledger = _ledger(_call("c1", READY), _call("c2", ERROR, MYSQL, "m"), _call("c3", REJECTED))
    assert ledger.already_executed(LOGS, '{"q":1}')
    assert ledger.already_executed(MYSQL, "m")  # an ERROR ran too
    assert not ledger.already_executed(MYSQL, '{"q":1}')  # another tool
    assert not ledger.already_executed(LOGS, '{"q":2}')  # another input
    assert not ledger.already_executed(LOGS, "m")
    rejected_only = _ledger(_call("c3", REJECTED))
    assert not rejected_only.already_executed(LOGS, '{"q":1}')  # a REJECTED one never ran


def test_the_no_gain_streak() -> None:
    assert next_streak(0, Evaluation.NO_GAIN) == 1
    assert next_streak(2, Evaluation.NO_GAIN) == 3
    assert next_streak(2, Evaluation.GAINED) == 0
    assert next_streak(0, Evaluation.GAINED) == 0
    ledger = InvocationLedger(RUN)
    ledger.count(Evaluation.NO_GAIN)
    ledger.count(Evaluation.NO_GAIN)
    assert ledger.no_gain_streak == 2
    ledger.count(Evaluation.GAINED)
    assert ledger.no_gain_streak == 0


def test_an_evaluation_is_recorded_on_its_call_and_counted() -> None:
    ledger = _ledger(_call("c1"), _call("c2"))
    ledger.apply_evaluation("c1", Evaluation.NO_GAIN)
    assert ledger.find("c1").evaluation is Evaluation.NO_GAIN  # type: ignore[union-attr]
    assert ledger.find("c2").evaluation is None  # type: ignore[union-attr]
    assert ledger.no_gain_streak == 1
    ledger.apply_evaluation("unknown", Evaluation.NO_GAIN)  # still counted
    assert ledger.no_gain_streak == 2


def test_consuming_the_pending_evaluation_clears_it_and_only_that() -> None:
    ledger = _ledger(_call("c1"), _call("c2"))
    ledger.pending_evaluation = "c2"
    ledger.consume("c1", Evaluation.GAINED)
    assert ledger.pending_evaluation == "c2"
    assert ledger.find("c1").evaluation is Evaluation.GAINED  # type: ignore[union-attr]
    ledger.consume("c3", Evaluation.GAINED)  # an id that sorts after the pending one
    assert ledger.pending_evaluation == "c2"
    ledger.consume("c2", Evaluation.NO_GAIN)
    assert ledger.pending_evaluation is None
    assert ledger.find("c2").evaluation is Evaluation.NO_GAIN  # type: ignore[union-attr]
    assert ledger.no_gain_streak == 1


def test_the_first_stop_required_is_kept_with_its_cause() -> None:
    ledger = InvocationLedger(RUN)
    ledger.require_stop(3, StopReason.TOOL_CALL_BUDGET_EXHAUSTED)
    assert ledger.stop_required
    assert (ledger.stop_required_round, ledger.stop_cause) == (
        3,
        StopReason.TOOL_CALL_BUDGET_EXHAUSTED,
    )
    ledger.require_stop(4, StopReason.INFORMATION_SATURATED)
    assert (ledger.stop_required_round, ledger.stop_cause) == (
        3,
        StopReason.TOOL_CALL_BUDGET_EXHAUSTED,
    )


def test_a_stop_required_in_round_zero_is_one() -> None:
    ledger = InvocationLedger(RUN)
    ledger.require_stop(0, StopReason.INFORMATION_SATURATED)
    assert ledger.stop_required
    ledger.require_stop(1, StopReason.TOKEN_BUDGET_EXHAUSTED)
    assert (ledger.stop_required_round, ledger.stop_cause) == (
        0,
        StopReason.INFORMATION_SATURATED,
    )
    assert ledger.stop_required_before(1) is StopReason.INFORMATION_SATURATED


def test_a_stop_required_counts_from_the_next_round_on() -> None:
    ledger = InvocationLedger(RUN)
    assert ledger.stop_required_before(5) is None
    ledger.require_stop(3, StopReason.MODEL_CALL_BUDGET_EXHAUSTED)
    assert ledger.stop_required_before(2) is None
    assert ledger.stop_required_before(3) is None  # the round that met it: not seen yet
    assert ledger.stop_required_before(4) is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert ledger.stop_required_before(9) is StopReason.MODEL_CALL_BUDGET_EXHAUSTED


def _fresh(text: str) -> str:
    """An equal string that is not the same object (ids and run ids come from parsed JSON)."""
    copy = "".join(list(text))
    assert copy == text and copy is not text
    return copy


def test_the_pending_id_is_matched_by_value_not_identity() -> None:
    ledger = _ledger(_call("call-2"))
    ledger.pending_evaluation = "call-2"
    ledger.consume(_fresh("call-2"), Evaluation.GAINED)
    assert ledger.pending_evaluation is None


def test_an_invocation_of_the_same_run_is_recorded_whatever_string_holds_its_id() -> None:
    ledger = InvocationLedger(RUN)
    ledger.record(Invocation("c1", _fresh(RUN), LOGS, READY))
    assert len(ledger) == 1


def test_an_id_is_burned_once_emitted_or_recorded_and_matched_exactly() -> None:
    ledger = _ledger(_call("c1"), _call("c2", REJECTED))
    assert ledger.burned("c1") and ledger.burned("c2")  # recorded, whatever its status
    assert not ledger.burned("u1")
    ledger.burn("u1")  # answered without an invocation (an unknown tool)
    assert ledger.burned("u1") and len(ledger) == 2  # burning records nothing
    for near in ("U1", "u1 ", "u", "u12", ""):
        assert not ledger.burned(near)
    other = InvocationLedger("run-2")
    assert not other.burned("u1") and not other.burned("c1")  # per run, never shared
    assert ledger.burned("".join(["c", "1"]))  # by value, not identity


def test_a_recorded_id_stays_burned_without_the_lookup() -> None:
    ledger = _ledger(_call("c1"))
    ledger._invocations.clear()  # what the ledger remembers of the id is not only the list
    assert ledger.burned("c1")


def test_an_invocation_is_found_by_the_value_of_its_id() -> None:
    # Ids come from parsed JSON: an equal id is usually another string object.
    recorded = "".join(["call-", str(4096)])
    asked = "call-" + str(2048 * 2)
    assert recorded == asked and recorded is not asked
    ledger = _ledger(_call(recorded))
    found = ledger.find(asked)
    assert found is not None and found.tool_call_id == recorded
    ledger.apply_evaluation(asked, Evaluation.NO_GAIN)
    assert found.evaluation is Evaluation.NO_GAIN
