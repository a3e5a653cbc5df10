"""Evidence work off the event loop and stoppable (issue 20 item 2, FAULTS.md "Deadline and Cancel
at every await"): a cancelled query stops its scan thread within one block, a scan past its own
budget answers ``TIMEOUT``, masking past its budget gives an ``exact: false`` summary with the
most frequent patterns."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready
from sre_diag.tools.logs import CHUNK_BYTES, JsonlLogSource, LogsAdapter
from sre_diag.tools.logs.summary import Grid, Tally
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.schemas import LogSummary
from sre_diag.tools.threads import OutOfTime, Stop, Stopped, in_thread
from tests.tools.test_logs import _at, _input, _line, _write

HOUR_FILE = "payment-api/2026-11-28/10.jsonl"


def _big_hour(folder: Path, lines: int) -> None:
    # Every 50th line belongs to another service: no batch takes the fast path, so a full scan
    # costs a Python step per line (seconds for this file).
    rows = [
        _line(
            (_at(10) + timedelta(milliseconds=i * 10)).isoformat(),
            f"charge {i} failed: card_declined after {i % 977}ms",
            "ERROR",
            "payment-api" if i % 50 else "other",
        )
        for i in range(lines)
    ]
    _write(folder, HOUR_FILE, rows)


def _endless_hour(folder: Path) -> Path:
    """An hour file of 64 GB that takes no disk (sparse: reads as NUL bytes, no newline): a
    scan of it runs for minutes unless something stops it."""
    path = folder / HOUR_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(64 << 30)
    return path


async def test_cancelling_the_await_sets_the_stop_and_the_worker_ends() -> None:
    started, ended = threading.Event(), threading.Event()

    def spin(stop: Stop) -> None:
        started.set()
        try:
            while True:
                stop.check()
                time.sleep(0.001)
        finally:
            ended.set()

    task = asyncio.ensure_future(in_thread(spin))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(ended.wait, 1.0)  # the thread itself stopped


def test_a_stop_with_a_budget_runs_out_and_shares_its_flag() -> None:
    now = [0.0]
    parent = Stop(10, clock=lambda: now[0])
    child = parent.with_budget(2)
    child.check()
    now[0] = 2.0
    with pytest.raises(OutOfTime):
        child.check()
    parent.check()  # its own budget is not spent
    now[0] = 11.0
    assert parent.with_budget(60).out_of_time()  # the sooner budget wins
    fresh = Stop()
    fresh.with_budget(60).set()
    with pytest.raises(Stopped):
        fresh.check()


def test_a_stopped_scan_reads_at_most_one_block(tmp_path: Path) -> None:
    _big_hour(tmp_path, 20_000)
    assert (tmp_path / HOUR_FILE).stat().st_size > 4 * CHUNK_BYTES
    checks = [0.0]

    def clock() -> float:
        checks[0] += 1.0  # one look at the budget per block
        return checks[0]

    with pytest.raises(OutOfTime):  # the second look is past the budget: one block was read
        scan_window(Stop(1.5, clock=clock), tmp_path, _input(_at(10), _at(11)), 5.0)
    assert checks[0] == 3.0  # the budget's start, the first block's check, the second's
    stop = Stop()
    stop.set()
    with pytest.raises(Stopped):
        scan_window(stop, tmp_path, _input(_at(10), _at(11)), 5.0)


async def test_a_scan_past_its_budget_answers_timeout(tmp_path: Path) -> None:
    _big_hour(tmp_path, 2_000)
    adapter = LogsAdapter(JsonlLogSource(tmp_path, scan_seconds=0))
    result = await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    assert result == Failed(AdapterErrorCode.TIMEOUT)


async def test_masking_past_its_budget_is_an_inexact_summary(tmp_path: Path) -> None:
    _big_hour(tmp_path, 2_000)
    exact = await LogsAdapter(JsonlLogSource(tmp_path)).invoke(
        AdapterCall("c", "r", _input(_at(10), _at(11)))
    )
    cut = await LogsAdapter(JsonlLogSource(tmp_path, mask_seconds=0)).invoke(
        AdapterCall("c", "r", _input(_at(10), _at(11)))
    )
    assert isinstance(exact, Ready) and isinstance(cut, Ready)
    assert isinstance(exact.summary, LogSummary) and isinstance(cut.summary, LogSummary)
    assert exact.summary.exact and not cut.summary.exact
    assert cut.summary.matched == exact.summary.matched == 1960  # counting is never cut
    assert cut.summary.buckets == exact.summary.buckets
    assert cut.items == exact.items


def test_masking_goes_most_frequent_key_first_and_a_set_stop_ends_it() -> None:
    grid = Grid.for_window(_at(10), _at(11))
    tally = Tally(grid)
    for i in range(200):
        tally.add(_at(10, 1), f"rare message number {i} of kind {chr(65 + i % 26) * (i + 1)}")
    for _ in range(300):
        tally.add(_at(10, 2), "the dominant one")
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # each look at the budget costs a "second"
        return now[0]

    assert len(tally.keys) > 100
    top = tally.top_patterns(Stop(1.5, clock=clock))  # one batch of keys, then out of time
    assert top[0][0] == "the dominant one" and top[0][1].count == 300
    assert tally.overflow and not tally.summary(exact=True).exact
    stop = Stop()
    stop.set()
    with pytest.raises(Stopped):
        tally.top_patterns(stop)


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    until = time.monotonic() + seconds
    while not condition() and time.monotonic() < until:
        time.sleep(0.01)


def _cpu_busy(seconds: float) -> bool:
    """Whether this process used more than a fifth of a core over the next ``seconds``."""
    before = time.process_time()
    time.sleep(seconds)
    return time.process_time() - before > seconds / 5


async def test_a_cancelled_query_stops_its_scan_thread_within_a_second(tmp_path: Path) -> None:
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=None)  # the scan runs in a thread
    adapter = LogsAdapter(source)
    assert await asyncio.to_thread(_cpu_busy, 0.2) is False
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    # The scan spins through NUL bytes until it sees its stop: then this process goes idle.
    await asyncio.to_thread(_wait_until, lambda: not _cpu_busy(0.2), 1.0)
    assert await asyncio.to_thread(_cpu_busy, 0.3) is False
