"""Long runs through ``Harness.diagnose``: 500 sequential, then 50 waves of 10 concurrent.

In-test adapters (the adapter protocol) and a per-conversation model fake on loopback. After
the runs: no leaked asyncio tasks, no leaked file descriptors (small slack for the pooled
keep-alive connections), RSS near its baseline (generous slack), one audit record per run, and
no run touched another run's evidence. No timing assertions.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path

import pytest

from plugin.contract.request import DiagnosisRequest
from plugin.contract.result import ExecutionResult, Outcome
from plugin.doubles.scripted_model import ModelStep
from plugin.tools.base import ToolName
from tests.harness.support import adapters, call, draft_json, final_step, tool_step
from tests.reliability.support import (
    LOGS_WINDOW,
    ConversationModelServer,
    audit_records,
    build,
)

WARM_UP = 5
SEQUENTIAL = 500
WAVES, WIDTH = 50, 10
FD_SLACK = 30
RSS_SLACK_BYTES = 50 * 1024 * 1024


def script(query: str) -> list[ModelStep]:
    n = query.rsplit(" ", 1)[-1]
    return [
        tool_step(call(f"r{n}-c1", "query_logs", {"service": "payment-api", **LOGS_WINDOW})),
        final_step(draft_json([f"r{n}-c1"])),
    ]


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)
    gc.collect()


def check(result: ExecutionResult, n: int) -> None:
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert result.progress is not None
    assert [c.tool_call_id for c in result.progress.checks] == [f"r{n}-c1"]


def product_tasks() -> int:
    """Tasks now alive, minus the fake model server's per-connection handlers."""
    return sum(1 for t in asyncio.all_tasks() if "RequestHandler" not in repr(t.get_coro()))


async def test_many_sequential_and_concurrent_runs_leak_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)  # 2000 INFO records would only cost time here
    server = await ConversationModelServer(script).start()
    table = adapters()
    harness = build(server.base_url, tmp_path, table, DIAG_MAX_CONCURRENT_RUNS=WIDTH)
    try:
        for n in range(WARM_UP):  # warm-up: imports, tokenizer, pooled connections
            check(await harness.diagnose(DiagnosisRequest(f"warm {n}")), n)
        await settle()
        tasks, fds, rss = product_tasks(), fd_count(), rss_bytes()

        for n in range(SEQUENTIAL):
            check(await harness.diagnose(DiagnosisRequest(f"seq {n}")), n)
        for wave in range(WAVES):
            numbers = [wave * WIDTH + k for k in range(WIDTH)]
            results = await asyncio.gather(
                *(harness.diagnose(DiagnosisRequest(f"con {n}")) for n in numbers)
            )
            for n, result in zip(numbers, results, strict=True):
                check(result, n)
        await settle()

        assert product_tasks() <= tasks
        assert fd_count() <= fds + FD_SLACK
        assert rss_bytes() <= rss + RSS_SLACK_BYTES
        total = WARM_UP + SEQUENTIAL + WAVES * WIDTH
        assert server.request_count == 2 * total and server.unexpected == 0
        logs = table[ToolName.QUERY_LOGS].calls
        assert len(logs) == total
        assert len({c.run_id for c in logs}) == total  # one run, one canonical invocation
        assert all(c.tool_call_id.endswith("-c1") for c in logs)
        records = audit_records(tmp_path)
        assert len(records) == total and len({r["run_id"] for r in records}) == total
    finally:
        await server.stop()
