"""Item 2: N concurrent harness runs against a model that waits ``latency`` per round."""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path

from bench.common import (
    Row,
    Sizes,
    judged,
    peak_rss_kib,
    reset_peak_rss,
    rss_kib,
)
from bench.fake_model import FakeModelProcess
from bench.loopmon import LoopMonitor
from bench.scenario import build_bench_harness, is_draft, request_for
from sre_diag.harness.run import Harness

__all__ = ["run_concurrency"]

SECTION = "2 concurrency"
ROUNDS = 3
MIB = 1024.0


async def _one_level(harness: Harness, server: FakeModelProcess, n: int, latency: float) -> Row:
    gc.collect()
    baseline = rss_kib()
    hwm_reset = reset_peak_rss()
    ideal = ROUNDS * latency
    async with LoopMonitor() as monitor:
        started = time.perf_counter()
        results = await asyncio.gather(*(harness.diagnose(request_for(i)) for i in range(n)))
        wall = time.perf_counter() - started
    peak = max(peak_rss_kib() if hwm_reset else 0, monitor.peak_rss)
    stats = await server.stats()
    drafts = sum(is_draft(r) for r in results)
    ratio = wall / ideal
    per_run_mib = max(0, peak - baseline) / MIB / n
    ok = ratio <= 1.1 and monitor.p99_ms < 20 and per_run_mib < 5
    return Row(
        SECTION, f"{n} concurrent runs: wall / ideal", round(ratio, 3), "x",
        "wall <= 1.1x ideal; lag p99 < 20 ms; < 5 MiB/run", judged(ok),
        {
            "wall_s": round(wall, 3),
            "ideal_s": round(ideal, 3),
            "runs_per_s": round(n / wall, 2),
            "loop_lag_p99_ms": round(monitor.p99_ms, 2),
            "loop_lag_max_ms": round(monitor.max_ms, 2),
            "rss_baseline_mib": round(baseline / MIB, 1),
            "rss_peak_mib": round(peak / MIB, 1),
            "rss_per_inflight_run_mib": round(per_run_mib, 3),
            "drafts": drafts,
            "model_requests": int(stats["requests"]),
            "server_peak_in_flight": int(stats["peak_in_flight"]),
        },
        f"{ROUNDS} rounds x {latency:g} s model latency; one shared httpx client (limit 100)",
    )  # fmt: skip


async def run_concurrency(sizes: Sizes) -> list[Row]:
    rows: list[Row] = []
    with FakeModelProcess(delay=sizes.round_latency_s) as server, \
            tempfile.TemporaryDirectory() as tmp:  # fmt: skip
        harness = build_bench_harness(server.base_url, Path(tmp) / "audit")
        try:
            await harness.diagnose(request_for(-1))  # warm imports and lazy singletons
            for n in sizes.concurrency:
                await server.stats("/reset")  # the peak-in-flight counter belongs to this level
                rows.append(await _one_level(harness, server, n, sizes.round_latency_s))
        finally:
            await harness.aclose()
    return rows
