"""Hostile evidence through the REAL adapters: a runbook folder, a log folder in the documented
layout and a MariaDB table, each carrying instructions, fake tool-call JSON, Slack mention
markup, very long lines and invalid bytes.

Nothing executes (the model server's request count and the ledger show only what the script
asked; the database checksums do not move), every observation is one valid JSON object within
DIAG_MAX_OBSERVATION_BYTES with the whitelisted keys, and the hostile text stays inside
``items`` as string data. Slack markup reaches the model verbatim as data: neutralising it when
rendering is the Slack edge's job, not the observation's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sre_diag.contract.result import Outcome
from sre_diag.tools.base import AdapterCall, Ready, ToolName
from sre_diag.tools.knowledge import KnowledgeAdapter
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.mysql import MysqlAdapter
from sre_diag.tools.runbooks import iter_sections
from sre_diag.tools.schemas import KnowledgeInput, LogItem, LogsInput
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, tool_step
from tests.mysql_db import MARIADB
from tests.reliability.evidence import (
    CANARY_OUTSIDE,
    INJECTION,
    SLACK_MARKUP,
    TABLE,
    ReliabilityDb,
    checksums,
    write_logs,
    write_runbooks,
)
from tests.reliability.support import (
    LOGS_WINDOW,
    QUERY,
    assert_still_serves,
    audit_of,
    build,
    healthy_step,
)

pytestmark = MARIADB

MAX_OBSERVATION = 2048
ITEM_KEYS = {
    "query_logs": {"ts", "service", "level", "message"},
    "lookup_knowledge": {"title", "heading", "path", "score", "snippet"},
    "query_mysql": {"cells"},
}
HEAD = {"tool_call_id", "tool", "evidence_status", "item_count", "items", "truncated"}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def test_hostile_evidence_stays_data(
    model_server: StartServer, tmp_path: Path, reliability_db: ReliabilityDb
) -> None:
    before = checksums()
    write_runbooks(tmp_path / "runbooks")
    source = JsonlLogSource(tmp_path / "logs")
    write_logs(tmp_path / "logs")
    table: dict[ToolName, Any] = {
        ToolName.LOOKUP_KNOWLEDGE: KnowledgeAdapter(tmp_path / "runbooks", tmp_path / "cache"),
        ToolName.QUERY_LOGS: LogsAdapter(source),
        # A table-level grant: the masking layer is what is exercised here (column grants, the
        # first layer, are tests/tools/test_mysql_secrecy.py's).
        ToolName.QUERY_MYSQL: MysqlAdapter(reliability_db.ro_dsn, (), require_column_grants=False),
    }
    logs = {"service": "payment-api", **LOGS_WINDOW, "limit": 50}
    kb = {"query": "db pool exhausted 连接池 DROP TABLE", "top_k": 5}
    sql = {"sql": f"SELECT id, body, note, api_token FROM {TABLE} ORDER BY id", "purpose": "notes"}
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", logs)),
            tool_step(call("c2", "lookup_knowledge", kb, previous=("c1", "GAINED"))),
            tool_step(call("c3", "query_mysql", sql, previous=("c2", "GAINED"))),
            final_step(draft_json(["c1", "c2", "c3"])),
            healthy_step(),
        ]
    )
    harness = build(server.base_url, tmp_path, table, DIAG_MAX_OBSERVATION_BYTES=MAX_OBSERVATION)
    result = await harness.diagnose(QUERY)

    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert server.request_count == 4  # no tool call the evidence "asked for" was ever made
    assert result.progress is not None
    assert [(c.tool_call_id, c.status) for c in result.progress.checks] == [
        ("c1", "READY"),
        ("c2", "READY"),
        ("c3", "READY"),
    ]
    assert checksums() == before  # nothing executed against any database

    final_request = server.requests[3]
    tool_messages = [m for m in final_request["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 3
    texts: list[str] = []
    for message in tool_messages:
        assert len(message["content"].encode("utf-8")) <= MAX_OBSERVATION
        observation = json.loads(message["content"])  # one valid JSON object
        # query_logs also carries its summary, whose patterns are evidence like the items, and
        # its oldest matches (first_items), items like the others.
        logs = observation["tool"] == "query_logs"
        head = HEAD | ({"summary", "first_items"} if logs else set())
        assert set(observation) <= head and observation["evidence_status"] == "READY"
        assert set(observation) >= HEAD | ({"summary"} if logs else set())
        assert observation["item_count"] == len(observation["items"]) > 0
        for item in [*observation["items"], *observation.get("first_items", [])]:
            assert set(item) == ITEM_KEYS[observation["tool"]]
            texts.extend(_strings(item))
        patterns = observation.get("summary", {}).get("top_messages", [])
        texts.extend(p["pattern"] for p in patterns)
        # The hostile text is nowhere but inside items and patterns.
        evidence_keys = {"items", "first_items", "summary"}
        outside = {k: v for k, v in observation.items() if k not in evidence_keys}
        if "summary" in observation:
            outside["summary"] = {**observation["summary"], "top_messages": len(patterns)}
        assert not any(word in json.dumps(outside) for word in ("DROP", "channel", "call-evil"))
    evidence = "\n".join(texts)
    assert INJECTION[:40] in evidence  # carried as data, not obeyed
    assert "call-evil" in evidence  # the fake tool call is a string inside an item
    assert any(SLACK_MARKUP in text for text in texts)  # verbatim data (see module doc)
    assert all(len(text) <= 600 for text in texts)  # long lines and cells are bounded
    # The model's own messages were never extended by evidence: the assistant turns are the
    # three scripted tool calls, nothing from the fake tool-call JSON.
    assistant_calls = [
        c["id"] for m in final_request["messages"] if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]  # fmt: skip
    assert assistant_calls == ["c1", "c2", "c3"]
    # The over-long line, the line with invalid bytes, the out-of-range timestamps and the
    # nesting bomb were skipped and counted.
    assert source.stats.malformed_lines >= 5
    assert CANARY_OUTSIDE not in json.dumps(server.requests, ensure_ascii=False)
    audit = audit_of(tmp_path, result)
    copied = json.dumps(audit, ensure_ascii=False)
    assert not any(text in copied for text in ("Ignore previous", "call-evil", "<!channel>"))
    await assert_still_serves(harness, tmp_path, server)


async def test_hostile_folders_through_the_real_adapters(tmp_path: Path) -> None:
    """Items 1-3 and 5 of issue 10 on the same hostile folders, without a model or a database:
    outside symlinks and binary runbooks are never served, odd log lines are skipped, a
    JSON-escaped message is found by ``contains``, every text is bounded."""
    write_runbooks(tmp_path / "runbooks")
    write_logs(tmp_path / "logs")
    assert {s.path for s in iter_sections(tmp_path / "runbooks")} == {
        "payment-api.md",
        "headings.md",
    }
    knowledge = KnowledgeAdapter(tmp_path / "runbooks", tmp_path / "cache")
    for query in ("db pool exhausted 连接池 DROP TABLE", CANARY_OUTSIDE, "nul byte bad bytes"):
        result = await knowledge.invoke(AdapterCall("c", "r", KnowledgeInput(query=query, top_k=5)))
        assert isinstance(result, Ready), result
        dumped = json.dumps([item.model_dump() for item in result.items])
        assert CANARY_OUTSIDE not in dumped
        assert all(len(text) <= 600 for text in _strings(json.loads(dumped)))
    source = JsonlLogSource(tmp_path / "logs")
    logs = LogsAdapter(source)
    window = {"service": "payment-api", **LOGS_WINDOW}
    for contains, expected in [("<b> &", ["escaped <b> & pool"]), ("a.a.a.a", None), (None, None)]:
        q = LogsInput.model_validate_json(json.dumps({**window, "contains": contains, "limit": 50}))
        result = await logs.invoke(AdapterCall("c", "r", q))
        assert isinstance(result, Ready), result
        messages = [i.message for i in result.items if isinstance(i, LogItem)]
        assert messages if expected is None else messages == expected
        assert all(len(m) <= 500 for m in messages)
        assert not any("year" in m for m in messages)  # out-of-range lines were skipped
