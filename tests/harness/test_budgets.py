"""Budgets: for each kind, the server's request count proves no round beyond it reached it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.errors import StopReason
from sre_diag.tools.base import Ready, ToolName
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

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC")
KB = {"query": "连接池", "top_k": 1}


def unknown(call_id: str) -> ModelStep:
    return tool_step(call(call_id, "restart_service", {"service": "payment-api"}))


async def test_model_call_budget_blocks_the_next_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Budget 1: the round's tool request is answered STOP_REQUIRED (no round is left to read a
    # result), and the round that would read it is refused before any HTTP request.
    server = await model_server([unknown("c1")])
    result = await harness(server, tmp_path, DIAG_MAX_MODEL_CALLS=1).diagnose(QUERY)
    assert result.outcome is Outcome.STOPPED
    assert result.stop_reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert server.request_count == 1 and result.usage.model_calls == 1


async def test_unknown_tools_do_not_outlive_the_model_call_budget(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Budget 2: round 1's unknown tool is answered UNKNOWN_TOOL (a round remains after it);
    # round 2 asks an unknown tool again: no round remains, STOP_REQUIRED, and the round that
    # would read it never reaches the server. The stop's cause was the last model round, not
    # saturation (no NO_GAIN was ever counted).
    server = await model_server([unknown("c1"), unknown("c2")])
    result = await harness(server, tmp_path, DIAG_MAX_MODEL_CALLS=2).diagnose(QUERY)
    assert tool_messages(server.requests[1])[0]["observation"]["error_code"] == "UNKNOWN_TOOL"
    assert result.stop_reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert server.request_count == 2 and result.usage.model_calls == 2


async def test_a_tool_runs_in_the_round_before_the_last(
    model_server: StartServer, tmp_path: Path
) -> None:
    # One round of headroom: with 3 rounds, round 2's tool runs (round 3 reads it) and round 3
    # produces the Draft citing both.
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1", "c2"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_MODEL_CALLS=3).diagnose(QUERY)
    assert tool_messages(server.requests[2])[-1]["observation"]["evidence_status"] == "READY"
    assert len(table[ToolName.LOOKUP_KNOWLEDGE].calls) == 1
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert server.request_count == 3


async def test_a_tool_asked_in_the_last_round_never_runs(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_MODEL_CALLS=2).diagnose(QUERY)
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.stop_reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert result.progress is not None
    assert [(c.tool_call_id, c.error_code) for c in result.progress.checks] == [
        ("c1", None),
        ("c2", "STOP_REQUIRED"),
    ]
    assert server.request_count == 2  # no third request: the budget is 2


async def test_token_budget_blocks_the_next_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(
                call("c1", "query_logs", LOGS_INPUT), prompt_tokens=100, completion_tokens=20
            ),
        ]
    )
    # 120 after round 1 < 130, but round 2's prompt alone is at least round 1's 120 tokens:
    # the 10 left leave no completion token, so round 2 never reaches the server (and c1 was
    # answered STOP_REQUIRED: no round like the last plus an observation fits).
    h = harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=130)
    result = await h.diagnose(QUERY)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert server.request_count == 1
    assert result.usage.prompt_tokens + result.usage.completion_tokens == 120


async def test_usage_jumping_past_the_budget_in_one_round_stops_at_once(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT), prompt_tokens=900_000)]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert table[ToolName.QUERY_LOGS].calls == []  # the tool it asked for never ran
    assert server.request_count == 1


async def test_missing_usage_is_estimated_and_still_budgeted(
    model_server: StartServer, tmp_path: Path
) -> None:
    step = ModelStep(
        tool_calls=(call("c1", "query_logs", LOGS_INPUT),),
        prompt_tokens=None,
        completion_tokens=None,
    )
    server = await model_server([step])
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=50).diagnose(QUERY)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert server.request_count == 1
    assert audit_records(tmp_path)[0]["usage_estimated"] is True


async def test_cancellation_before_any_round(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server([])
    cancel = asyncio.Event()
    cancel.set()
    result = await harness(server, tmp_path).diagnose(QUERY, cancel_event=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert server.request_count == 0


async def test_cancellation_aborts_the_in_flight_request(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT)), ModelStep(content="x", delay_seconds=30)]
    )
    cancel = asyncio.Event()
    task = asyncio.create_task(harness(server, tmp_path).diagnose(QUERY, cancel_event=cancel))
    await server.wait_for_requests(2)
    cancel.set()
    result = await task
    assert result.stop_reason is StopReason.CANCELLED
    assert result.progress is not None and result.progress.checks[0].tool_call_id == "c1"
    for _ in range(100):
        if server.aborted:
            break
        await asyncio.sleep(0.01)
    assert server.aborted == 1  # the model server saw the client go away
    assert server.request_count == 2


async def test_deadline_aborts_the_in_flight_request(
    model_server: StartServer, tmp_path: Path
) -> None:
    # 2 s: room for the run to reach its first request on a busy machine (parallel tests);
    # the request then waits 30 s, so the deadline always finds it in flight.
    server = await model_server([ModelStep(content="x", delay_seconds=30)])
    result = await harness(server, tmp_path, DIAG_DEADLINE_SECONDS=2.0).diagnose(QUERY)
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    for _ in range(100):
        if server.aborted:
            break
        await asyncio.sleep(0.01)
    assert server.aborted == 1
    assert server.request_count == 1


async def test_deadline_during_a_slow_tool_blocks_the_next_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    async def slow(call: object) -> Ready:
        await asyncio.sleep(30)
        return Ready(items=[])

    class SlowAdapter(ScriptedAdapter):
        async def invoke(self, call: object) -> Ready:  # type: ignore[override]
            self.calls.append(call)  # type: ignore[arg-type]
            return await slow(call)

    server = await model_server([tool_step(call("c1", "query_logs", LOGS_INPUT))])
    slow_logs = SlowAdapter(ToolName.QUERY_LOGS)
    # 3 s: room for the first request on a busy machine, still a tenth of the tool's 30 s.
    h = harness(server, tmp_path, adapters(query_logs=slow_logs), DIAG_DEADLINE_SECONDS=3)
    started = time.monotonic()
    result = await h.diagnose(QUERY)
    assert time.monotonic() - started < 3 + 2.0  # the deadline, not the tool, ended it
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    assert server.request_count == 1
    assert len(slow_logs.calls) == 1


# -- the model ignores a STOP_REQUIRED: the stop reason is what caused it (CONTRACTS §6) ------

SQL = {"sql": "SELECT status FROM orders", "purpose": "订单状态"}


def _ignoring(cause: StopReason) -> tuple[list[ModelStep], dict[str, object]]:
    """A script whose round 2 request gets STOP_REQUIRED for ``cause`` and whose round 3
    ignores it with another tool request; and the settings that make it so."""
    evaluation = "NO_GAIN" if cause is StopReason.INFORMATION_SATURATED else "GAINED"
    tokens = {"prompt_tokens": 250, "completion_tokens": 50}
    steps = [
        tool_step(call("c1", "query_logs", LOGS_INPUT), **tokens),
        tool_step(call("c2", "lookup_knowledge", KB, previous=("c1", evaluation)), **tokens),
        tool_step(call("c3", "query_mysql", SQL), **tokens),
    ]
    env: dict[str, object] = {
        StopReason.INFORMATION_SATURATED: {"DIAG_NO_GAIN_STREAK": 1},
        StopReason.TOOL_CALL_BUDGET_EXHAUSTED: {"DIAG_MAX_TOOL_CALLS": 1},
        # No round remains after round 2: its STOP_REQUIRED is final, there is no round 3 in
        # which to ignore it (the gate refuses it before any request).
        StopReason.MODEL_CALL_BUDGET_EXHAUSTED: {"DIAG_MAX_MODEL_CALLS": 2},
        # 300 a round, and an observation is estimated at 1024 tokens: after round 1, 1500 of
        # 1800 are left (>= 300 + 1024: c1 runs); after round 2, 1200 (< 1324: STOP_REQUIRED);
        # round 3 still fits (900 of 1800), so its request meets the ignored STOP_REQUIRED.
        StopReason.TOKEN_BUDGET_EXHAUSTED: {"DIAG_MAX_TOTAL_TOKENS": 1800},
    }[cause]
    if cause is StopReason.MODEL_CALL_BUDGET_EXHAUSTED:
        steps = steps[:2]
    return steps, env


@pytest.mark.parametrize(
    "cause",
    [
        StopReason.INFORMATION_SATURATED,
        StopReason.TOOL_CALL_BUDGET_EXHAUSTED,
        StopReason.MODEL_CALL_BUDGET_EXHAUSTED,
        StopReason.TOKEN_BUDGET_EXHAUSTED,
    ],
)
async def test_an_ignored_stop_required_stops_the_run_for_its_cause(
    model_server: StartServer, tmp_path: Path, cause: StopReason
) -> None:
    steps, env = _ignoring(cause)
    server = await model_server(steps)
    table = adapters()
    result = await harness(server, tmp_path, table, **env).diagnose(QUERY)
    assert result.outcome is Outcome.STOPPED and result.draft is None
    assert result.stop_reason is cause, result.to_json()
    assert server.request_count == len(steps)
    if len(steps) == 3:
        assert tool_messages(server.requests[2])[-1]["observation"]["evidence_status"] == (
            "STOP_REQUIRED"
        )
    assert len(table[ToolName.QUERY_LOGS].calls) == 1
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == table[ToolName.QUERY_MYSQL].calls == []
    assert result.progress is not None
    assert [c.error_code for c in result.progress.checks] == [None, "STOP_REQUIRED"]
    (record,) = audit_records(tmp_path)
    assert record["stop_reason"] == cause.value
