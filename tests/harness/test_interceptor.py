"""Interceptor rules of CONTRACTS §4, through the real agent loop and the scripted model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.doubles.scripted_model import ToolCallSpec
from sre_diag.errors import StopReason
from sre_diag.tools.base import AdapterCall, Ready, ToolName
from sre_diag.tools.schemas import LogItem
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
KB = {"query": "连接池耗尽", "top_k": 2}
FORBIDDEN_OBSERVATION_WORDS = ("budget", "remaining", "threshold", "streak", "limit")


def raw(call_id: str, tool: str, text: str) -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name=tool, arguments=text)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ('{"input": {"query": "disk fu', "arguments are not valid JSON"),
        ('{"input": {"query": "disk full"}, "extra": 1}', "extra"),
        ('{"input": {"query": "disk full", "top_k": 3, "mode": "x"}}', "input.mode"),
        ('{"input": {"query": "disk full", "top_k": "3"}}', "input.top_k"),
        ('{"input": {"query": "disk full", "top_k": 9}}', "input.top_k"),
        ('{"input": {"query": "   "}}', "input"),
        ('{"input": {"query": "a"}, "input": {"query": "b"}}', "duplicate key"),
        ('["input"]', "arguments must be a JSON object"),
        ("{}", "input"),
    ],
)
async def test_invalid_envelope_never_reaches_the_adapter(
    model_server: StartServer, tmp_path: Path, arguments: str, field: str
) -> None:
    server = await model_server(
        [
            tool_step(raw("c1", "lookup_knowledge", arguments)),
            final_step(draft_json(conclusion=False)),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert observation["evidence_status"] == "REJECTED"
    assert observation["error_code"] == "INVALID_ENVELOPE"
    assert field in observation["hint"]
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.progress is not None
    assert [(c.status, c.error_code) for c in result.progress.checks] == [
        ("REJECTED", "INVALID_ENVELOPE")
    ]


async def test_logs_window_rules_are_business_input_errors(
    model_server: StartServer, tmp_path: Path
) -> None:
    too_long = {**LOGS_INPUT, "end": "2026-11-29T10:00:01Z"}
    reversed_window = {**LOGS_INPUT, "start": "2026-11-28T11:00:00Z"}
    naive = {**LOGS_INPUT, "start": "2026-11-28T10:00:00"}
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", too_long)),
            tool_step(call("c2", "query_logs", reversed_window)),
            tool_step(call("c3", "query_logs", naive)),
            final_step(draft_json(conclusion=False)),
        ]
    )
    table = adapters()
    await harness(server, tmp_path, table).diagnose(QUERY)
    codes = [m["observation"]["error_code"] for m in tool_messages(server.requests[3])]
    assert codes == ["INVALID_ENVELOPE"] * 3
    assert table[ToolName.QUERY_LOGS].calls == []


async def test_previous_observation_mismatch(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", KB, previous=("c9", "GAINED"))),
            tool_step(call("c3", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1", "c3"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    mismatch = tool_messages(server.requests[2])[-1]["observation"]
    assert mismatch["error_code"] == "PREVIOUS_OBSERVATION_MISMATCH"
    assert mismatch["expected_previous_tool_call_id"] == "c1"
    assert len(table[ToolName.LOOKUP_KNOWLEDGE].calls) == 1
    assert result.outcome is Outcome.DRAFT


async def test_equivalent_request_is_a_duplicate_counted_as_no_gain(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Same window written in another offset, another key order: canonically equal.
    same = {
        "level": "ERROR",
        "end": "2026-11-28T18:30:00+08:00",
        "start": "2026-11-28T18:00:00+08:00",
        "service": "payment-api",
    }
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "query_logs", same, previous=("c1", "NO_GAIN"))),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    await harness(server, tmp_path, table).diagnose(QUERY)
    # NO_GAIN (1) + duplicate counted as NO_GAIN (2) reaches the streak: a stop is required.
    assert (
        tool_messages(server.requests[2])[-1]["observation"]["evidence_status"] == "STOP_REQUIRED"
    )
    assert len(table[ToolName.QUERY_LOGS].calls) == 1

    server2 = await model_server(
        [
            tool_step(call("d1", "query_logs", LOGS_INPUT)),
            tool_step(call("d2", "query_logs", same, previous=("d1", "GAINED"))),
            final_step(draft_json(["d1"])),
        ]
    )
    await harness(server2, tmp_path).diagnose(QUERY)
    duplicate = tool_messages(server2.requests[2])[-1]["observation"]
    assert duplicate["error_code"] == "DUPLICATE_CALL"


async def test_one_tool_per_round(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(
                call("c1", "query_logs", LOGS_INPUT),
                call("c2", "lookup_knowledge", KB),
                call("c3", "query_mysql", {"sql": "SELECT 1", "purpose": "p"}),
            ),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert server.requests[0]["parallel_tool_calls"] is False
    observations = {m["tool_call_id"]: m["observation"] for m in tool_messages(server.requests[1])}
    assert observations["c1"]["evidence_status"] == "READY"
    assert observations["c2"]["error_code"] == "ONE_TOOL_PER_ROUND"
    assert observations["c3"]["error_code"] == "ONE_TOOL_PER_ROUND"
    assert len(table[ToolName.QUERY_LOGS].calls) == 1
    assert not table[ToolName.LOOKUP_KNOWLEDGE].calls and not table[ToolName.QUERY_MYSQL].calls
    assert result.outcome is Outcome.DRAFT


async def test_tool_call_budget_requires_a_stop(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_TOOL_CALLS=1).diagnose(QUERY)
    assert (
        tool_messages(server.requests[2])[-1]["observation"]["evidence_status"] == "STOP_REQUIRED"
    )
    assert result.usage.tool_calls == 1
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []


async def test_byte_capacity_requires_a_stop(model_server: StartServer, tmp_path: Path) -> None:
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT)), final_step(draft_json(conclusion=False))]
    )
    table = adapters()
    result = await harness(
        server,
        tmp_path,
        table,
        DIAG_RUN_CAPACITY_BYTES=20000,
        DIAG_MAX_DRAFT_BYTES=16384,
        DIAG_MAX_OBSERVATION_BYTES=4096,
    ).diagnose(QUERY)
    assert tool_messages(server.requests[1])[0]["observation"]["evidence_status"] == "STOP_REQUIRED"
    assert table[ToolName.QUERY_LOGS].calls == []
    assert result.outcome is Outcome.DRAFT


async def test_observation_is_bounded_and_says_nothing_about_budgets(
    model_server: StartServer, tmp_path: Path
) -> None:
    def many(call: AdapterCall[Any]) -> Ready:
        return Ready(
            items=[
                LogItem(
                    ts="2026-11-28T10:05:00Z",
                    service="payment-api",
                    level="ERROR",
                    message="db pool exhausted " + "x" * 400,
                )
                for _ in range(50)
            ]
        )

    logs = ScriptedAdapter(ToolName.QUERY_LOGS, many)
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT)), final_step(draft_json(["c1"]))]
    )
    result = await harness(server, tmp_path, adapters(query_logs=logs)).diagnose(QUERY)
    message = tool_messages(server.requests[1])[0]
    assert len(message["content"].encode()) <= 4096
    observation = message["observation"]
    assert observation["truncated"] is True
    assert 0 < observation["item_count"] == len(observation["items"]) < 50
    assert set(observation) == {
        "tool_call_id",
        "tool",
        "evidence_status",
        "item_count",
        "items",
        "truncated",
    }
    assert all(set(item) == {"ts", "service", "level", "message"} for item in observation["items"])
    for request in server.requests:
        for m in tool_messages(request):
            assert not any(word in m["content"] for word in FORBIDDEN_OBSERVATION_WORDS)
    assert (
        result.progress is not None
        and result.progress.checks[0].item_count == observation["item_count"]
    )


async def test_adapter_exception_becomes_internal_without_its_text(
    model_server: StartServer, tmp_path: Path
) -> None:
    canary = "CANARY-adapter-secret-7f3a"

    def boom(call: AdapterCall[Any]) -> Ready:
        raise RuntimeError(f"connect failed: mysql://root:{canary}@db")

    mysql = ScriptedAdapter(ToolName.QUERY_MYSQL, boom)
    server = await model_server(
        [
            tool_step(call("c1", "query_mysql", {"sql": "SELECT 1", "purpose": "探测"})),
            final_step(draft_json(conclusion=False)),
        ]
    )
    result = await harness(server, tmp_path, adapters(query_mysql=mysql)).diagnose(QUERY)
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert observation["error_code"] == "INTERNAL"
    assert canary not in json.dumps(server.requests)
    assert canary not in result.to_json()
    assert canary not in json.dumps(audit_records(tmp_path))


async def test_reused_tool_call_id_is_not_recorded_twice(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c1", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert tool_messages(server.requests[2])[-1]["observation"]["error_code"] == "INVALID_ENVELOPE"
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.progress is not None and len(result.progress.checks) == 1


async def test_citing_a_rejected_call_is_an_unknown_citation(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(raw("c1", "query_logs", "{broken")), final_step(draft_json(["c1"]))]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.failure is not None and result.failure.detail == "UNKNOWN_CITATION"


async def test_citing_a_call_of_another_run_is_an_unknown_citation(
    model_server: StartServer, tmp_path: Path
) -> None:
    first = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT)), final_step(draft_json(["c1"]))]
    )
    second = await model_server([final_step(draft_json(["c1"]))])
    assert (await harness(first, tmp_path).diagnose(QUERY)).outcome is Outcome.DRAFT
    result = await harness(second, tmp_path).diagnose(QUERY)
    assert result.failure is not None and result.failure.detail == "UNKNOWN_CITATION"


async def test_stop_reason_after_a_tool_budget_stop_required_is_that_budget(
    model_server: StartServer, tmp_path: Path
) -> None:
    # c2 gets STOP_REQUIRED because the one tool call is spent (c1 was GAINED: no saturation);
    # the model ignores it: the run stops for the tool-call budget, not INFORMATION_SATURATED.
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", KB, previous=("c1", "GAINED"))),
            tool_step(call("c3", "lookup_knowledge", {"query": "other"})),
        ]
    )
    result = await harness(server, tmp_path, DIAG_MAX_TOOL_CALLS=1).diagnose(QUERY)
    assert result.stop_reason is StopReason.TOOL_CALL_BUDGET_EXHAUSTED
    assert server.request_count == 3
