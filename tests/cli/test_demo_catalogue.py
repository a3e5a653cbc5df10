"""The bundled demo shows what a model is told (issue 13 item 7).

The demo's own harness replays its cassette; every service, table, column and runbook topic in
the cassette's tool calls must appear in what the model had received by then: the catalogues
in ``tools[*].function.description`` of the request that the call answered. The question uses
a relative time ("since 10:05") and the request carries ``asked_at``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from sre_diag.commands.demo import replay_demo
from sre_diag.contract.prompts import prompt_set
from sre_diag.contract.result import Outcome
from sre_diag.resources import BUNDLED_CASSETTES
from tests.mysql_db import MARIADB

pytestmark = MARIADB

ZH = prompt_set("zh")


def _catalogue(description: str) -> list[str]:
    start = description.index("[")
    entries, _ = json.JSONDecoder().raw_decode(description[start:])
    return [str(entry) for entry in entries]


def _told(body: dict[str, Any]) -> dict[str, str]:
    return {t["function"]["name"]: t["function"]["description"] for t in body["tools"]}


def _sql_names(sql: str) -> tuple[set[str], set[str]]:
    """The tables and the (non-alias) columns a statement names."""
    tree = sqlglot.parse_one(sql, read="mysql")
    aliases = {alias.alias for alias in tree.find_all(exp.Alias)}
    tables = {table.name for table in tree.find_all(exp.Table)}
    columns = {column.name for column in tree.find_all(exp.Column)} - aliases
    return tables, columns


def _check_call(name: str, business: dict[str, Any], told: dict[str, str]) -> None:
    if name == "query_logs":
        assert business["service"] in _catalogue(told["query_logs"])
    elif name == "lookup_knowledge":
        words = {w.lower() for w in re.findall(r"[\w-]{4,}", business["query"])}
        titles = " ".join(_catalogue(told["lookup_knowledge"])).lower()
        assert any(word in titles for word in words), business["query"]
    else:
        tables = {e.split("(", 1)[0]: e for e in _catalogue(told["query_mysql"])}
        named, columns = _sql_names(business["sql"])
        assert named and named <= set(tables), named
        described = " ".join(tables[t] for t in named)
        for column in columns:
            assert re.search(rf"[(,] ?{re.escape(column)} ", described), column


def _recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BUNDLED_CASSETTES / name).read_text(encoding="utf-8"))
    return data


@pytest.fixture
def demo_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The demo reads its settings from the environment (a process boundary)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DIAG_AUDIT_SINK", f"jsonl:{tmp_path / 'audit'}")


async def test_demo_tool_calls_use_only_names_from_the_catalogues(
    demo_env: None, monkeypatch: pytest.MonkeyPatch, mysql_ro_dsn: str
) -> None:
    monkeypatch.setenv("DIAG_MYSQL_DSN", mysql_ro_dsn)
    run = await replay_demo()
    assert run.with_db
    assert run.result.outcome is Outcome.DRAFT, run.result
    run.server.assert_complete()
    cassette = _recorded("with-mysql.json")
    assert "since 10:05" in cassette["query"] and "2026" not in cassette["query"]
    checked = 0
    for body, step in zip(run.server.requests, cassette["steps"], strict=True):
        user = json.loads(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        assert user["asked_at"] == cassette["asked_at"] == "2026-11-28T10:30:00Z"
        assert user["query"] == cassette["query"]
        told = _told(body)
        for tool_call in step.get("tool_calls", ()):
            _check_call(tool_call["name"], tool_call["arguments"]["input"], told)
            checked += 1
    assert checked == 5


async def test_demo_without_the_database_is_told_the_table_list_is_unavailable(
    demo_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIAG_MYSQL_DSN", "mysql://nobody:nothing@127.0.0.1:9/diag_demo")
    run = await replay_demo()
    assert not run.with_db
    run.server.assert_complete()
    cassette = _recorded("without-mysql.json")
    for body, step in zip(run.server.requests, cassette["steps"], strict=True):
        told = _told(body)
        assert ZH.tools["query_mysql.unavailable"] in told["query_mysql"]
        for tool_call in step.get("tool_calls", ()):
            if tool_call["name"] != "query_mysql":
                _check_call(tool_call["name"], tool_call["arguments"]["input"], told)
