"""The harness keeps its promises by itself, through ``Harness.diagnose`` against the scripted
model server: each tool's result projected through its whitelist whatever the adapter returns,
every emitted tool call id burned, an adapter crash recorded ``ERROR INTERNAL``, one round of
headroom (at every edge of the model-call and token budgets), ``max_tokens`` on every request,
and the Draft of an authorized round kept whatever its reported usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer, ToolCallSpec
from sre_diag.errors import StopReason
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import Invocation
from sre_diag.harness.state import RunState
from sre_diag.harness.whitelist import BOUNDS, TRUNCATION_MARK
from sre_diag.slack.metrics import Metrics
from sre_diag.tools.base import AdapterCall, AdapterResult, Ready, ToolName
from sre_diag.tools.schemas import (
    KnowledgeItem,
    LogBuckets,
    LogItem,
    LogSummary,
    MysqlRow,
)
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
SQL = {"sql": "SELECT status FROM orders", "purpose": "订单状态"}
INPUTS = {
    ToolName.LOOKUP_KNOWLEDGE: KB,
    ToolName.QUERY_LOGS: LOGS_INPUT,
    ToolName.QUERY_MYSQL: SQL,
}
SECRET = "hunter2-CANARY"
TRACEBACK = 'Traceback (most recent call last):\n  File "/srv/app.py", line 3\nValueError: boom'
OBSERVATION_BYTES = 4096  # DIAG_MAX_OBSERVATION_BYTES' default
NO_CONCLUSION = draft_json(conclusion=False)

# -- 1. the whitelist is the harness's, not the adapter's ------------------------------------


class Anything(BaseModel):
    """What a buggy adapter might build: the right fields, and whatever else it had."""

    model_config = ConfigDict(extra="allow", frozen=True)


FIELDS: dict[ToolName, dict[str, Any]] = {
    ToolName.LOOKUP_KNOWLEDGE: {
        "title": "支付服务排查", "heading": "连接池", "path": "payment-api.zh.md",
        "score": 1.5, "snippet": "检查数据库连接池",
    },
    ToolName.QUERY_LOGS: {
        "ts": "2026-11-28T10:05:00.000Z", "service": "payment-api", "level": "ERROR",
        "message": "db pool exhausted",
    },
    ToolName.QUERY_MYSQL: {"cells": {"status": "FAILED", "n": 40}},
}  # fmt: skip
FOREIGN: dict[ToolName, BaseModel] = {
    ToolName.LOOKUP_KNOWLEDGE: LogItem(**FIELDS[ToolName.QUERY_LOGS]),
    ToolName.QUERY_LOGS: MysqlRow(**FIELDS[ToolName.QUERY_MYSQL]),
    ToolName.QUERY_MYSQL: KnowledgeItem(**FIELDS[ToolName.LOOKUP_KNOWLEDGE]),
}


def leaky(tool: ToolName) -> Anything:
    return Anything(**FIELDS[tool], password=SECRET, raw_response=TRACEBACK, api_key=f"sk-{SECRET}")


def answering(tool: ToolName, result: Ready) -> dict[ToolName, ScriptedAdapter]:
    return adapters(**{tool.value: ScriptedAdapter(tool, lambda c: result)})


async def one_check(
    model_server: StartServer,
    tmp_path: Path,
    tool: ToolName,
    result: Ready,
    final: str,
) -> tuple[Any, ScriptedModelServer, dict[str, Any]]:
    """Round 1 asks ``tool`` (answered ``result``), round 2 answers ``final``; the result, the
    server and the observation round 2 was given."""
    server = await model_server(
        [tool_step(call("c1", tool.value, INPUTS[tool])), final_step(final)]
    )
    outcome = await harness(server, tmp_path, answering(tool, result)).diagnose(QUERY)
    [observation] = tool_messages(server.requests[1])
    return outcome, server, observation


def nothing_raw(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text and "Traceback" not in text and "raw_response" not in text


@pytest.mark.parametrize("tool", list(ToolName))
async def test_unknown_fields_never_reach_the_model_whatever_the_adapter_returns(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    # Both an item model with extra fields and a plain mapping with them.
    items = [leaky(tool), {**FIELDS[tool], "password": SECRET, "raw_response": TRACEBACK}]
    result, server, observation = await one_check(
        model_server, tmp_path, tool, Ready(items=items), draft_json(["c1"])
    )
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert observation["observation"]["evidence_status"] == "READY"
    shown = observation["observation"]["items"]
    assert [sorted(item) for item in shown] == [sorted(FIELDS[tool])] * 2
    assert all(item == json.loads(json.dumps(FIELDS[tool])) for item in shown)
    nothing_raw(json.dumps(server.requests), result.to_json(), json.dumps(audit_records(tmp_path)))


async def test_a_logs_summary_and_first_items_are_projected_too(
    model_server: StartServer, tmp_path: Path
) -> None:
    tool = ToolName.QUERY_LOGS
    summary = Anything(
        matched=1180, exact=True, first_ts="2026-11-28T10:05:02Z", last_ts="2026-11-28T10:29:58Z",
        buckets=LogBuckets(start="2026-11-28T10:00:00Z", width_seconds=60, counts=[0] * 70),
        top_messages=[{"pattern": "db pool exhausted", "count": 1102, "first_ts": "a",
                       "last_ts": "b", "sample": SECRET}] * 7,
        backend_answer=TRACEBACK,
    )  # fmt: skip
    first = [leaky(tool) for _ in range(5)]
    ready = Ready(items=[leaky(tool)], summary=summary, first_items=first)
    result, server, observation = await one_check(
        model_server, tmp_path, tool, ready, draft_json(["c1"])
    )
    assert result.outcome is Outcome.DRAFT
    seen = observation["observation"]
    assert list(seen) == [
        "tool_call_id", "tool", "evidence_status", "summary", "item_count", "items",
        "first_items", "truncated",
    ]  # fmt: skip
    assert sorted(seen["summary"]) == sorted(LogSummary.model_fields)
    assert len(seen["summary"]["buckets"]["counts"]) == BOUNDS["buckets"]
    assert len(seen["summary"]["top_messages"]) == BOUNDS["top_messages"]
    assert all(sorted(p) == ["count", "first_ts", "last_ts", "pattern"]
               for p in seen["summary"]["top_messages"])  # fmt: skip
    assert len(seen["first_items"]) == 3  # up to 3, the onset
    assert [sorted(i) for i in seen["first_items"]] == [sorted(FIELDS[tool])] * 3
    assert seen["truncated"] is True  # first items were left out
    nothing_raw(json.dumps(server.requests), json.dumps(audit_records(tmp_path)))


@pytest.mark.parametrize("tool", list(ToolName))
async def test_another_tools_items_are_an_internal_error_with_nothing_raw(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    ready = Ready(items=[leaky(tool), FOREIGN[tool]])
    result, server, observation = await one_check(
        model_server, tmp_path, tool, ready, NO_CONCLUSION
    )
    assert observation["observation"] == {
        "tool_call_id": "c1", "tool": tool.value, "evidence_status": "ERROR",
        "error_code": "INTERNAL",
    }  # fmt: skip
    assert result.outcome is Outcome.DRAFT
    (record,) = audit_records(tmp_path)
    [invocation] = record["invocations"]
    assert (invocation["status"], invocation["code"]) == ("ERROR", "INTERNAL")
    foreign = json.dumps(FOREIGN[tool].model_dump(mode="json"), ensure_ascii=False)[2:20]
    for text in (json.dumps(server.requests, ensure_ascii=False), result.to_json()):
        assert foreign not in text
        nothing_raw(text)


@pytest.mark.parametrize("tool", list(ToolName))
async def test_a_citation_of_a_refused_result_is_invalid(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    ready = Ready(items=[FOREIGN[tool]])
    result, _, _ = await one_check(model_server, tmp_path, tool, ready, draft_json(["c1"]))
    assert result.outcome is Outcome.FAILED and result.failure is not None
    assert (result.failure.code, result.failure.detail) == (
        FailureCode.INVALID_DRAFT,
        "UNKNOWN_CITATION",
    )


OVERSIZED: dict[ToolName, dict[str, Any]] = {
    ToolName.LOOKUP_KNOWLEDGE: {**FIELDS[ToolName.LOOKUP_KNOWLEDGE], "snippet": "池" * 1_000_000},
    ToolName.QUERY_LOGS: {**FIELDS[ToolName.QUERY_LOGS], "message": "x" * 1_000_000},
    ToolName.QUERY_MYSQL: {"cells": {"note": "y" * 1_000_000, "n": 1}},
}
LONGEST = {
    ToolName.LOOKUP_KNOWLEDGE: BOUNDS["snippet"],
    ToolName.QUERY_LOGS: BOUNDS["message"],
    ToolName.QUERY_MYSQL: BOUNDS["cell"],
}


@pytest.mark.parametrize("tool", list(ToolName))
async def test_oversized_fields_are_bounded_at_the_boundary(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    ready = Ready(items=[Anything(**OVERSIZED[tool])] * 3 + [Anything(**FIELDS[tool])])
    result, server, observation = await one_check(
        model_server, tmp_path, tool, ready, draft_json(["c1"])
    )
    assert result.outcome is Outcome.DRAFT, result.to_json()
    content = next(m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool")
    assert len(content.encode("utf-8")) <= OBSERVATION_BYTES
    seen = observation["observation"]
    assert seen["evidence_status"] == "READY" and seen["item_count"] >= 1
    first = seen["items"][0]
    texts = [v for v in [*first.values(), *first.get("cells", {}).values()] if isinstance(v, str)]
    longest = max(texts, key=len)
    assert len(longest) == LONGEST[tool] and longest.endswith(TRUNCATION_MARK)


# -- 2. every tool call id emitted in a run is burned ----------------------------------------

L, K, M = "query_logs", "lookup_knowledge", "query_mysql"


def raw(call_id: str, tool: str, arguments: str) -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name=tool, arguments=arguments)


def seen(server: ScriptedModelServer, request: int) -> list[str]:
    return [
        str(m["observation"].get("error_code") or m["observation"]["evidence_status"])
        for m in tool_messages(server.requests[request])
    ]


async def test_an_unknown_tools_id_cannot_be_reused(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("u1", "restart_service", {"service": "payment-api"})),
            tool_step(call("u1", L, LOGS_INPUT)),
            final_step(draft_json(["u1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert seen(server, 2) == ["UNKNOWN_TOOL", "INVALID_ENVELOPE"]
    assert "reused" in tool_messages(server.requests[2])[1]["observation"]["hint"]
    assert table[ToolName.QUERY_LOGS].calls == []
    assert result.failure is not None and result.failure.detail == "UNKNOWN_CITATION"
    (record,) = audit_records(tmp_path)
    assert record["invocations"] == []  # neither answer created a canonical invocation


@pytest.mark.parametrize(
    ("first_round", "first_answers", "reused_tool", "runs", "checks"),
    [
        # rejected: an envelope that is not JSON
        ([raw("c1", L, "{broken")], ["INVALID_ENVELOPE"], L, 0, [("c1", "INVALID_ENVELOPE")]),
        # executed (READY, pending)
        ([call("c1", L, LOGS_INPUT)], ["READY"], K, 1, [("c1", None)]),
        # answered ONE_TOOL_PER_ROUND as the second call of its round
        ([call("c0", L, LOGS_INPUT), call("c1", K, KB)], ["READY", "ONE_TOOL_PER_ROUND"], M,
         1, [("c0", None), ("c1", "ONE_TOOL_PER_ROUND")]),
    ],
)  # fmt: skip
async def test_an_id_answered_in_an_earlier_round_is_refused_and_never_runs(
    model_server: StartServer,
    tmp_path: Path,
    first_round: list[ToolCallSpec],
    first_answers: list[str],
    reused_tool: str,
    runs: int,
    checks: list[tuple[str, str | None]],
) -> None:
    pending = "c0" if len(first_round) > 1 else "c1"
    previous = (pending, "GAINED") if runs else None
    business = {L: {**LOGS_INPUT, "contains": "timeout"}, K: KB, M: SQL}[reused_tool]
    server = await model_server(
        [
            tool_step(*first_round),
            tool_step(call("c1", reused_tool, business, previous=previous)),
            final_step(NO_CONCLUSION),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert seen(server, 1) == first_answers
    assert seen(server, 2) == [*first_answers, "INVALID_ENVELOPE"]
    assert sum(len(a.calls) for a in table.values()) == runs  # the reuse never ran
    assert result.outcome is Outcome.DRAFT and result.progress is not None
    assert [(c.tool_call_id, c.error_code) for c in result.progress.checks] == checks


async def test_an_id_answered_stop_required_is_refused_in_the_same_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", L, LOGS_INPUT)),
            tool_step(call("c2", K, KB, previous=("c1", "GAINED")), call("c2", M, SQL)),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_TOOL_CALLS=1).diagnose(QUERY)
    assert seen(server, 2) == ["READY", "STOP_REQUIRED", "INVALID_ENVELOPE"]
    assert table[ToolName.QUERY_MYSQL].calls == table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.outcome is Outcome.DRAFT and result.progress is not None
    assert [(c.tool_call_id, c.error_code) for c in result.progress.checks] == [
        ("c1", None),
        ("c2", "STOP_REQUIRED"),
    ]


async def test_an_executed_id_reused_cannot_be_cited_twice(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The reuse of a READY id is refused; the READY check itself stays citable.
    server = await model_server(
        [
            tool_step(call("c1", L, LOGS_INPUT)),
            tool_step(call("c1", K, KB, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table).diagnose(QUERY)
    assert seen(server, 2) == ["READY", "INVALID_ENVELOPE"]
    assert table[ToolName.LOOKUP_KNOWLEDGE].calls == []
    assert result.outcome is Outcome.DRAFT and result.progress is not None
    assert [c.tool_call_id for c in result.progress.checks] == ["c1"]


# -- 3. an adapter crash is ERROR INTERNAL, never CANCELLED -----------------------------------


class AdapterCrash(BaseException):
    """Escapes ``except Exception``: the adapter crashed."""


class Invocations(StepHook):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        code = invocation.code.value if invocation.code is not None else None
        self.seen.append((invocation.status.value, code))


@pytest.mark.parametrize("tool", list(ToolName))
async def test_an_adapter_crash_is_internal_in_progress_and_audit(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    def crash(call: AdapterCall[Any]) -> AdapterResult:
        raise AdapterCrash(SECRET)

    server = await model_server([tool_step(call("c1", tool.value, INPUTS[tool]))])
    table = adapters(**{tool.value: ScriptedAdapter(tool, crash)})
    hook = Invocations()
    result = await harness(server, tmp_path, table).diagnose(QUERY, hooks=[hook])
    assert result.outcome is Outcome.FAILED and result.failure is not None
    assert (result.failure.code, result.failure.detail) == (FailureCode.AGENT_ERROR, "UNCLASSIFIED")
    assert hook.seen == [("ERROR", "INTERNAL")]
    (record,) = audit_records(tmp_path)
    [invocation] = record["invocations"]
    assert (invocation["status"], invocation["code"]) == ("ERROR", "INTERNAL")
    nothing_raw(result.to_json(), json.dumps(record))


# -- 4. one round of headroom -----------------------------------------------------------------


def chain(rounds: int) -> list[ModelStep]:
    """``rounds`` tool rounds, each a new logs query evaluating the one before."""
    steps = []
    for n in range(1, rounds + 1):
        business = {**LOGS_INPUT, "contains": f"error {n}"}
        previous = (f"c{n - 1}", "GAINED") if n > 1 else None
        steps.append(tool_step(call(f"c{n}", L, business, previous=previous)))
    return steps


async def test_with_two_model_calls_one_round_asks_a_tool_and_the_next_drafts(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([*chain(1), final_step(draft_json(["c1"]))])
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_MODEL_CALLS=2).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 1
    assert len(table[ToolName.QUERY_LOGS].calls) == 1


@pytest.mark.parametrize("budget", [2, 3, 4, 6])
async def test_a_tool_runs_in_every_round_but_the_last(
    model_server: StartServer, tmp_path: Path, budget: int
) -> None:
    cited = [f"c{n}" for n in range(1, budget)]
    server = await model_server([*chain(budget - 1), final_step(draft_json(cited))])
    table = adapters()
    env = {"DIAG_MAX_MODEL_CALLS": budget, "DIAG_MAX_TOOL_CALLS": budget}
    result = await harness(server, tmp_path, table, **env).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert len(table[ToolName.QUERY_LOGS].calls) == budget - 1
    assert server.request_count == budget


@pytest.mark.parametrize("budget", [1, 2, 3, 5])
async def test_a_tool_asked_in_the_last_round_is_stop_required(
    model_server: StartServer, tmp_path: Path, budget: int
) -> None:
    server = await model_server(chain(budget))
    table = adapters()
    env = {"DIAG_MAX_MODEL_CALLS": budget, "DIAG_MAX_TOOL_CALLS": budget}
    result = await harness(server, tmp_path, table, **env).diagnose(QUERY)
    assert result.stop_reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    assert len(table[ToolName.QUERY_LOGS].calls) == budget - 1
    assert result.progress is not None
    assert result.progress.checks[-1].error_code == "STOP_REQUIRED"
    assert server.request_count == budget  # the round after the last never reaches the server


ROUND = 120  # tokens of round 1 (100 prompt + 20 completion, the scripted default)
OBSERVATION_TOKENS = 1024  # DIAG_MAX_OBSERVATION_BYTES / 4


@pytest.mark.parametrize(
    ("budget", "runs"),
    [
        (2 * ROUND + OBSERVATION_TOKENS, True),  # exactly one more round plus the observation
        (2 * ROUND + OBSERVATION_TOKENS + 1, True),
        (2 * ROUND + OBSERVATION_TOKENS - 1, False),
        (ROUND + OBSERVATION_TOKENS, False),  # the observation alone is not enough
        (2 * ROUND + 1, False),  # one more round alone is not enough
    ],
)
async def test_a_tool_runs_when_the_tokens_cover_one_more_round_and_its_observation(
    model_server: StartServer, tmp_path: Path, budget: int, runs: bool
) -> None:
    final = draft_json(["c1"]) if runs else NO_CONCLUSION
    # A completion of one token: round 2 may have no more (2 * ROUND + 1).
    server = await model_server([*chain(1), final_step(final, completion_tokens=1)])
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_MAX_TOTAL_TOKENS=budget).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert len(table[ToolName.QUERY_LOGS].calls) == (1 if runs else 0)
    assert seen(server, 1) == ["READY" if runs else "STOP_REQUIRED"]
    first, second = (body["max_tokens"] for body in server.requests)
    assert first == min(budget, 16384)
    assert second == budget - ROUND - ROUND  # the tokens left minus at least round 1's size


async def test_a_model_citing_a_tool_refused_for_tokens_fails_its_draft(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([*chain(1), final_step(draft_json(["c1"]))])
    budget = 2 * ROUND + OBSERVATION_TOKENS - 1
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=budget).diagnose(QUERY)
    assert result.failure is not None and result.failure.detail == "UNKNOWN_CITATION"


async def test_a_draft_cut_at_the_completion_tokens_left_is_a_token_stop(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Round 2 may use 1023 completion tokens; the model needs 5000: the endpoint stops it there
    # (finish_reason length) and the cut text is no Draft — the budget ended the run.
    budget = 2 * ROUND + OBSERVATION_TOKENS - 1
    long_draft = final_step(NO_CONCLUSION, completion_tokens=5000)
    server = await model_server([*chain(1), long_draft])
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=budget).diagnose(QUERY)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED, result.to_json()
    assert server.requests[1]["max_tokens"] == 1023
    assert result.usage.completion_tokens == 20 + 1023


async def test_every_request_carries_the_completion_tokens_left(
    model_server: StartServer, tmp_path: Path
) -> None:
    budget = 10_000
    usage = [(300, 40), (900, 60), (1800, 30)]
    steps = [
        ModelStep(tool_calls=spec.tool_calls, prompt_tokens=p, completion_tokens=c)
        for spec, (p, c) in zip(chain(2), usage[:2], strict=True)
    ]
    server = await model_server([*steps, final_step(draft_json(["c1", "c2"]), *usage[2])])
    result = await harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=budget).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    sent = [body["max_tokens"] for body in server.requests]
    assert sent == [budget, budget - 340 - 340, budget - 340 - 960 - 960]
    # A larger budget: never more than the largest Draft (DIAG_MAX_DRAFT_BYTES).
    assert all(0 < n <= 16_384 for n in sent)


# -- 5. the Draft of an authorized round is kept whatever its usage ---------------------------


def overruns(metrics: Metrics) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        if family.name == "diag_token_overruns":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    raise AssertionError("diag_token_overruns_total is not exposed")


@pytest.mark.parametrize("over", [1, 10, 10**15])
async def test_a_final_round_over_the_budget_keeps_its_draft_and_counts_the_overrun(
    model_server: StartServer, tmp_path: Path, over: int
) -> None:
    budget = 2 * ROUND + OBSERVATION_TOKENS
    final_prompt = budget - ROUND - 20 + over
    server = await model_server(
        [*chain(1), final_step(draft_json(["c1"]), prompt_tokens=final_prompt)]
    )
    metrics = Metrics()
    h = harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=budget)
    result = await h.diagnose(QUERY, hooks=[metrics.hook()])
    assert result.outcome is Outcome.DRAFT and result.draft is not None, result.to_json()
    assert result.usage.prompt_tokens + result.usage.completion_tokens == budget + over
    assert overruns(metrics) == 1
    (record,) = audit_records(tmp_path)
    assert record["outcome"] == "DRAFT"


async def test_a_draft_within_the_budget_counts_no_overrun(
    model_server: StartServer, tmp_path: Path
) -> None:
    budget = 2 * ROUND + OBSERVATION_TOKENS
    server = await model_server(
        [*chain(1), final_step(draft_json(["c1"]), prompt_tokens=budget - ROUND - 20)]
    )
    metrics = Metrics()
    h = harness(server, tmp_path, DIAG_MAX_TOTAL_TOKENS=budget)
    result = await h.diagnose(QUERY, hooks=[metrics.hook()])
    assert result.outcome is Outcome.DRAFT
    assert result.usage.prompt_tokens + result.usage.completion_tokens == budget
    assert overruns(metrics) == 0


@pytest.mark.parametrize("over", [1, 10**15])
async def test_a_tool_round_over_the_budget_still_runs_nothing(
    model_server: StartServer, tmp_path: Path, over: int
) -> None:
    server = await model_server([tool_step(call("c1", L, LOGS_INPUT), prompt_tokens=60_000 + over)])
    table = adapters()
    metrics = Metrics()
    result = await harness(server, tmp_path, table).diagnose(QUERY, hooks=[metrics.hook()])
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert table[ToolName.QUERY_LOGS].calls == []
    assert overruns(metrics) == 0


async def test_an_invalid_draft_over_the_budget_is_still_invalid(
    model_server: StartServer, tmp_path: Path
) -> None:
    fenced = "```json\n" + NO_CONCLUSION + "\n```"
    server = await model_server([final_step(fenced, prompt_tokens=70_000)])
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.failure is not None and result.failure.detail == "FENCED"
