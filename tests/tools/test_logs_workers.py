"""Large log scans in child processes (issue 20 item 2: CPU-heavy evidence work off the event
loop, bounded, and reached by the deadline and Cancel; FAULTS.md "a process killed", "Deadline and
Cancel at every await"): the child answers exactly what a thread would, a cancelled query kills
its child at once, a child past its budget answers ``TIMEOUT`` and stays usable, a child killed
from outside is ``UNAVAILABLE`` and replaced, and no child outlives its parent."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready
from sre_diag.tools.errors import LogSourceError
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.logs.parts import window_files
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.schemas import LogLevel, LogsInput
from sre_diag.tools.worker_child import resolve
from sre_diag.tools.workers import (
    GRACE_SECONDS,
    WorkerFailed,
    WorkerPool,
    read_frame,
    target_name,
    write_frame,
)
from tests.tools.test_logs import _at, _input, _line, _write
from tests.tools.test_logs_stop import HOUR_FILE, _endless_hour


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (its parent has not reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}


async def _until(condition: object, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return bool(condition())  # type: ignore[operator]


def _mixed_history(folder: Path) -> None:
    """Two hours of one service with other services' lines, every level, malformed lines,
    over-long and blank lines, ties in time, and messages that group and do not."""
    for hour in (10, 11):
        rows: list[str] = []
        for i in range(3_000):
            ts = (_at(hour) + timedelta(milliseconds=(i // 3) * 700)).isoformat()
            level = ("INFO", "WARN", "ERROR", "DEBUG")[i % 4]
            service = "payment-api" if i % 17 else "ledger"
            rows.append(_line(ts, f"POST /v1/payments 50{i % 4} in {i % 911}ms order=ord_{i}",
                              level, service))  # fmt: skip
            if i % 250 == 0:
                rows.extend(["{not json", "", '{"ts": 1}', "x" * 70_000])
        _write(folder, f"payment-api/2026-11-28/{hour}.jsonl", rows)


@pytest.mark.parametrize(
    "query",
    [
        _input(_at(10), _at(12)),
        _input(_at(10, 20), _at(11, 5), limit=7),
        _input(_at(9), _at(12), level=LogLevel.ERROR),
        _input(_at(10), _at(12), contains="50 3"),
        _input(_at(10), _at(12), contains="ORD_12"),
    ],
    ids=["two-hours", "partial-window", "errors", "contains", "contains-case"],
)
@pytest.mark.parametrize(("part_bytes", "workers"), [(2**40, 1), (60_000, 2), (50_000, 3)])
async def test_children_answer_exactly_what_a_thread_answers(
    tmp_path: Path, query: LogsInput, part_bytes: int, workers: int
) -> None:
    _mixed_history(tmp_path)
    in_thread = JsonlLogSource(tmp_path, process_bytes=None)
    in_child = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=part_bytes, workers=workers)
    try:
        assert await in_child.search(query) == await in_thread.search(query)
        assert in_child.stats == in_thread.stats
        assert in_child.stats.malformed_lines > 0
        assert 1 <= in_child.workers.started <= workers
    finally:
        await in_child.aclose()


async def test_only_windows_over_the_bound_go_to_a_child(tmp_path: Path) -> None:
    _mixed_history(tmp_path)
    listed = window_files(tmp_path, _input(_at(10), _at(12)))
    assert [rel for rel, _ in listed] == [f"payment-api/2026-11-28/{h}.jsonl" for h in (11, 10)]
    size = sum(size for _, size in listed)
    small = JsonlLogSource(tmp_path, process_bytes=size + 1)
    large = JsonlLogSource(tmp_path, process_bytes=size)
    try:
        await small.search(_input(_at(10), _at(12)))
        await large.search(_input(_at(10), _at(12)))
        assert small.workers.started == 0 and large.workers.started == 1
        assert len(large.workers.pids()) == 1  # kept for the next query
        await large.search(_input(_at(10), _at(11)))  # one hour: under the bound, in a thread
        await large.search(_input(_at(10), _at(12)))
        assert large.workers.started == 1  # the same child again
    finally:
        await large.aclose()
    assert large.workers.pids() == []


async def test_a_cancelled_query_kills_its_children_at_once(tmp_path: Path) -> None:
    _endless_hour(tmp_path)  # 64 GB: two parts, two children
    source = JsonlLogSource(tmp_path, process_bytes=0)
    try:
        query = asyncio.create_task(source.search(_input(_at(10), _at(11))))
        # pids() lists a child from its spawn on; busy counts it once it works.
        assert await _until(lambda: source.workers.busy == 2, 60)
        pids = source.workers.pids()
        await asyncio.sleep(0.3)  # both children are scanning NUL bytes now
        assert not query.done() and source.workers.busy == 2
        cancelled = time.monotonic()
        query.cancel()
        with pytest.raises(asyncio.CancelledError):
            await query
        assert await _until(lambda: all(_gone(pid) for pid in pids), 1.0)
        assert time.monotonic() - cancelled < 1.0
        assert source.workers.pids() == [] and source.workers.busy == 0
        _write(tmp_path, HOUR_FILE, [_line(_at(10, 5).isoformat(), "after", service="payment-api")])
        page = await source.search(_input(_at(10), _at(11)))  # a new child
        assert [r.message for r in page.items] == ["after"] and source.workers.started == 3
    finally:
        await source.aclose()


async def test_a_deadline_around_the_adapter_reaches_the_children(tmp_path: Path) -> None:
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.0):
                await LogsAdapter(source).invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
        assert await _until(lambda: source.workers.busy == 0, 1.0)
    finally:
        await source.aclose()


async def test_children_past_their_budget_answer_timeout_and_stay(tmp_path: Path) -> None:
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, scan_seconds=0.5)
    adapter = LogsAdapter(source)
    call = AdapterCall("c", "r", _input(_at(10), _at(11)))
    try:
        await asyncio.gather(source.workers.warm(), source.workers.warm())  # started in time
        assert len(source.workers.pids()) == 2
        assert await adapter.invoke(call) == Failed(AdapterErrorCode.TIMEOUT)
        # The first part out of time ends the query: a sibling still scanning is killed.
        pids = source.workers.pids()
        assert 1 <= len(pids) <= 2 and source.workers.busy == 0
        assert await adapter.invoke(call) == Failed(AdapterErrorCode.TIMEOUT)
        assert set(pids) <= set(source.workers.pids()) | {p for p in pids if _gone(p)}
        assert source.workers.busy == 0
    finally:
        await source.aclose()
    assert await _until(lambda: all(_gone(pid) for pid in pids), 5.0)


@pytest.mark.parametrize("workers", [1, 2], ids=["one-child", "in-parts"])
async def test_a_child_killed_mid_scan_is_unavailable_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, workers=workers)
    adapter = LogsAdapter(source)
    call = AdapterCall("c", "r", _input(_at(10), _at(11)))
    try:
        invoked = asyncio.create_task(adapter.invoke(call))
        assert await _until(lambda: source.workers.busy == workers, 60)
        await asyncio.sleep(0.3)
        os.kill(source.workers.pids()[0], signal.SIGKILL)  # the kernel's OOM killer, an operator
        with caplog.at_level(logging.WARNING):
            assert await invoked == Failed(AdapterErrorCode.UNAVAILABLE)
        assert "log scan worker failed (WorkerFailed)" in caplog.text
        assert await _until(lambda: source.workers.busy == 0, 1.0)  # the other part is killed
        _write(tmp_path, HOUR_FILE, [_line(_at(10, 5).isoformat(), "back", service="payment-api")])
        result = await adapter.invoke(call)
        assert isinstance(result, Ready) and [i.message for i in result.items] == ["back"]
        assert source.workers.started == workers + 1
    finally:
        await source.aclose()


async def test_concurrent_large_queries_share_at_most_the_pool_size(tmp_path: Path) -> None:
    _mixed_history(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=100_000, workers=2)
    expected = await JsonlLogSource(tmp_path, process_bytes=None).search(_input(_at(10), _at(12)))
    try:
        pages = await asyncio.gather(*(source.search(_input(_at(10), _at(12))) for _ in range(6)))
        assert all(page == expected for page in pages)
        assert source.workers.started <= 2 and len(source.workers.pids()) <= 2
    finally:
        await source.aclose()


_ORPHAN = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from datetime import datetime, timedelta, UTC
    from sre_diag.tools.logs import JsonlLogSource
    from sre_diag.tools.schemas import LogsInput

    async def main() -> None:
        source = JsonlLogSource(Path(sys.argv[1]), process_bytes=0)
        start = datetime(2026, 11, 28, 10, tzinfo=UTC)
        q = LogsInput(service="payment-api", start=start, end=start + timedelta(hours=1))
        task = asyncio.create_task(source.search(q))
        while len(source.workers.pids()) < 2:
            await asyncio.sleep(0.02)
        print(*source.workers.pids(), flush=True)
        if sys.argv[2] == "exit":
            await asyncio.sleep(0.3)
            task.cancel()
            return  # no aclose: the exit hook ends the child
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_child_outlives_its_parent(tmp_path: Path, how: str) -> None:
    _endless_hour(tmp_path)
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, str(tmp_path), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2
    if how == "sigkill":
        time.sleep(0.3)
        parent.kill()
    _, err = parent.communicate(timeout=30)
    assert "Traceback" not in err
    until = time.monotonic() + 5
    while not all(map(_gone, pids)) and time.monotonic() < until:
        time.sleep(0.02)
    assert all(map(_gone, pids))


async def test_a_child_that_starts_too_slowly_counts_against_the_budget(tmp_path: Path) -> None:
    _mixed_history(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, scan_seconds=0.1 - GRACE_SECONDS)
    try:
        with pytest.raises(LogSourceError) as raised:
            await source.search(_input(_at(10), _at(12)))
        assert raised.value.code is AdapterErrorCode.TIMEOUT
        # The child started for nobody is kept for the next query, never left running loose.
        assert await _until(lambda: source.workers.started == 1, 60)
        assert await _until(lambda: len(source.workers.pids()) == 1, 5)
    finally:
        await source.aclose()
    assert source.workers.pids() == []


async def test_a_child_inherits_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")  # the environment, not the code
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("DIAG_MYSQL_DSN", "mysql://root:pw@127.0.0.1/x")
    _mixed_history(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0)
    try:
        await source.search(_input(_at(10), _at(12)))
        (pid,) = source.workers.pids()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")  # noqa: ASYNC240
        names = {entry.partition(b"=")[0].decode() for entry in environ if entry}
        assert {"OPENAI_API_KEY", "SLACK_BOT_TOKEN", "DIAG_MYSQL_DSN"}.isdisjoint(names)
        assert b"secret" not in b"".join(environ) and "PYTHONPATH" in names
    finally:
        await source.aclose()


def test_frames_are_bounded_and_a_short_frame_is_the_end() -> None:
    buffer = io.BytesIO()
    write_frame(buffer, ("ok", [1, "two"]))
    buffer.seek(0)
    assert read_frame(buffer) == ("ok", [1, "two"])
    with pytest.raises(WorkerFailed):  # the length alone decides: nothing more is read
        read_frame(io.BytesIO(struct.pack(">I", 2**31) + b"x"), limit=1024)
    for cut in (b"", b"\x00\x00", struct.pack(">I", 10) + b"short"):
        with pytest.raises(EOFError):
            read_frame(io.BytesIO(cut))


def test_only_module_functions_of_the_evidence_layer_are_targets() -> None:
    assert target_name(scan_window) == "sre_diag.tools.logs.window:scan_window"
    assert resolve("sre_diag.tools.logs.window:scan_window") is scan_window
    for outside in (os.getcwd, print, lambda stop: stop):
        with pytest.raises(ValueError):
            target_name(outside)
    for name in ("os:system", "sre_diag.settings:Settings", "sre_diag.tools.logs.jsonl:a.b", "x"):
        with pytest.raises(LookupError):
            resolve(name)


async def test_a_pool_needs_a_worker_and_positional_arguments() -> None:
    with pytest.raises(ValueError):
        WorkerPool(0)
    with pytest.raises(TypeError):
        await WorkerPool(1).call(scan_window, 1.0, folder=Path("."))  # type: ignore[call-arg]
