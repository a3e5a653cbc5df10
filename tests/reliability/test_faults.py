"""Faults at every process boundary: the model server, MySQL, Loki, the runbook folder.

Each case asserts the defined outcome (CONTRACTS §6), the observation error code the model saw,
the model server's request count (no retry anywhere), the run's audit record, and that the same
Harness then serves a healthy diagnosis. Loki is the fragmenting socket fake
(``tests/tools/fake_loki.py``); the model server's wire faults (chunked, gzip, endless, trickle,
reset mid-body) are in ``test_model_wire.py``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import Invocation
from sre_diag.harness.state import RunState
from sre_diag.tools.base import ToolName
from sre_diag.tools.logs import LogsAdapter, LokiLogSource
from sre_diag.tools.mysql import MysqlAdapter
from sre_diag.wiring import build_adapters
from tests.conftest import StartServer
from tests.harness.support import adapters, call, draft_json, final_step, tool_step
from tests.mysql_db import MARIADB_SOLO
from tests.reliability.support import (
    LOGS_WINDOW,
    QUERY,
    ConversationModelServer,
    assert_still_serves,
    audit_of,
    build,
    healthy_step,
    last_observation,
    observations,
    settings,
)
from tests.tools.fake_loki import FakeLoki, start_fake_loki

pytestmark = MARIADB_SOLO

SLOW_SQL = (
    "SELECT COUNT(*) FROM orders a, orders b, orders c, payments d "
    "WHERE a.amount_cents + b.amount_cents > c.amount_cents + d.latency_ms"
)
FAST_SQL = "SELECT status, COUNT(*) AS n FROM orders GROUP BY status"


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def completion_body(content: str | None, **message: Any) -> str:
    choice = {"index": 0, "message": {"role": "assistant", "content": content, **message}}
    return json.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{**choice, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }
    )


TEN_MB = 10 * 1024 * 1024
"""Past the model HTTP client's cap (``sre_diag.harness.model.answer_cap``): refused as it
arrives."""
THREE_MB = 3 * 1024 * 1024
"""Under that cap, multi-megabyte: read whole, then judged by the harness (the gate, the
Draft parser)."""
BIG_TOOL_CALL = {
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {
                "name": "query_logs",
                "arguments": json.dumps({"input": {"service": "payment-api", **LOGS_WINDOW}}),
            },
        }
    ]
}


# -- the model server --------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFault:
    name: str
    step: ModelStep
    code: FailureCode
    detail: str
    env: dict[str, Any] = field(default_factory=dict)


MODEL_FAULTS = [
    ModelFault("http-500", ModelStep(status=500), FailureCode.MODEL_ERROR, "HTTP_500"),
    ModelFault("http-429", ModelStep(status=429), FailureCode.MODEL_ERROR, "HTTP_429"),
    ModelFault(
        "timeout",
        ModelStep(content="late", delay_seconds=10),
        FailureCode.MODEL_ERROR,
        "TIMEOUT",
        {"DIAG_MODEL_TIMEOUT_SECONDS": 0.5},
    ),
    ModelFault(
        "garbage-json", ModelStep(raw_body="{not json"), FailureCode.MODEL_ERROR, "BAD_RESPONSE"
    ),
    ModelFault(
        "empty-choices",
        ModelStep(raw_body=json.dumps({"id": "x", "object": "chat.completion", "choices": []})),
        FailureCode.MODEL_ERROR,
        "BAD_RESPONSE",
    ),
    ModelFault(
        "three-mb-garbage",
        ModelStep(raw_body="[" * THREE_MB),
        FailureCode.MODEL_ERROR,
        "BAD_RESPONSE",
    ),
    # A 3 MB final text is an oversized Draft; it must be refused without first spending
    # minutes of CPU in the framework (the deadline below would otherwise end the run).
    ModelFault(
        "three-mb-final-text",
        ModelStep(raw_body=completion_body("x" * THREE_MB)),
        FailureCode.INVALID_DRAFT,
        "OVERSIZED",
        {"DIAG_DEADLINE_SECONDS": 15},
    ),
    ModelFault(
        "three-mb-text-beside-a-tool-call",
        ModelStep(raw_body=completion_body("x" * THREE_MB, **BIG_TOOL_CALL)),
        FailureCode.MODEL_ERROR,
        "OVERSIZED_RESPONSE",
        {"DIAG_DEADLINE_SECONDS": 15},
    ),
    # Past the HTTP client's cap, whatever the body is: refused before it is all in memory.
    ModelFault(
        "ten-mb-garbage",
        ModelStep(raw_body="[" * TEN_MB),
        FailureCode.MODEL_ERROR,
        "OVERSIZED_RESPONSE",
    ),
    ModelFault(
        "ten-mb-final-text",
        ModelStep(raw_body=completion_body("x" * TEN_MB)),
        FailureCode.MODEL_ERROR,
        "OVERSIZED_RESPONSE",
        {"DIAG_DEADLINE_SECONDS": 15},
    ),
]


@pytest.mark.parametrize("fault", MODEL_FAULTS, ids=lambda f: f.name)
async def test_model_server_fault(
    model_server: StartServer, tmp_path: Path, fault: ModelFault
) -> None:
    server = await model_server([fault.step, healthy_step()])
    table = adapters()
    harness = build(server.base_url, tmp_path, table, **fault.env)
    result = await harness.diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None
    assert (result.failure.code, result.failure.detail) == (fault.code, fault.detail)
    assert result.progress is None and result.draft is None
    assert server.request_count == 1  # no retry by the SDK, the framework or the harness
    assert all(not adapter.calls for adapter in table.values())  # nothing it asked ran
    record = audit_of(tmp_path, result)
    assert record["invocations"] == [] and len(record["rounds"]) == 1
    if fault.name == "timeout":
        for _ in range(200):
            if server.aborted:
                break
            await asyncio.sleep(0.01)
        assert server.aborted == 1  # the client really went away
    await assert_still_serves(harness, tmp_path, server)


async def test_model_response_without_usage_is_estimated_and_budgeted(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            ModelStep(
                tool_calls=(call("c1", "query_logs", {"service": "payment-api", **LOGS_WINDOW}),),
                prompt_tokens=None,
            ),
            ModelStep(content=draft_json(["c1"]), prompt_tokens=None),
            healthy_step(),
        ]
    )
    harness = build(server.base_url, tmp_path, adapters())
    result = await harness.diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert server.request_count == 2
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    record = audit_of(tmp_path, result)
    assert record["usage_estimated"] is True
    assert [r["usage_reported"] for r in record["rounds"]] == [False, False]
    await assert_still_serves(harness, tmp_path, server)


# -- evidence backends through the real adapters ------------------------------------------


async def _one_tool_run(
    model_server: StartServer,
    tmp_path: Path,
    table: dict[ToolName, Any],
    tool: str,
    business: dict[str, Any],
    error_code: str,
    **env: Any,
) -> None:
    """The model asks one tool, sees ``ERROR error_code``, answers a no-conclusion Draft."""
    server = await model_server(
        [
            tool_step(call("c1", tool, business)),
            final_step(draft_json(conclusion=False)),
            healthy_step(),
        ]
    )
    harness = build(server.base_url, tmp_path, table, **env)
    result = await harness.diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert last_observation(server, 1) == {
        "tool_call_id": "c1",
        "tool": tool,
        "evidence_status": "ERROR",
        "error_code": error_code,
    }
    assert server.request_count == 2
    assert result.usage.tool_calls == 1
    record = audit_of(tmp_path, result)
    assert [(i["tool_call_id"], i["status"], i["code"]) for i in record["invocations"]] == [
        ("c1", "ERROR", error_code)
    ]
    await assert_still_serves(harness, tmp_path, server)


async def test_mysql_down(model_server: StartServer, tmp_path: Path) -> None:
    dsn = f"mysql://diag_ro:pw@127.0.0.1:{closed_port()}/diag"
    table = build_adapters(settings("http://unused", tmp_path, DIAG_MYSQL_DSN=dsn))
    sql = {"sql": FAST_SQL, "purpose": "order status mix"}
    await _one_tool_run(model_server, tmp_path, table, "query_mysql", sql, "UNAVAILABLE")


async def test_mysql_slow_past_the_statement_cap(
    model_server: StartServer, tmp_path: Path, mysql_ro_dsn: str
) -> None:
    mysql = MysqlAdapter(mysql_ro_dsn, (), statement_timeout_seconds=1.0)
    table: dict[ToolName, Any] = {**adapters(), ToolName.QUERY_MYSQL: mysql}
    sql = {"sql": SLOW_SQL, "purpose": "slow cross join"}
    await _one_tool_run(model_server, tmp_path, table, "query_mysql", sql, "TIMEOUT")
    # The pool is healthy afterwards: the next statement on the same adapter runs.
    server = await model_server(
        [tool_step(call("d1", "query_mysql", {"sql": FAST_SQL, "purpose": "p"})), healthy_step()]
    )
    harness = build(server.base_url, tmp_path, table)
    result = await harness.diagnose(HEALTHY_AFTER_DB)
    assert result.progress is not None
    assert [(c.status, c.item_count > 0) for c in result.progress.checks] == [("READY", True)]


HEALTHY_AFTER_DB = DiagnosisRequest("order status mix after the slow query")


async def test_mysql_pool_exhausted_by_a_concurrent_slow_query(
    tmp_path: Path, mysql_ro_dsn: str
) -> None:
    """pool_max=1: a run that needs a connection while another run's slow statement holds it
    waits at most the connect timeout and sees ``ERROR UNAVAILABLE`` (no queueing past it, no
    retry); the slow run ends at the server cap with ``TIMEOUT``; both end as Drafts and the
    pool serves the next run."""
    slow_q, blocked_q, after_q = "slow run", "blocked run", "after run"
    scripts = {
        slow_q: [
            tool_step(call("s1", "query_mysql", {"sql": SLOW_SQL, "purpose": "slow"})),
            final_step(draft_json(conclusion=False)),
        ],
        blocked_q: [
            ModelStep(
                tool_calls=(call("b1", "query_mysql", {"sql": FAST_SQL, "purpose": "mix"}),),
                delay_seconds=1.0,  # the slow run holds the only connection by now
            ),
            final_step(draft_json(conclusion=False)),
        ],
        after_q: [
            tool_step(call("a1", "query_mysql", {"sql": FAST_SQL, "purpose": "mix"})),
            final_step(draft_json(["a1"])),
        ],
    }
    server = await ConversationModelServer(lambda q: scripts[q], keep_bodies=True).start()
    try:
        mysql = MysqlAdapter(
            mysql_ro_dsn, (), pool_max=1, statement_timeout_seconds=4.0, connect_timeout_seconds=1.0
        )
        table: dict[ToolName, Any] = {**adapters(), ToolName.QUERY_MYSQL: mysql}
        harness = build(server.base_url, tmp_path, table)
        slow, blocked = await asyncio.gather(
            harness.diagnose(DiagnosisRequest(slow_q)),
            harness.diagnose(DiagnosisRequest(blocked_q)),
        )
        assert (slow.outcome, blocked.outcome) == (Outcome.DRAFT, Outcome.DRAFT)
        seen = {q: observations(server.bodies[q][1])[-1]["error_code"] for q in (slow_q, blocked_q)}
        assert seen == {slow_q: "TIMEOUT", blocked_q: "UNAVAILABLE"}
        assert server.requests == {slow_q: 2, blocked_q: 2} and server.unexpected == 0
        for result in (slow, blocked):
            assert audit_of(tmp_path, result)["invocations"][0]["status"] == "ERROR"
        after = await harness.diagnose(DiagnosisRequest(after_q))
        assert after.outcome is Outcome.DRAFT
        assert observations(server.bodies[after_q][1])[-1]["evidence_status"] == "READY"
        assert mysql.pools_created == 1
    finally:
        await server.stop()


@pytest.fixture
async def slow_loki() -> AsyncIterator[FakeLoki]:
    """The fragmenting fake Loki (chunked, gzip, small writes), answering after 5 s."""
    async with start_fake_loki(FakeLoki(delay=5.0)) as served:
        yield served


LOGS = {"service": "payment-api", **LOGS_WINDOW, "level": "ERROR"}


async def test_loki_down(model_server: StartServer, tmp_path: Path) -> None:
    env = {"DIAG_LOGS_SOURCE": f"http://127.0.0.1:{closed_port()}"}
    table = build_adapters(settings("http://unused", tmp_path, **env))
    await _one_tool_run(model_server, tmp_path, table, "query_logs", LOGS, "UNAVAILABLE")


async def test_loki_slow(model_server: StartServer, tmp_path: Path, slow_loki: FakeLoki) -> None:
    logs = LogsAdapter(LokiLogSource(slow_loki.url, timeout_seconds=0.5))
    table: dict[ToolName, Any] = {**adapters(), ToolName.QUERY_LOGS: logs}
    await _one_tool_run(model_server, tmp_path, table, "query_logs", LOGS, "TIMEOUT")
    # One query_logs call asks Loki for the counts (a metric query) and a sample, at once;
    # a timeout is never retried: no query is sent twice.
    # (The catalogue's label request, before the run, is not a query.)
    sent = slow_loki.count_requests + slow_loki.log_requests
    assert 1 <= len(sent) <= 2
    queries = [query["query"] for query in sent]
    assert len(set(queries)) == len(queries)


KB = {"query": "db pool exhausted 连接池", "top_k": 2}


@pytest.mark.parametrize("kind", ["missing", "a-file"])
async def test_knowledge_folder_missing_or_not_a_folder(
    model_server: StartServer, tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / "runbooks"
    if kind == "a-file":
        folder.write_text("# not a folder\n", encoding="utf-8")
    table = build_adapters(settings("http://unused", tmp_path, DIAG_KNOWLEDGE_DIR=str(folder)))
    await _one_tool_run(model_server, tmp_path, table, "lookup_knowledge", KB, "UNAVAILABLE")


class RemoveAfterFirstCall(StepHook):
    """Removes the runbook folder right after the first tool call of the run is recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        if invocation.tool_call_id == "c1":
            shutil.rmtree(self.folder)


