"""Status values are enums end to end, and their JSON is the CONTRACTS names unchanged."""

from __future__ import annotations

from sre_diag.contract.envelope import Evaluation
from sre_diag.contract.result import Check, CheckedTool, InvocationStatus
from sre_diag.harness.ledger import HarnessCode, Invocation, InvocationLedger
from sre_diag.harness.state import ModelRound, RoundOutcome
from sre_diag.tools.base import AdapterErrorCode, ToolName


def test_checked_tools_are_the_tool_names() -> None:
    """The contract names the tools itself (it sits below them): the same three values."""
    assert [t.value for t in CheckedTool] == [t.value for t in ToolName]


def test_a_check_holds_enums_and_dumps_the_contract_strings() -> None:
    ledger = InvocationLedger(run_id="r")
    ledger.record(
        Invocation("c1", "r", ToolName.QUERY_LOGS, InvocationStatus.ERROR,
                   code=AdapterErrorCode.TIMEOUT, evaluation=Evaluation.NO_GAIN)
    )  # fmt: skip
    (check,) = ledger.progress().checks
    assert isinstance(check, Check)
    assert check.tool is CheckedTool.QUERY_LOGS and check.status is InvocationStatus.ERROR
    assert check.evaluation is Evaluation.NO_GAIN
    assert check.model_dump(mode="json") == {
        "tool_call_id": "c1", "tool": "query_logs", "status": "ERROR", "item_count": 0,
        "evaluation": "NO_GAIN", "scope": None, "error_code": "TIMEOUT",
    }  # fmt: skip


def test_round_outcomes_and_harness_codes_keep_their_names() -> None:
    assert ModelRound(index=1, started_ms=0.0).outcome is RoundOutcome.IN_FLIGHT
    assert [o.value for o in RoundOutcome] == ["IN_FLIGHT", "TOOL_CALLS", "FINAL", "ERROR"]
    assert [c.value for c in HarnessCode] == ["STOP_REQUIRED", "CANCELLED"]
