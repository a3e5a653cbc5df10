"""Issue 10 item 1, "Done when": the event loop stays responsive while the worst evidence of
item 1 flows through the REAL ``query_logs`` and ``lookup_knowledge`` adapters.

A ticker task sleeps ~5 ms at a time and records how late each wake-up is; meanwhile queries run
over a tmp log folder of 16-64 KB hostile lines (``a.a.a…``, ``a-a-…``, ``eyJ-…``, ``key-…===``,
open quotes, URL-ish runs; 128-256 KB ones are skipped unread) and a runbook folder with
16-256 KB heading lines of spaces and ``#`` and hostile bodies. Before the fix one 16 KB line held
the loop ~7 s. The lag p99 must stay under 100 ms.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.knowledge import KnowledgeAdapter
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.schemas import KnowledgeInput, LogLevel, LogsInput

pytestmark = pytest.mark.solo  # loop lag under CPU load: the serial phase (scripts/test)

KB = 1024
UNITS = ["a.", "a-", "eyJ-", "key-", "a.password=", 'password="x ', "://a:", "# ", "Bearer "]
TICK = 0.005


def _hostile(unit: str, size: int, tail: str = "===") -> str:
    return (unit * (size // len(unit) + 1))[:size] + tail


def _write_logs(folder: Path) -> None:
    hour = folder / "svc" / "2026-11-28" / "10.jsonl"
    hour.parent.mkdir(parents=True)
    lines = []
    for n, (unit, size) in enumerate(
        (unit, size) for unit in UNITS for size in (16 * KB, 48 * KB, 128 * KB, 256 * KB)
    ):
        record = {
            "ts": (datetime(2026, 11, 28, 10, tzinfo=UTC) + timedelta(seconds=n)).isoformat(),
            "service": "svc",
            "level": "ERROR",
            "message": f"pool {_hostile(unit, size)}",
        }
        lines.append(json.dumps(record))
    hour.write_text("\n".join(lines) + "\n", "utf-8")


def _write_runbooks(folder: Path) -> None:
    folder.mkdir()
    for n, size in enumerate((16 * KB, 64 * KB, 256 * KB)):
        headings = "\n".join(
            [
                "#" + " " * size + "x" + " " * 8 + "#y",
                "# a" + " " * size + "##b",
                "#" + " " * (size // 3) + "#" * (size // 3) + " " * (size // 3) + "x",
                "## " + " #" * (size // 2),
            ]
        )
        bodies = "\n\n".join(f"## pool {unit}\n\npool {_hostile(unit, size)}" for unit in UNITS)
        (folder / f"hostile-{n}.md").write_text(f"{headings}\n\n{bodies}\n", "utf-8")


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        lags.append(time.perf_counter() - started - TICK)


async def test_loop_lag_p99_stays_under_100ms_on_hostile_evidence(tmp_path: Path) -> None:
    _write_logs(tmp_path / "logs")
    _write_runbooks(tmp_path / "kb")
    logs = LogsAdapter(JsonlLogSource(tmp_path / "logs"))
    knowledge = KnowledgeAdapter(tmp_path / "kb", tmp_path / "cache", rescan_interval_seconds=0)
    start = datetime(2026, 11, 28, 10, tzinfo=UTC)
    queries = [
        LogsInput(service="svc", start=start, end=start + timedelta(hours=1), limit=50),
        LogsInput(service="svc", start=start, end=start + timedelta(hours=1), contains="a.a.a"),
        LogsInput(service="svc", start=start, end=start + timedelta(hours=1),
                  contains="pool", level=LogLevel.ERROR, limit=50),
    ]  # fmt: skip

    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lags, stop))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    for _ in range(2):
        for q in queries:
            result = await logs.invoke(AdapterCall("c", "r", q))
            assert isinstance(result, Ready) and result.items
        for text in ("pool a.a.a", "pool key", "password eyJ"):
            result = await knowledge.invoke(AdapterCall("c", "r", KnowledgeInput(query=text)))
            assert isinstance(result, Ready) and result.items
    elapsed = time.perf_counter() - started
    stop.set()
    await ticker

    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(  # visible with -s: the numbers the issue asks for
        f"loop lag over {elapsed:.2f}s of hostile evidence: samples={len(lags)} "
        f"median={statistics.median(lags) * 1000:.1f}ms p99={p99 * 1000:.1f}ms "
        f"max={lags[-1] * 1000:.1f}ms"
    )
    assert len(lags) >= 20
    assert p99 < 0.1, (p99, lags[-5:])