async def test_knowledge_folder_removed_mid_run(model_server: StartServer, tmp_path: Path) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "pool.md").write_text(
        "# payment-api\n\n## db pool exhausted\n\n连接池耗尽时先看最近的发布。\n", encoding="utf-8"
    )
    # Rescan on every call: the folder disappears between two lookups of one run.
    table = build_adapters(
        settings(
            "http://unused",
            tmp_path,
            DIAG_KNOWLEDGE_DIR=str(folder),
            DIAG_KNOWLEDGE_RESCAN_SECONDS="0",
        )
    )
    server = await model_server(
        [
            tool_step(call("c1", "lookup_knowledge", KB)),
            tool_step(
                call("c2", "lookup_knowledge", {"query": "rollback"}, previous=("c1", "GAINED"))
            ),
            final_step(draft_json(["c1"])),
            healthy_step(),
        ]
    )
    harness = build(server.base_url, tmp_path, table)
    result = await harness.diagnose(QUERY, hooks=[RemoveAfterFirstCall(folder)])
    assert result.outcome is Outcome.DRAFT
    assert last_observation(server, 1)["evidence_status"] == "READY"
    assert last_observation(server, 2)["error_code"] == "UNAVAILABLE"
    assert server.request_count == 3
    record = audit_of(tmp_path, result)
    assert [(i["status"], i["code"]) for i in record["invocations"]] == [
        ("READY", None),
        ("ERROR", "UNAVAILABLE"),
    ]
    await assert_still_serves(harness, tmp_path, server)
