"""A storm of cancels while children start (FAULTS.md "cancel while a child process is still
starting"): at most the pool's size of children alive at any instant, starts included; each
cancel returns within a second; no child outlives ``aclose``."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from sre_diag.tools.logs import JsonlLogSource
from tests.tools.test_logs import _at, _input
from tests.tools.test_logs_workers import _gone, _mixed_history

POOL = 2


def _worker_children(baseline: set[int]) -> set[int]:
    """This process's evidence-worker children, beyond ``baseline`` (other tests' pools)."""
    found = set()
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in baseline:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" or fields[1].decode() != me:  # state, ppid
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if b"worker_child" in handle.read():
                    found.add(int(entry))
        except OSError:  # ended while listed
            continue
    return found


async def _watch(baseline: set[int], peak: list[int], seen: set[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        alive = _worker_children(baseline)
        seen.update(alive)
        peak[0] = max(peak[0], len(alive))
        await asyncio.sleep(0.002)


# The serial phase: under four busy parallel workers a child killed on its own thread was
# once still listed right after aclose() returned (see the pool's close for that window).
@pytest.mark.solo
async def test_a_storm_of_cancels_keeps_every_bound(tmp_path: Path) -> None:
    _mixed_history(tmp_path)
    baseline = _worker_children(set())
    source = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=1, workers=POOL)
    q = _input(_at(10), _at(12))
    rng = random.Random(40)
    peak, seen, stop = [0], set[int](), asyncio.Event()
    watcher = asyncio.create_task(_watch(baseline, peak, seen, stop))
    slowest = 0.0
    try:
        for _ in range(4):  # 40 queries in waves of ten, each cancelled within 0.4 s
            queries = [asyncio.create_task(source.search(q)) for _ in range(10)]
            await asyncio.sleep(rng.uniform(0.0, 0.4))
            for query in queries:
                query.cancel()
                started = time.monotonic()
                try:
                    await query
                except asyncio.CancelledError:
                    pass
                slowest = max(slowest, time.monotonic() - started)
    finally:
        await source.aclose()
        left = _worker_children(baseline)
        stop.set()
        await watcher
    assert peak[0] <= POOL, peak
    assert slowest < 1.0, slowest
    assert not left, left  # nothing outlives aclose
    assert seen and all(_gone(pid) for pid in seen)
    assert source.workers.busy == 0
