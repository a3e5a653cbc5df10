"""Every Scenario of both spec files, driven through the real harness and a scripted model server.

Mapping (spec file → Scenario → test):

single-react-diagnosis-agent.md
- Diagnosis needs Tool evidence → test_diagnosis_needs_tool_evidence
- Agent execution fails → test_agent_execution_fails
- Follow-up diagnosis has a safe previous turn → test_follow_up_diagnosis_has_a_safe_previous_turn
- Query exceeds configured context budget → test_query_exceeds_configured_context_budget
- ReAct performs two model rounds → test_react_performs_two_model_rounds
- Model-call budget is exhausted → test_model_call_budget_is_exhausted
- Framework requests first RAG evidence → test_framework_requests_first_rag_evidence
- Model continues after a non-empty result → test_model_continues_after_a_non_empty_result
- Model omits required progress field → test_model_omits_required_progress_field
- Tool execution fails → test_tool_execution_fails
- Unknown Tool is requested → test_unknown_tool_is_requested
- Supported Draft is returned → test_supported_draft_is_returned
- Model returns prose around JSON → test_model_returns_prose_around_json
- Tool finds no evidence → test_tool_finds_no_evidence
- No bounded Tool query is possible → test_no_bounded_tool_query_is_possible
- Harness requires stop → test_harness_requires_stop
- Internal audited execution completes → test_internal_audited_execution_completes
- Stage four is archived → test_stage_four_is_archived (interpreted: the harness is an internal
  entry that does not pull in the Slack edge; there are no Java controllers here)
- Model ignores STOP_REQUIRED → test_model_ignores_stop_required
- Unclassified framework failure → test_unclassified_framework_failure
- Invalid final Draft after verified checks → test_invalid_final_draft_after_verified_checks
- Invalid final Draft without verified checks → test_invalid_final_draft_without_verified_checks

information-gain-stop-contract.md (the MODIFIED/ADDED requirements repeat scenarios above with
the same names; the same tests cover them, and ``test_model_ignores_stop_required`` asserts the
INFORMATION_SATURATED reason the contract adds for a NO_GAIN streak; a STOP_REQUIRED a budget
caused, ignored, stops with that budget's reason: tests/harness/test_budgets.py
``test_an_ignored_stop_required_stops_the_run_for_its_cause``).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sre_diag.contract.request import DiagnosisRequest, PreviousTurn
from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec
from sre_diag.errors import InputRejected, InputRejection, StopReason
from sre_diag.tools.base import AdapterErrorCode, Failed, Ready, ToolName
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    ScriptedAdapter,
    adapters,
    audit_records,
    call,
    draft_json,
    final_step,
    harness,
    tool_messages,
    tool_step,
)

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC 2026-11-28, order ord_10231")
KB = {"query": "payment-api 5xx 排查", "top_k": 2}


async def test_diagnosis_needs_tool_evidence(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            tool_step(call("call-2", "lookup_knowledge", KB, previous=("call-1", "GAINED"))),
            final_step(draft_json(["call-1", "call-2"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert result.draft is not None
    assert result.usage.model_calls == 3 == server.request_count
    assert len(table[ToolName.QUERY_LOGS].calls) == 1
    assert len(table[ToolName.LOOKUP_KNOWLEDGE].calls) == 1
    # One agent, one system prompt: every request carries the same single user message.
    users = [[m for m in r["messages"] if m["role"] == "user"] for r in server.requests]
    assert all(len(u) == 1 and u == users[0] for u in users)


async def test_agent_execution_fails(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server([final_step("not json at all")])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.INVALID_DRAFT
    assert server.request_count == 1  # no second invocation of the agent or the model


async def test_follow_up_diagnosis_has_a_safe_previous_turn(
    model_server: StartServer, tmp_path: Path
) -> None:
    previous = PreviousTurn(
        query="payment-api 5xx", conclusion=None, missing_info=("需要时间窗口",)
    )
    server = await model_server([final_step(draft_json(conclusion=False))])
    request = DiagnosisRequest(
        "时间窗口是 10:00–10:30 UTC",
        previous_turn=previous,
        asked_at=datetime(2026, 11, 28, 10, 35, tzinfo=UTC),
    )
    result = await harness(server, tmp_path).diagnose(request)
    assert result.outcome is Outcome.DRAFT
    messages = server.requests[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert json.loads(messages[1]["content"]) == {
        "query": "时间窗口是 10:00–10:30 UTC",
        "previous_turn": {
            "query": "payment-api 5xx",
            "conclusion": None,
            "missing_info": ["需要时间窗口"],
        },
        "asked_at": "2026-11-28T10:35:00Z",
    }
    (record,) = audit_records(tmp_path)
    assert record["asked_at"] == "2026-11-28T10:35:00Z"


async def test_query_exceeds_configured_context_budget(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([])
    h = harness(server, tmp_path, DIAG_MAX_QUERY_BYTES=16)
    query = "支付服务五百错误"  # 8 CJK characters = 24 UTF-8 bytes
    with pytest.raises(InputRejected) as info:
        await h.diagnose(DiagnosisRequest(query))
    assert info.value.code is InputRejection.QUERY_TOO_LARGE
    assert (info.value.limit, info.value.observed) == (16, 24)
    assert server.request_count == 0


async def test_react_performs_two_model_rounds(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert result.usage.model_calls == 2 == server.request_count
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (200, 40)


@pytest.mark.parametrize(
    "calls",
    [
        [call("call-1", "query_logs", LOGS_INPUT)],
        [call("call-1", "query_logs", LOGS_INPUT), call("call-2", "lookup_knowledge", KB)],
        [call("call-1", "restart_service", {"service": "payment-api"})],
    ],
    ids=["one-call", "parallel-calls", "unknown-tool"],
)
async def test_model_call_budget_is_exhausted(
    model_server: StartServer, tmp_path: Path, calls: list[ToolCallSpec]
) -> None:
    # Budget 1: the only round asks for tools, so the framework attempts a second round. The
    # gate refuses it before any HTTP request: the server saw exactly one request.
    server = await model_server([tool_step(*calls)])
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_MODEL_CALLS=1).diagnose(QUERY)
    assert result.outcome is Outcome.STOPPED
    assert result.stop_reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert server.request_count == 1 and result.usage.model_calls == 1
    assert all(not a.calls for a in table.values())  # no round is left to read a result
    record = audit_records(tmp_path)[0]
    assert record["stop_reason"] == "MODEL_CALL_BUDGET_EXHAUSTED"
    assert len(record["rounds"]) == 1


async def test_framework_requests_first_rag_evidence(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(call("call-1", "lookup_knowledge", KB)), final_step(draft_json(["call-1"]))]
    )
    table = adapters()
    h = harness(server, tmp_path, table)
    result = await h.diagnose(QUERY)
    rag = table[ToolName.LOOKUP_KNOWLEDGE].calls
    assert len(rag) == 1
    assert rag[0].tool_call_id == "call-1"
    assert rag[0].run_id == result.run_id
    assert rag[0].input.model_dump() == {"query": "payment-api 5xx 排查", "top_k": 2}
    record = audit_records(tmp_path)[0]
    assert record["invocations"][0]["run_id"] == result.run_id
    assert record["invocations"][0]["tool_call_id"] == "call-1"


async def test_model_continues_after_a_non_empty_result(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            tool_step(call("call-2", "lookup_knowledge", KB, previous=("call-1", "GAINED"))),
            final_step(draft_json(["call-1", "call-2"])),
        ]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.progress is not None
    checks = {c.tool_call_id: c for c in result.progress.checks}
    assert checks["call-1"].evaluation == "GAINED"
    assert checks["call-2"].status == "READY"


async def test_model_omits_required_progress_field(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            tool_step(call("call-2", "lookup_knowledge", KB)),
            final_step(draft_json(["call-1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    observation = tool_messages(server.requests[2])[-1]["observation"]
    assert observation["evidence_status"] == "REJECTED"
    assert observation["error_code"] == "PREVIOUS_OBSERVATION_REQUIRED"
    assert observation["expected_previous_tool_call_id"] == "call-1"
    assert "previous_observation" in observation["hint"]
    assert result.outcome is Outcome.DRAFT


async def test_tool_execution_fails(model_server: StartServer, tmp_path: Path) -> None:
    failing = ScriptedAdapter(ToolName.QUERY_MYSQL, lambda c: Failed(AdapterErrorCode.UNAVAILABLE))
    sql = {"sql": "SELECT status, COUNT(*) FROM payments GROUP BY status", "purpose": "失败分布"}
    server = await model_server(
        [tool_step(call("call-1", "query_mysql", sql)), final_step(draft_json(conclusion=False))]
    )
    result = await harness(server, tmp_path, adapters(query_mysql=failing)).diagnose(QUERY)
    assert len(failing.calls) == 1  # no automatic retry
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert observation == {
        "tool_call_id": "call-1",
        "tool": "query_mysql",
        "evidence_status": "ERROR",
        "error_code": "UNAVAILABLE",
    }
    assert result.progress is not None and result.progress.checks[0].status == "ERROR"


async def test_unknown_tool_is_requested(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(call("call-1", "run_shell", {"cmd": "rm -rf /"})),
            final_step(draft_json(conclusion=False)),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert observation["evidence_status"] == "REJECTED"
    assert observation["error_code"] == "UNKNOWN_TOOL"
    assert all(not a.calls for a in table.values())
    assert result.progress is not None and result.progress.checks == ()
    assert audit_records(tmp_path)[0]["invocations"] == []


async def test_supported_draft_is_returned(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(call("call-7Xy", "query_logs", LOGS_INPUT)),
            final_step(draft_json(["call-7Xy"])),
        ]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.draft is not None
    assert result.draft.analysis[0].evidence.tool_call_ids == ("call-7Xy",)  # type: ignore[union-attr]
    assert result.draft.conclusion is not None
    assert result.draft.action_plan and result.draft.recommendations


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("```json\n{body}\n```", "FENCED"),
        ("以下是诊断结果：{body}", "PREFIXED"),
        ("{body}\n以上。", "SUFFIXED"),
    ],
)
async def test_model_returns_prose_around_json(
    model_server: StartServer, tmp_path: Path, text: str, detail: str
) -> None:
    body = draft_json(["call-1"])
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            final_step(text.replace("{body}", body)),
        ]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None and result.failure.detail == detail
    assert server.request_count == 2


async def test_tool_finds_no_evidence(model_server: StartServer, tmp_path: Path) -> None:
    empty = ScriptedAdapter(ToolName.QUERY_LOGS, lambda c: Ready(items=[]))
    other = {**LOGS_INPUT, "service": "order-service"}
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            tool_step(call("call-2", "query_logs", other)),
            # The streak of 2 empty results saturates: the next request is not run.
            tool_step(call("call-3", "query_logs", {**LOGS_INPUT, "service": "checkout-web"})),
            final_step(draft_json(conclusion=False)),
        ]
    )
    result = await harness(server, tmp_path, adapters(query_logs=empty)).diagnose(QUERY)
    assert len(empty.calls) == 2
    assert (
        tool_messages(server.requests[3])[-1]["observation"]["evidence_status"] == "STOP_REQUIRED"
    )
    assert result.outcome is Outcome.DRAFT
    assert result.draft is not None and result.draft.conclusion is None
    assert result.draft.limitations.missing_info


async def test_no_bounded_tool_query_is_possible(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server([final_step(draft_json(conclusion=False))])
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(DiagnosisRequest("系统好像有点慢"))
    assert result.outcome is Outcome.DRAFT
    assert result.draft is not None and result.draft.conclusion is None
    assert result.draft.limitations.missing_info
    assert result.usage.tool_calls == 0 and all(not a.calls for a in table.values())


def saturating_steps() -> list[ModelStep]:
    """Two NO_GAIN evaluations in a row: the third request is answered STOP_REQUIRED."""
    return [
        tool_step(call("call-1", "query_logs", LOGS_INPUT)),
        tool_step(call("call-2", "lookup_knowledge", KB, previous=("call-1", "NO_GAIN"))),
        tool_step(
            call(
                "call-3",
                "query_mysql",
                {"sql": "SELECT 1", "purpose": "x"},
                previous=("call-2", "NO_GAIN"),
            )
        ),
    ]


async def test_harness_requires_stop(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            *saturating_steps(),
            final_step(draft_json(["call-1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    stop = tool_messages(server.requests[3])[-1]["observation"]
    assert stop["evidence_status"] == "STOP_REQUIRED"
    assert set(stop) == {"tool_call_id", "tool", "evidence_status", "hint"}
    assert table[ToolName.QUERY_MYSQL].calls == []
    assert result.outcome is Outcome.DRAFT


async def test_internal_audited_execution_completes(
    model_server: StartServer, tmp_path: Path
) -> None:
    from sre_diag.harness.hooks import StepHook
    from sre_diag.harness.ledger import Invocation
    from sre_diag.harness.state import ModelRound, RunState

    seen: list[tuple[str, str, str]] = []

    class Recorder(StepHook):
        def on_model_round(self, ctx: RunState, model_round: ModelRound) -> None:
            seen.append(("round", ctx.session_id, ctx.run_id))

        def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
            seen.append(("tool", ctx.session_id, invocation.run_id))

    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    result = await harness(server, tmp_path).diagnose(
        QUERY, session_id="sess-42", hooks=[Recorder()]
    )
    assert {kind for kind, _, _ in seen} == {"round", "tool"}
    assert {(s, r) for _, s, r in seen} == {("sess-42", result.run_id)}
    record = audit_records(tmp_path)[0]
    assert (record["session_id"], record["run_id"]) == ("sess-42", result.run_id)


def test_stage_four_is_archived() -> None:
    """The harness is an internal entry: importing it does not load the Slack edge."""
    import subprocess

    code = (
        "import sys, sre_diag.harness.run, sre_diag.commands.cli;"
        "print(any(m.startswith('slack_bolt') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"


async def test_model_ignores_stop_required(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            *saturating_steps(),
            tool_step(call("call-4", "query_logs", {**LOGS_INPUT, "service": "order-service"})),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert result.outcome is Outcome.STOPPED
    assert result.stop_reason is StopReason.INFORMATION_SATURATED
    assert result.draft is None
    assert result.progress is not None
    assert [c.tool_call_id for c in result.progress.checks] == ["call-1", "call-2", "call-3"]
    assert server.request_count == 4
    assert len(table[ToolName.QUERY_LOGS].calls) == 1


class AdapterCrash(BaseException):
    """Not an ``Exception``: it passes the adapter guard and leaves the framework loop."""


async def test_unclassified_framework_failure(model_server: StartServer, tmp_path: Path) -> None:
    def crash(call: object) -> Ready:
        raise AdapterCrash

    broken = ScriptedAdapter(ToolName.QUERY_LOGS, crash)
    server = await model_server([tool_step(call("call-1", "query_logs", LOGS_INPUT))])
    result = await harness(server, tmp_path, adapters(query_logs=broken)).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.AGENT_ERROR
    assert result.failure.detail == "UNCLASSIFIED"
    assert result.progress is None  # nothing READY: no progress is fabricated
    assert server.request_count == 1
    assert [r["outcome"] for r in audit_records(tmp_path)] == ["FAILED"]


async def test_invalid_final_draft_after_verified_checks(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step("   ")]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None
    assert (result.failure.code, result.failure.detail) == (FailureCode.INVALID_DRAFT, "EMPTY")
    assert result.draft is None
    assert result.progress is not None
    assert [c.tool_call_id for c in result.progress.checks] == ["call-1"]
    assert server.request_count == 2


async def test_invalid_final_draft_without_verified_checks(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([final_step('{"conclusion": null}')])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None and result.failure.detail == "SCHEMA"
    assert result.progress is None and result.draft is None
    record = audit_records(tmp_path)[0]
    assert record["outcome"] == "FAILED"
