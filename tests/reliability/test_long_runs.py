"""Long runs through ``Harness.diagnose``: 500 sequential, then 50 waves of 10 concurrent.

In-test adapters (the adapter protocol) and a per-conversation model fake on loopback. After
the runs: no leaked asyncio tasks, no leaked file descriptors (small slack for the pooled
keep-alive connections), no growth of live objects beyond the test's own records, RSS near its
baseline (generous slack), one audit record per run, and no run touched another run's evidence.
No timing assertions.

RSS alone is not a leak measure here: in a busy xdist worker the allocator's high-water marks
(one malloc arena per executor thread, each kept at its peak) rose 156 MB once over 1,000 runs
that leaked nothing. So the warm-up runs concurrent waves too (every executor thread and its
arena exists before the baseline), and the exact guard is the count of live objects after a
full collection: a run's context left behind is ~17 objects per run (the guard failed when the
harness kept each one).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.harness.run import Harness
from sre_diag.tools.base import ToolName
from tests.harness.support import adapters, call, draft_json, final_step, tool_step
from tests.reliability.support import (
    LOGS_WINDOW,
    ConversationModelServer,
    audit_records,
    build,
)

WARM_UP = 5
WARM_WAVES = 3
SEQUENTIAL = 500
WAVES, WIDTH = 50, 10
FD_SLACK = 30
RSS_SLACK_BYTES = 50 * 1024 * 1024
OBJECTS_PER_RUN = 8
"""Live objects a run may add: the in-test adapter records each call (its envelope, 6 objects)
and the fake model counts each conversation (1); measured 3.8 per run."""


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


def live_objects() -> int:
    """Objects the collector tracks, after a full collection."""
    gc.collect()
    return len(gc.get_objects())


async def waves_of_runs(harness: Harness, wave: int, prefix: str, offset: int = 0) -> None:
    """One wave: ``WIDTH`` runs at once, each checked."""
    numbers = [offset + wave * WIDTH + k for k in range(WIDTH)]
    results = await asyncio.gather(
        *(harness.diagnose(DiagnosisRequest(f"{prefix} {n}")) for n in numbers)
    )
    for n, result in zip(numbers, results, strict=True):
        check(result, n)


def product_tasks() -> int:
    """Tasks now alive, minus the fake model server's per-connection handlers."""
    return sum(1 for t in asyncio.all_tasks() if "RequestHandler" not in repr(t.get_coro()))


# The serial phase: the live-object count is of the whole process, and in a parallel worker
# what earlier tests left running (their servers' threads, captured records) moved it by more
# than a run's share (seen once: +174 objects a run in a full parallel phase, none alone).
@pytest.mark.solo
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
        for wave in range(WARM_WAVES):  # ... and every executor thread of the concurrent runs
            await waves_of_runs(harness, wave, "warm-con", offset=WARM_UP)
        await settle()
        tasks, fds, rss, objects = product_tasks(), fd_count(), rss_bytes(), live_objects()

        for n in range(SEQUENTIAL):
            check(await harness.diagnose(DiagnosisRequest(f"seq {n}")), n)
        for wave in range(WAVES):
            await waves_of_runs(harness, wave, "con")
        await settle()

        assert product_tasks() <= tasks
        assert fd_count() <= fds + FD_SLACK
        measured = SEQUENTIAL + WAVES * WIDTH
        assert live_objects() - objects <= OBJECTS_PER_RUN * measured
        assert rss_bytes() <= rss + RSS_SLACK_BYTES
        total = WARM_UP + WARM_WAVES * WIDTH + measured
        assert server.request_count == 2 * total and server.unexpected == 0
        logs = table[ToolName.QUERY_LOGS].calls
        assert len(logs) == total
        assert len({c.run_id for c in logs}) == total  # one run, one canonical invocation
        assert all(c.tool_call_id.endswith("-c1") for c in logs)
        records = audit_records(tmp_path)
        assert len(records) == total and len({r["run_id"] for r in records}) == total
    finally:
        await server.stop()
