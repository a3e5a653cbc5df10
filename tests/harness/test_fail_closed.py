"""Issue 10, harness items: no input escapes the defined outcomes (CONTRACTS §4, §6).

Each section is a class of hostile input, driven through the real harness and the scripted
model server (which fails on an extra request and on an unused step); request counts are
asserted wherever a budget or a stop is involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.envelope import MAX_JSON_DEPTH, json_too_deep
from sre_diag.contract.prompts import prompt_set
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec
from sre_diag.errors import StopReason
from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready, ToolName
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

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC 2026-11-28")
KB = {"query": "连接池耗尽", "top_k": 2}
NO_CONCLUSION = draft_json(conclusion=False)

# -- 4. deep JSON ----------------------------------------------------------------------------

DEEP = 2000  # a few KB of brackets: far past Python's json recursion limit (1000)


def _deep(kind: str) -> str:
    if kind == "arrays":
        return "[" * DEEP + "]" * DEEP
    if kind == "objects":
        return '{"a":' * DEEP + "1" + "}" * DEEP
    if kind == "mixed":
        return '[{"a":' * (DEEP // 2) + "1" + "}]" * (DEEP // 2)
    if kind == "unclosed":
        return "[" * DEEP
    raise AssertionError(kind)


KINDS = ["arrays", "objects", "mixed", "unclosed"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["whole", "input", "field", "previous_observation"])
async def test_deep_json_arguments_are_an_invalid_envelope(
    model_server: StartServer, tmp_path: Path, kind: str, where: str
) -> None:
    deep = _deep(kind)
    arguments = {
        "whole": deep,
        "input": '{"input": ' + deep + "}",
        "field": '{"input": {"query": "disk", "top_k": ' + deep + "}}",
        "previous_observation": '{"previous_observation": ' + deep + ', "input": {"query": "x"}}',
    }[where]
    server = await model_server(
        [
            tool_step(ToolCallSpec(id="c1", name="lookup_knowledge", arguments=arguments)),
            final_step(NO_CONCLUSION),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert (observation["evidence_status"], observation["error_code"]) == (
        "REJECTED",
        "INVALID_ENVELOPE",
    )
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.outcome is Outcome.DRAFT
    assert server.request_count == 2
    assert [r["run_id"] for r in audit_records(tmp_path)] == [result.run_id]


async def test_brackets_inside_strings_are_not_nesting(
    model_server: StartServer, tmp_path: Path
) -> None:
    query = '[{"' * 100 + '\\"]' * 60  # 460 characters of brackets, quotes and escapes
    server = await model_server(
        [
            tool_step(call("c1", "lookup_knowledge", {"query": query})),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert [c.input.query for c in table[ToolName.LOOKUP_KNOWLEDGE].calls] == [query]
    assert result.outcome is Outcome.DRAFT


def _draft_with(value: str) -> str:
    draft = json.loads(NO_CONCLUSION)
    draft["action_plan"] = ["PLACEHOLDER"]
    return json.dumps(draft, ensure_ascii=False).replace('"PLACEHOLDER"', value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["whole", "inside-a-draft"])
async def test_deep_json_final_text_fails_closed_with_a_result_and_an_audit_record(
    model_server: StartServer, tmp_path: Path, kind: str, where: str
) -> None:
    text = _deep(kind) if where == "whole" else _draft_with(_deep(kind))
    server = await model_server([final_step(text)])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED and result.run_id
    assert result.failure is not None
    assert (result.failure.code, result.failure.detail) == (FailureCode.INVALID_DRAFT, "TOO_DEEP")
    assert server.request_count == 1
    record = audit_records(tmp_path)[0]
    assert (record["run_id"], record["failure"]["detail"]) == (result.run_id, "TOO_DEEP")


async def test_a_deeply_nested_model_response_body_fails_closed(
    model_server: StartServer, tmp_path: Path
) -> None:
    body = '{"id": "x", "choices": ' + _deep("arrays") + "}"
    server = await model_server([ModelStep(raw_body=body)])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.failure is not None and result.failure.code is FailureCode.MODEL_ERROR
    assert server.request_count == 1
    assert [r["run_id"] for r in audit_records(tmp_path)] == [result.run_id]


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
        ("[]" * 10_000, False),  # many, but shallow
        ('"' + "[" * 1000 + '"', False),  # inside a string
        ('"\\\\"' + "[" * 40, True),  # an escaped backslash closes nothing: the string ends
        ('"\\"' + "[" * 40 + '"', False),  # an escaped quote does not end the string
        ("{" * 40, True),  # unclosed counts as written
    ],
)
def test_json_nesting_is_measured_outside_strings(text: str, deep: bool) -> None:
    assert json_too_deep(text) is deep


# -- 7. the token budget: "exhausted" after a round means OVER it ----------------------------


async def test_a_final_round_landing_exactly_on_the_token_budget_keeps_its_draft(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Round 1 (80) leaves 1120, room for one more round like it plus an observation's estimate
    # (1024): c1 runs; the final round lands on exactly 1200.
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT), prompt_tokens=60, completion_tokens=20),
            final_step(draft_json(["c1"]), prompt_tokens=1090, completion_tokens=30),
        ]
    )
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=1200).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert result.usage.prompt_tokens + result.usage.completion_tokens == 1200
    assert server.request_count == 2


async def test_a_tool_round_landing_exactly_on_the_token_budget_is_answered_and_stops_the_next(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The round was within the budget: its request is answered, not discarded — STOP_REQUIRED,
    # since no round is left to read a result (as with a model-call budget of 1).
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT), prompt_tokens=100, completion_tokens=20)]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_TOTAL_TOKENS=120).diagnose(QUERY)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert result.progress is not None
    assert [(c.tool_call_id, c.error_code) for c in result.progress.checks] == [
        ("c1", "STOP_REQUIRED")
    ]
    assert table[ToolName.QUERY_LOGS].calls == []
    assert server.request_count == 1  # the next round never reached the server


async def test_a_final_round_one_token_over_the_budget_keeps_its_draft(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The gate authorized the round; its answer exists: the Draft is kept, the overrun shows.
    server = await model_server(
        [final_step(NO_CONCLUSION, prompt_tokens=100, completion_tokens=21)]
    )
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=120).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT and result.draft is not None
    assert result.usage.prompt_tokens + result.usage.completion_tokens == 121
    assert server.request_count == 1


# -- 8. no observation of any kind pushes a run past its capacity ----------------------------

BROKEN = '{"input": {}}'  # an invalid envelope: REJECTED, never executed


def _flood_round(round_no: int, size: int, *, unknown: bool = False) -> ModelStep:
    name = "restart_service" if unknown else "lookup_knowledge"
    calls = [ToolCallSpec(id=f"r{round_no}-{n}", name=name, arguments=BROKEN) for n in range(size)]
    return ModelStep(tool_calls=calls)


def _sent_bytes(body: dict[str, Any]) -> int:
    return sum(len(m["content"].encode()) for m in body["messages"] if m["role"] == "tool")


@pytest.mark.parametrize("unknown", [False, True], ids=["rejected", "unknown-tools"])
async def test_a_flood_over_rounds_gets_stop_required_and_the_draft_stays_reachable(
    model_server: StartServer, tmp_path: Path, unknown: bool
) -> None:
    # 60 calls a round. Rounds fit while their answers leave room for one STOP_REQUIRED and a
    # full Draft; the first round that does not (the 4th; the 5th for the smaller UNKNOWN_TOOL
    # answers) gets STOP_REQUIRED on its first call, the other 59 still get their answers.
    count = 5 if unknown else 4
    rounds = [_flood_round(n, 60, unknown=unknown) for n in range(1, count + 1)]
    small_draft = NO_CONCLUSION
    assert len(small_draft.encode()) < 1000
    server = await model_server([*rounds, final_step(small_draft)])
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert server.request_count == count + 1
    seen = [m["observation"] for m in tool_messages(server.requests[count])]
    assert len(seen) == 60 * count
    stops = [n for n, o in enumerate(seen) if o["evidence_status"] == "STOP_REQUIRED"]
    assert stops == [60 * (count - 1)]  # only the first call of the last tool round
    code = "UNKNOWN_TOOL" if unknown else "ONE_TOOL_PER_ROUND"
    assert {o.get("error_code") for o in seen[-59:]} == {code}
    for request in server.requests:  # the capacity held at every round
        assert result.usage.bytes >= _sent_bytes(request)
    assert result.usage.bytes <= 65536
    input_bytes = (
        result.usage.bytes - _sent_bytes(server.requests[count]) - len(small_draft.encode())
    )
    assert 0 < input_bytes < 200  # usage.bytes is exactly input + observations + Draft
    assert all(not a.calls for a in table.values())


@pytest.mark.parametrize("unknown", [False, True], ids=["rejected", "unknown-tools"])
async def test_a_flood_no_capacity_can_answer_ends_the_run_at_once(
    model_server: StartServer, tmp_path: Path, unknown: bool
) -> None:
    server = await model_server([_flood_round(1, 400, unknown=unknown)])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.STOPPED
    # The byte capacity is the run's context budget: never reported as saturation.
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert result.usage.bytes <= 65536
    assert server.request_count == 1  # no round was given an answer it could not hold


async def test_a_small_capacity_answers_stop_required_to_an_unknown_tool(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [tool_step(call("x1", "restart_service", {})), final_step(NO_CONCLUSION)]
    )
    h = harness(server, tmp_path, DIAG_RUN_CAPACITY_BYTES=17000)
    result = await h.diagnose(QUERY)
    assert tool_messages(server.requests[1])[0]["observation"]["evidence_status"] == (
        "STOP_REQUIRED"
    )
    assert result.outcome is Outcome.DRAFT and result.usage.bytes <= 17000
    assert result.progress is not None and result.progress.checks == ()  # unknown: no record


# -- 9. ids, adapters that return nothing usable, evaluations of nothing ---------------------


@pytest.mark.parametrize("length", [129, 4000])
async def test_an_id_longer_than_a_draft_can_cite_never_runs(
    model_server: StartServer, tmp_path: Path, length: int
) -> None:
    long_id = "c" * length
    server = await model_server(
        [tool_step(call(long_id, "query_logs", LOGS_INPUT)), final_step(NO_CONCLUSION)]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    message = tool_messages(server.requests[1])[0]
    assert message["observation"]["error_code"] == "INVALID_ENVELOPE"
    assert "tool_call_id too long" in message["observation"]["hint"]
    assert message["observation"]["tool_call_id"] == long_id[:128]
    assert len(message["content"].encode()) <= 4096
    assert table[ToolName.QUERY_LOGS].calls == []
    assert result.progress is not None and result.progress.checks == ()  # no invocation


@pytest.mark.parametrize(
    ("call_id", "runs"),
    [
        ("\x01" * 128, False),  # 768 bytes once escaped: no observation of it fits 256 bytes
        ("调" * 60, False),  # 180 bytes: an empty READY observation would not fit either
        ("c" * 100, True),  # fits: runs, and its observation is trimmed to the bound
    ],
    ids=["escaped", "multibyte", "ascii"],
)
async def test_the_observation_bound_holds_for_any_id(
    model_server: StartServer, tmp_path: Path, call_id: str, runs: bool
) -> None:
    server = await model_server(
        [
            tool_step(
                call(call_id, "query_logs", LOGS_INPUT),
                ToolCallSpec(id=call_id + "x" * 500, name="r" * 9000, arguments="{}"),
            ),
            final_step(NO_CONCLUSION),
        ]
    )
    table = adapters()
    h = harness(server, tmp_path, table, DIAG_MAX_OBSERVATION_BYTES=256)
    result = await h.diagnose(QUERY)
    messages = tool_messages(server.requests[1])
    assert len(messages) == 2
    assert all(len(m["content"].encode()) <= 256 for m in messages)
    assert len(table[ToolName.QUERY_LOGS].calls) == (1 if runs else 0)
    assert result.outcome is Outcome.DRAFT


@pytest.mark.parametrize(
    "answer",
    [None, "not a result", Ready(items=["not a model"]), Failed("BOGUS")],  # type: ignore[arg-type]
    ids=["none", "string", "unprojectable-items", "unknown-error-code"],
)
async def test_an_adapter_that_returns_a_non_result_is_recorded_as_error_internal(
    model_server: StartServer, tmp_path: Path, answer: object
) -> None:
    broken = ScriptedAdapter(ToolName.QUERY_LOGS, lambda c: answer)  # type: ignore[arg-type,return-value]
    server = await model_server(
        [tool_step(call("c1", "query_logs", LOGS_INPUT)), final_step(NO_CONCLUSION)]
    )
    result = await harness(server, tmp_path, adapters(query_logs=broken)).diagnose(QUERY)
    observation = tool_messages(server.requests[1])[0]["observation"]
    assert (observation["evidence_status"], observation["error_code"]) == ("ERROR", "INTERNAL")
    assert result.outcome is Outcome.DRAFT and result.usage.tool_calls == 1
    assert result.progress is not None
    assert [(c.status, c.error_code) for c in result.progress.checks] == [("ERROR", "INTERNAL")]
    invocations = audit_records(tmp_path)[0]["invocations"]
    assert [(i["status"], i["code"]) for i in invocations] == [("ERROR", "INTERNAL")]


def _empty(call: AdapterCall[Any]) -> Ready:
    return Ready(items=[])


@pytest.mark.parametrize(
    ("first", "named"),
    [
        ("error", "c1"),  # an ERROR result has nothing to evaluate
        ("rejected", "c1"),  # neither has a REJECTED one
        ("empty", "c1"),  # an empty READY result already counted NO_GAIN by itself
        ("evaluated", "c1"),  # evaluated once already (by c2)
        ("error", "c-never-made"),  # an id this run never handled
    ],
)
async def test_previous_observation_naming_nothing_pending_is_refused(
    model_server: StartServer, tmp_path: Path, first: str, named: str
) -> None:
    """Decision: with nothing pending, previous_observation must be absent; naming any call
    (ERROR, REJECTED, empty, already evaluated, unknown) is refused PREVIOUS_OBSERVATION_MISMATCH
    without running the adapter, never silently dropped."""
    table = adapters()
    if first == "error":
        table[ToolName.QUERY_LOGS] = ScriptedAdapter(
            ToolName.QUERY_LOGS, lambda c: Failed(AdapterErrorCode.UNAVAILABLE)
        )
    elif first == "empty":
        table[ToolName.QUERY_LOGS] = ScriptedAdapter(ToolName.QUERY_LOGS, _empty)
    steps = [
        tool_step(
            ToolCallSpec(id="c1", name="query_logs", arguments="{broken")
            if first == "rejected"
            else call("c1", "query_logs", LOGS_INPUT)
        )
    ]
    if first == "evaluated":
        steps.append(tool_step(call("c2", "query_mysql", {"sql": "SELECT 1", "purpose": "p"},
                                    previous=("c1", "GAINED"))))  # fmt: skip
        table[ToolName.QUERY_MYSQL] = ScriptedAdapter(ToolName.QUERY_MYSQL, _empty)
    steps += [
        tool_step(call("c3", "lookup_knowledge", KB, previous=(named, "NO_GAIN"))),
        final_step(NO_CONCLUSION),
    ]
    server = await model_server(steps)
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    observation = tool_messages(server.requests[-1])[-1]["observation"]
    assert observation["tool_call_id"] == "c3"
    assert observation["error_code"] == "PREVIOUS_OBSERVATION_MISMATCH"
    assert observation["hint"] == prompt_set("zh").hints["NOTHING_PENDING"]
    assert "expected_previous_tool_call_id" not in observation
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.outcome is Outcome.DRAFT
    assert server.request_count == len(steps)
