"""Catalogue of hostile model behaviour, scripted through the real harness (table-driven).

Each row names what the model does, and the defined end: the outcome with its stop reason or
failure detail (CONTRACTS §6), the exact number of requests the model server received (so
nothing ran past a budget or a stop), how many times each adapter ran, and what the model was
told on the way (the observation status or error code it saw, by request index). Every row then
checks the run's audit record and that the same Harness serves a healthy diagnosis next.

Rows marked "(also in tests/harness)" restate a spec scenario here so this table is the single
list; they add the audit and still-serves invariants.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec
from sre_diag.errors import StopReason
from sre_diag.tools.base import AdapterErrorCode, Failed, ToolName
from tests.conftest import StartServer
from tests.harness.support import (
    ScriptedAdapter,
    adapters,
    call,
    draft_json,
    final_step,
    tool_step,
)
from tests.reliability.support import (
    LOGS_WINDOW,
    QUERY,
    assert_still_serves,
    audit_of,
    build,
    healthy_step,
    observations,
)

LOGS = {"service": "payment-api", **LOGS_WINDOW, "level": "ERROR"}
LOGS_SAME = {  # canonically equal to LOGS: other offset, other key order
    "level": "ERROR",
    "end": "2026-11-28T18:30:00+08:00",
    "start": "2026-11-28T18:00:00+08:00",
    "service": "payment-api",
}
KB = {"query": "db pool exhausted", "top_k": 2}
SQL = {"sql": "SELECT status, COUNT(*) FROM payments GROUP BY status", "purpose": "mix"}
L, K, M = "query_logs", "lookup_knowledge", "query_mysql"
MB = 1024 * 1024


def raw(call_id: str, tool: str, text: str) -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name=tool, arguments=text)


def draft_text(cited: list[str], **changes: Any) -> str:
    draft = json.loads(draft_json(cited, conclusion=bool(cited)))
    draft.update(changes)
    return json.dumps(draft, ensure_ascii=False)


VALID = draft_json(["c1"])


@dataclass(frozen=True)
class Hostile:
    name: str
    steps: list[ModelStep]
    outcome: Outcome
    why: str  # the stop reason or failure detail; "" for a Draft
    requests: int
    runs: dict[str, int] = field(default_factory=dict)  # adapter runs by tool (others: 0)
    saw: dict[int, list[str]] = field(default_factory=dict)  # request → its observations
    env: dict[str, Any] = field(default_factory=dict)
    failing_mysql: bool = False


def _seen(observation: dict[str, Any]) -> str:
    return str(observation.get("error_code") or observation["evidence_status"])


CASES = [
    # -- stop and loop discipline ----------------------------------------------------------
    Hostile(
        "ignores-stop-required (also in tests/harness)",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "NO_GAIN"))),
            tool_step(call("c3", M, SQL, previous=("c2", "NO_GAIN"))),
            tool_step(call("c4", L, {**LOGS, "service": "order-service"})),
        ],
        Outcome.STOPPED,
        StopReason.INFORMATION_SATURATED,
        4,
        {L: 1, K: 1},
        {3: ["READY", "READY", "STOP_REQUIRED"]},
    ),
    Hostile(
        "ignores-stop-required-with-an-unknown-tool",  # an unknown tool buys no extra round
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "NO_GAIN"))),
            tool_step(call("c3", M, SQL, previous=("c2", "NO_GAIN"))),
            tool_step(call("x1", "run_shell", {"cmd": "id"})),
        ],
        Outcome.STOPPED,
        StopReason.INFORMATION_SATURATED,
        4,
        {L: 1, K: 1},
        {3: ["READY", "READY", "STOP_REQUIRED"]},
    ),
    Hostile(
        "ignores-stop-required-with-parallel-unknown-tools",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "NO_GAIN"))),
            tool_step(call("c3", M, SQL, previous=("c2", "NO_GAIN"))),
            tool_step(call("x1", "run_shell", {}), call("x2", "run_shell", {})),
        ],
        Outcome.STOPPED,
        StopReason.INFORMATION_SATURATED,
        4,
        {L: 1, K: 1},
    ),
    Hostile(
        "loops-the-same-call",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", L, LOGS_SAME, previous=("c1", "GAINED"))),
            tool_step(call("c3", L, LOGS)),
            tool_step(call("c4", L, LOGS_SAME)),
        ],
        Outcome.STOPPED,
        StopReason.INFORMATION_SATURATED,
        4,
        {L: 1},
        {3: ["READY", "DUPLICATE_CALL", "STOP_REQUIRED"]},
    ),
    Hostile(
        "loops-a-failing-call",
        [
            tool_step(call("c1", M, SQL)),
            tool_step(call("c2", M, {**SQL, "purpose": "again"})),
            tool_step(call("c3", M, {**SQL, "purpose": "once more"})),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        4,
        {M: 1},
        {3: ["UNAVAILABLE", "DUPLICATE_CALL", "STOP_REQUIRED"]},
        failing_mysql=True,
    ),
    Hostile(
        "unknown-tools-until-the-last-round",  # no round remains after the last to read one
        [tool_step(call(f"x{n}", "Query_MySQL", SQL)) for n in range(3)],
        Outcome.STOPPED,
        StopReason.MODEL_CALL_BUDGET_EXHAUSTED,  # the last round's request: STOP_REQUIRED
        3,
        {},
        {2: ["UNKNOWN_TOOL", "UNKNOWN_TOOL"]},
        {"DIAG_MAX_MODEL_CALLS": 3},
    ),
    Hostile(
        "unknown-tool-with-one-model-round",  # nothing can read an answer: budget exhausted
        [tool_step(call("x1", "run_shell", {}))],
        Outcome.STOPPED,
        StopReason.MODEL_CALL_BUDGET_EXHAUSTED,
        1,
        env={"DIAG_MAX_MODEL_CALLS": 1},
    ),
    # -- the round that meets a stop: its extra calls are answered, the model still answers --
    Hostile(
        "parallel-calls-in-the-saturating-round",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "NO_GAIN"))),
            tool_step(
                call("c3", M, SQL, previous=("c2", "NO_GAIN")),
                call("c4", L, {**LOGS, "service": "order-service"}),
                call("x5", "run_shell", {}),
                call("c2", K, KB),
            ),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        4,
        {L: 1, K: 1},
        {
            3: [
                "READY",
                "READY",
                "STOP_REQUIRED",
                "ONE_TOOL_PER_ROUND",
                "UNKNOWN_TOOL",
                "INVALID_ENVELOPE",
            ]
        },
    ),
    Hostile(
        "parallel-calls-in-the-last-round-but-one",  # one round of headroom: c1 runs
        [
            tool_step(call("c1", L, LOGS), call("c2", K, KB), call("c3", M, SQL)),
            final_step(VALID),
        ],
        Outcome.DRAFT,
        "",
        2,
        {L: 1},
        {1: ["READY", "ONE_TOOL_PER_ROUND", "ONE_TOOL_PER_ROUND"]},
        {"DIAG_MAX_MODEL_CALLS": 2},
    ),
    Hostile(
        "parallel-calls-past-the-tool-budget",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "GAINED")), call("c3", M, SQL)),
            final_step(VALID),
        ],
        Outcome.DRAFT,
        "",
        3,
        {L: 1},
        {2: ["READY", "STOP_REQUIRED", "ONE_TOOL_PER_ROUND"]},
        {"DIAG_MAX_TOOL_CALLS": 1},
    ),
    Hostile(
        "parallel-duplicate-in-the-saturating-round",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", L, LOGS_SAME, previous=("c1", "NO_GAIN")), call("c3", K, KB)),
            final_step(VALID),
        ],
        Outcome.DRAFT,
        "",
        3,
        {L: 1},
        {2: ["READY", "STOP_REQUIRED", "ONE_TOOL_PER_ROUND"]},
    ),
    Hostile(
        "ignores-stop-required-with-parallel-calls",
        [
            tool_step(call("c1", L, LOGS), call("c2", K, KB)),
            tool_step(call("c3", K, KB, previous=("c1", "GAINED")), call("c4", M, SQL)),
            tool_step(call("c5", M, SQL), call("c6", K, KB)),
        ],
        Outcome.STOPPED,
        StopReason.TOOL_CALL_BUDGET_EXHAUSTED,  # the tool budget caused the STOP_REQUIRED
        3,
        {L: 1},
        {2: ["READY", "ONE_TOOL_PER_ROUND", "STOP_REQUIRED", "ONE_TOOL_PER_ROUND"]},
        {"DIAG_MAX_TOOL_CALLS": 1},
    ),
    # -- parallel calls --------------------------------------------------------------------
    Hostile(
        "parallel-calls (also in tests/harness)",
        [
            tool_step(call("c1", L, LOGS), call("c2", K, KB), call("c3", M, SQL)),
            final_step(VALID),
        ],
        Outcome.DRAFT,
        "",
        2,
        {L: 1},
        {1: ["READY", "ONE_TOOL_PER_ROUND", "ONE_TOOL_PER_ROUND"]},
    ),
    Hostile(
        "parallel-calls-sharing-one-id",
        [tool_step(call("c1", L, LOGS), call("c1", K, KB)), final_step(VALID)],
        Outcome.DRAFT,
        "",
        2,
        {L: 1},
        {1: ["READY", "INVALID_ENVELOPE"]},
    ),
    Hostile(
        "parallel-calls-behind-an-unknown-tool",
        [
            tool_step(call("x1", "restart_service", {}), call("c2", L, LOGS)),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        2,
        {},
        {1: ["UNKNOWN_TOOL", "ONE_TOOL_PER_ROUND"]},
    ),
    # -- arguments -------------------------------------------------------------------------
    Hostile(
        "multi-megabyte-arguments",
        [
            tool_step(call("c1", K, {"query": "x" * (3 * MB)})),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        2,
        {},
        {1: ["INVALID_ENVELOPE"]},
    ),
    Hostile(
        "multi-megabyte-truncated-arguments",
        [
            tool_step(raw("c1", M, '{"input": {"sql": "SELECT ' + "1," * MB)),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        2,
        {},
        {1: ["INVALID_ENVELOPE"]},
    ),
    # -- token usage -----------------------------------------------------------------------
    Hostile(
        "usage-jumps-past-the-budget-in-one-round (also in tests/harness)",
        [tool_step(call("c1", L, LOGS), prompt_tokens=900_000)],
        Outcome.STOPPED,
        StopReason.TOKEN_BUDGET_EXHAUSTED,
        1,
    ),
    Hostile(
        "usage-jumps-past-the-budget-on-the-final-round",  # authorized: its Draft is kept
        [tool_step(call("c1", L, LOGS)), final_step(VALID, prompt_tokens=900_000)],
        Outcome.DRAFT,
        "",
        2,
        {L: 1},
    ),
    Hostile(
        "negative-usage-cannot-refill-the-budget",
        [
            tool_step(call("c1", L, LOGS), prompt_tokens=-1_000_000, completion_tokens=0),
        ],
        Outcome.STOPPED,
        StopReason.TOKEN_BUDGET_EXHAUSTED,
        1,
        env={"DIAG_MAX_TOTAL_TOKENS": 500},
    ),
    # -- citations -------------------------------------------------------------------------
    Hostile(
        "cites-an-id-that-does-not-exist",
        [tool_step(call("c1", L, LOGS)), final_step(draft_json(["c1", "call-999"]))],
        Outcome.FAILED,
        "UNKNOWN_CITATION",
        2,
        {L: 1},
    ),
    Hostile(
        "cites-a-rejected-call (also in tests/harness)",
        [tool_step(raw("c1", L, "{broken")), final_step(VALID)],
        Outcome.FAILED,
        "UNKNOWN_CITATION",
        2,
    ),
    Hostile(
        "cites-an-error-call",
        [tool_step(call("c1", M, SQL)), final_step(VALID)],
        Outcome.FAILED,
        "UNKNOWN_CITATION",
        2,
        {M: 1},
        failing_mysql=True,
    ),
    Hostile(
        "cites-the-stop-required-call",
        [
            tool_step(call("c1", L, LOGS)),
            tool_step(call("c2", K, KB, previous=("c1", "NO_GAIN"))),
            tool_step(call("c3", M, SQL, previous=("c2", "NO_GAIN"))),
            final_step(draft_json(["c1", "c3"])),
        ],
        Outcome.FAILED,
        "UNKNOWN_CITATION",
        4,
        {L: 1, K: 1},
    ),
    Hostile(
        "cites-an-unknown-tool-call",
        [tool_step(call("c1", "run_shell", {})), final_step(VALID)],
        Outcome.FAILED,
        "UNKNOWN_CITATION",
        2,
    ),
    # -- the final text --------------------------------------------------------------------
    Hostile("fenced-draft", [final_step(f"```json\n{VALID}\n```")], Outcome.FAILED, "FENCED", 1),
    Hostile("prefixed-draft", [final_step(f"Draft: {VALID}")], Outcome.FAILED, "PREFIXED", 1),
    Hostile("two-drafts", [final_step(VALID + VALID)], Outcome.FAILED, "SUFFIXED", 1),
    Hostile(
        "duplicate-key-draft",
        [final_step(VALID[:-1] + ', "conclusion": null}')],
        Outcome.FAILED,
        "DUPLICATE_KEY",
        1,
    ),
    Hostile(
        "extra-key-draft",
        [final_step(draft_text([], tool_calls=[{"name": "query_mysql"}]))],
        Outcome.FAILED,
        "SCHEMA",
        1,
    ),
    Hostile(
        "truncated-draft", [final_step(VALID[: len(VALID) // 2])], Outcome.FAILED, "MALFORMED", 1
    ),
    Hostile(
        "nan-in-draft",
        [final_step(VALID.replace('"HIGH"', "NaN"))],
        Outcome.FAILED,
        "MALFORMED",
        1,
    ),
    Hostile(
        "oversized-draft",
        [final_step(draft_text([], recommendations=["x" * 290] * 60))],
        Outcome.FAILED,
        "OVERSIZED",
        1,
    ),
    Hostile(
        "draft-past-the-run-capacity",
        [final_step(draft_text([], action_plan=["检查" * 100] * 3))],
        Outcome.FAILED,
        "OVERSIZED",
        1,
        env={"DIAG_RUN_CAPACITY_BYTES": 1500},
    ),
    Hostile(
        "statement-over-its-bound",
        [
            tool_step(call("c1", L, LOGS)),
            final_step(VALID.replace("10:05 起大量 db pool exhausted 错误", "x" * 501)),
        ],
        Outcome.FAILED,
        "SCHEMA",
        2,
        {L: 1},
    ),
    Hostile(
        "finding-without-evidence",
        [
            final_step(
                draft_text(
                    [],
                    analysis=[
                        {
                            "kind": "FINDING",
                            "statement": "root cause is the database",
                            "evidence": {"status": "NO_EVIDENCE", "scope": "guess"},
                        }
                    ],
                )
            )
        ],
        Outcome.FAILED,
        "SCHEMA",
        1,
    ),
    Hostile("empty-final-text", [final_step("")], Outcome.FAILED, "EMPTY", 1),
    # -- text that is not valid Unicode ----------------------------------------------------
    Hostile(
        "lone-surrogate-in-arguments",
        [
            tool_step(raw("c1", K, '{"input": {"query": "pool \\ud800 exhausted"}}')),
            final_step(draft_json(conclusion=False)),
        ],
        Outcome.DRAFT,
        "",
        2,
        {},
        {1: ["INVALID_ENVELOPE"]},
    ),
    Hostile(
        "lone-surrogate-in-draft",
        [final_step(draft_json(conclusion=False).replace("未检查任何数据", "\\udc80"))],
        Outcome.FAILED,
        "SCHEMA",
        1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name.split(" ")[0])
async def test_hostile_model(model_server: StartServer, tmp_path: Path, case: Hostile) -> None:
    server = await model_server([*case.steps, healthy_step()])
    table = adapters()
    if case.failing_mysql:
        table[ToolName.QUERY_MYSQL] = ScriptedAdapter(
            ToolName.QUERY_MYSQL, lambda c: Failed(AdapterErrorCode.UNAVAILABLE)
        )
    harness = build(server.base_url, tmp_path, table, **case.env)
    result = await harness.diagnose(QUERY)

    assert result.outcome is case.outcome, result.to_json()
    if case.outcome is Outcome.STOPPED:
        assert result.stop_reason == case.why and result.draft is None
    elif case.outcome is Outcome.FAILED:
        assert result.failure is not None and result.draft is None
        assert result.failure.detail == case.why
        assert result.failure.code is (
            FailureCode.INVALID_DRAFT if case.why != "BAD_RESPONSE" else FailureCode.MODEL_ERROR
        )
    else:
        assert result.draft is not None
    assert server.request_count == case.requests  # nothing ran past a budget or a stop
    assert {tool.value: len(a.calls) for tool, a in table.items() if a.calls} == case.runs
    for index, seen in case.saw.items():
        observed = observations(server.requests[index])
        assert [_seen(o) for o in observed] == seen
        for o in observed:  # bounded, never a counter, threshold or budget
            assert len(json.dumps(o, ensure_ascii=False).encode()) <= 4096
    record = audit_of(tmp_path, result)
    assert len(record["rounds"]) == case.requests
    assert sum(1 for i in record["invocations"] if i["status"] != "REJECTED") == sum(
        case.runs.values()
    )
    await assert_still_serves(harness, tmp_path, server)


async def test_cites_a_call_of_another_run(model_server: StartServer, tmp_path: Path) -> None:
    """The same Harness: run 1 has READY c1; run 2 cites c1 without having made it."""
    server = await model_server(
        [tool_step(call("c1", L, LOGS)), final_step(VALID), final_step(VALID), healthy_step()]
    )
    harness = build(server.base_url, tmp_path, adapters())
    first = await harness.diagnose(QUERY)
    assert first.outcome is Outcome.DRAFT
    second = await harness.diagnose(QUERY)
    assert second.failure is not None and second.failure.detail == "UNKNOWN_CITATION"
    assert second.progress is None  # nothing of run 1 leaks into run 2's progress
    assert server.request_count == 3
    audit_of(tmp_path, second)
    await assert_still_serves(harness, tmp_path, server)


async def test_the_same_tool_call_id_in_two_runs_stays_separate(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", L, LOGS)),
            final_step(VALID),
            tool_step(call("c1", L, LOGS)),  # same id, same request, new run: runs again
            final_step(VALID),
        ]
    )
    table = adapters()
    harness = build(server.base_url, tmp_path, table)
    results = [await harness.diagnose(QUERY), await harness.diagnose(QUERY)]
    assert [r.outcome for r in results] == [Outcome.DRAFT, Outcome.DRAFT]
    assert len(table[ToolName.QUERY_LOGS].calls) == 2
    assert {c.run_id for c in table[ToolName.QUERY_LOGS].calls} == {r.run_id for r in results}
