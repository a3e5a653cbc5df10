"""The benchmark code paths at tiny sizes: every row is there and its figures are numbers.

No timing assertion and no threshold: the numbers at these sizes mean nothing. The bench reads
this run's own business database (``mysql_ro_dsn``, not the demo's ``diag_demo``, which another
checkout's ``scripts/mysql_up`` may be rebuilding) and empties a database of this pytest
process's own redis-server (never one of the machine's Redis).
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bench.__main__ import SECTIONS, render_table, run_all
from bench.common import Row, Sizes, Status
from bench.fake_model import FakeModelServer, answer_for
from tests.mysql_db import MARIADB
from tests.slack.support import redis_url

pytestmark = MARIADB

EXPECTED = {
    "1 harness overhead": 2,
    "2 concurrency": 2,
    "3 slack ack": 1,
    "4 tools: query_mysql": 2,
    "4 tools: lookup_knowledge": 2,
    "4 tools: query_logs": 5,
    "4 tools: catalogues": 2,
    "5 cold start": 2,
    "6 workers": 4,
}


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


async def test_every_row_present_with_numeric_fields(
    tmp_path: Path, mysql_ro_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_MYSQL_DSN", mysql_ro_dsn)
    monkeypatch.setenv("BENCH_REDIS_URL", redis_url(11))
    sizes = Sizes.tiny()
    cold = [s for s in SECTIONS if s[0] == "5 cold start"]
    rest = [s for s in SECTIONS if s[0] != "5 cold start"]
    # The cold start is a separate process: run it beside the rest to keep the test short.
    (rows_a, _), (rows_b, _) = await asyncio.gather(run_all(sizes, rest), run_all(sizes, cold))
    rows: list[Row] = [*rows_a, *rows_b]
    assert [r for r in rows if r.status is Status.ERROR] == []
    counts = {name: sum(1 for r in rows if r.section == name) for name in EXPECTED}
    assert counts == EXPECTED
    for row in rows:
        assert _numeric(row.value), row
        assert all(_numeric(v) for v in row.detail.values()), row
    table = render_table(rows)
    assert all(row.name in table for row in rows)
    (tmp_path / "out.json").write_text(json.dumps([r.to_json() for r in rows]), "utf-8")


async def test_fake_model_answers_per_conversation() -> None:
    first = answer_for({"messages": [{"role": "user", "content": "a"}]})
    call = first["tool_calls"][0]
    assert call["function"]["name"] == "query_logs"
    tool = {"role": "tool", "tool_call_id": call["id"],
            "content": json.dumps({"evidence_status": "READY", "item_count": 1})}  # fmt: skip
    second = answer_for({"messages": [{"role": "user", "content": "a"}, tool]})
    arguments = json.loads(second["tool_calls"][0]["function"]["arguments"])
    assert arguments["previous_observation"]["tool_call_id"] == call["id"]
    other = answer_for({"messages": [{"role": "user", "content": "b"}]})
    assert other["tool_calls"][0]["id"] != call["id"]
    final = answer_for({"messages": [{"role": "user", "content": "a"}, tool, tool]})
    assert call["id"] in final["content"]
    server = await FakeModelServer().start()
    try:
        assert server.port > 0
    finally:
        await server.stop()
