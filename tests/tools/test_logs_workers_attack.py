"""Attacks on the child-process scan (issue 20 item 2; FAULTS.md "Processes", "Files"): a child
stopped mid-scan, a child that dies while idle, a child whose answer is garbage or of an unknown
shape, and queries the single scan refuses — each must end as the single scan would or as a
defined error, leave no descriptor, zombie or desynchronised child behind."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import pickle
import signal
import struct
import sys
import time
import warnings
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed
from sre_diag.tools.errors import LogSourceError
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.logs.parts import window_files
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.threads import NEVER
from sre_diag.tools.workers import GRACE_SECONDS, WorkerPool
from tests.tools.test_logs import _at, _input, _line, _write
from tests.tools.test_logs_stop import HOUR_FILE, _endless_hour
from tests.tools.test_logs_workers import _gone, _mixed_history, _until


def _reply_pipe(pid: int) -> Path:
    """The child's end of the pipe its answers travel on, found by the pipe's inode: this
    process reads the other end (the test writes into it what a broken child would)."""
    ours = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if Path(f"/proc/self/fd/{fd}").exists()}  # fmt: skip
    for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
        if link.startswith("pipe:") and link in ours and int(fd) > 2:
            return Path(f"/proc/{pid}/fd/{fd}")
    raise AssertionError("no reply pipe")


def _forge(pid: int, payload: bytes) -> None:
    with _reply_pipe(pid).open("wb") as pipe:
        pipe.write(struct.pack(">I", len(payload)) + payload)


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(42),  # a well-formed frame of an unknown shape
        pickle.dumps(("ok",)),
        b"cno_such_module_here\nx\n.",  # a pickle that imports what does not exist
        b"\x80\x05\x95garbage",
    ],
    ids=["unknown-shape", "short-ok", "import-error", "garbage"],
)
async def test_a_child_answering_garbage_is_discarded_never_reused(
    tmp_path: Path, payload: bytes
) -> None:
    """A reply the protocol does not know means the child and the pipe are out of step: the
    next query on that child would read this query's answer. It is killed, the error defined."""
    _mixed_history(tmp_path)
    q = _input(_at(10), _at(12))
    expected = scan_window(NEVER, tmp_path, q, 5.0).page
    source = JsonlLogSource(tmp_path, process_bytes=0, workers=1)
    try:
        await source.workers.warm()
        (pid,) = source.workers.pids()
        _forge(pid, payload)  # read as the answer to the next request
        with pytest.raises(LogSourceError) as raised:
            await source.search(q)
        assert raised.value.code is AdapterErrorCode.UNAVAILABLE
        assert await _until(lambda: _gone(pid), 5.0)
        other = _input(_at(11), _at(12), limit=1)  # not the query the stale answer is for
        assert await source.search(other) == scan_window(NEVER, tmp_path, other, 5.0).page
        assert await source.search(q) == expected  # a new child, in step
        assert source.workers.started == 2
    finally:
        await source.aclose()


def _pipes() -> int:
    """This process's open pipe descriptors."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:  # closed while listed
            pass
    return count


async def test_an_idle_child_killed_from_outside_leaves_no_descriptor(tmp_path: Path) -> None:
    pool = WorkerPool(1)
    try:
        await pool.warm()
        before = _pipes()
        for _ in range(3):
            (pid,) = pool.pids()
            os.kill(pid, signal.SIGKILL)  # the OOM killer, an operator: while idle
            assert await _until(lambda pid=pid: _gone(pid), 5.0)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await pool.warm()  # the dead child is dropped, a new one started
                gc.collect()
            assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
        # Only pipes (a child's are two): other tests in this process may close descriptors
        # of their own meanwhile, so the count may drop, but a leak would raise it by 6.
        assert _pipes() <= before
    finally:
        await pool.close()


async def test_a_child_stopped_mid_scan_answers_timeout_and_is_killed(tmp_path: Path) -> None:
    """SIGSTOP (a debugger, a frozen cgroup): the child never answers nor checks its budget;
    the parent's watchdog kills it at budget + grace and the query is ``TIMEOUT``."""
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, workers=1, scan_seconds=0.5)
    call = AdapterCall("c", "r", _input(_at(10), _at(11)))
    try:
        await source.workers.warm()
        (pid,) = source.workers.pids()
        invoked = asyncio.create_task(LogsAdapter(source).invoke(call))
        await asyncio.sleep(0.2)
        os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        assert await invoked == Failed(AdapterErrorCode.TIMEOUT)
        assert time.monotonic() - began < 0.5 + GRACE_SECONDS + 3.0
        assert await _until(lambda: _gone(pid), 5.0) and source.workers.busy == 0
        _write(tmp_path, HOUR_FILE, [_line(_at(10, 5).isoformat(), "on", service="payment-api")])
        await source.workers.warm()  # a start under load would spend most of half a second
        page = await source.search(_input(_at(10), _at(11)))
        assert [r.message for r in page.items] == ["on"]
    finally:
        await source.aclose()


@pytest.mark.parametrize("service", [".", ".."])
async def test_a_dot_service_is_refused_in_children_as_in_a_thread(
    tmp_path: Path, service: str
) -> None:
    """``.`` and ``..`` are refused by the whole scan (``INVALID_INPUT``); the window's files
    are not even looked at (``..`` would name files beside the folder)."""
    folder = tmp_path / "logs"
    _write(tmp_path, "2026-11-28/10.jsonl", [_line(_at(10, 1).isoformat(), "x", service="..")])
    _write(folder, "2026-11-28/10.jsonl", [_line(_at(10, 1).isoformat(), "x", service=".")])
    q = _input(_at(10), _at(11), service)
    assert window_files(folder, q) == []
    for source in (
        JsonlLogSource(folder, process_bytes=None),
        JsonlLogSource(folder, process_bytes=0, part_bytes=1, workers=2),
    ):
        try:
            with pytest.raises(LogSourceError) as raised:
                await source.search(q)
            assert raised.value.code is AdapterErrorCode.INVALID_INPUT
        finally:
            await source.aclose()


async def test_what_a_child_logs_is_logged_by_the_parent_never_written_raw(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hard-linked hour file is skipped with a warning: from a child it reaches the parent's
    log (its format, its run id), not the parent's standard error as a bare line."""
    _mixed_history(tmp_path)
    os.link(tmp_path / "payment-api/2026-11-28/10.jsonl", tmp_path / "copy.jsonl")
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from sre_diag.log import configure_logging\n"
        "from sre_diag.tools.logs import JsonlLogSource\n"
        "from tests.tools.test_logs import _at, _input\n"
        "async def main():\n"
        "    source = JsonlLogSource(Path(sys.argv[1]), process_bytes=0, part_bytes=1)\n"
        "    await source.search(_input(_at(10), _at(12)))\n"
        "    await source.aclose()\n"
        "configure_logging('INFO', 'json')\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(tmp_path),
        stderr=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().splitlines()
    assert any("hard-linked (2 names)" in line for line in lines)
    assert all(json.loads(line)["logger"].startswith("sre_diag.") for line in lines)  # JSON only
    source = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=1, workers=2)
    try:
        with caplog.at_level(logging.WARNING, logger="sre_diag.tools.logs"):
            await source.search(_input(_at(10), _at(12)))
        skipped = [r for r in caplog.records if "hard-linked (2 names)" in r.getMessage()]
        assert skipped and all(r.name == "sre_diag.tools.logs" for r in skipped)
    finally:
        await source.aclose()


async def test_a_query_waiting_for_a_busy_pool_spends_its_own_budget(tmp_path: Path) -> None:
    """``scan_seconds`` bounds a query from its start, as in a thread: waiting for a child
    another query holds spends it, never restarts it (four queries on one child ended one
    budget after another: the fourth after four)."""
    _endless_hour(tmp_path)
    source = JsonlLogSource(tmp_path, process_bytes=0, workers=1, scan_seconds=1.0)
    adapter = LogsAdapter(source)
    try:
        await source.workers.warm()

        async def timed() -> tuple[object, float]:
            began = time.monotonic()
            result = await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
            return result, time.monotonic() - began

        results = await asyncio.gather(*(timed() for _ in range(4)))
        assert all(result == Failed(AdapterErrorCode.TIMEOUT) for result, _ in results)
        assert max(took for _, took in results) < 1.0 + GRACE_SECONDS  # the watchdog's bound
        assert source.workers.busy == 0 and len(source.workers.pids()) <= 1
    finally:
        await source.aclose()


async def test_a_cancelled_close_still_ends_every_idle_child(tmp_path: Path) -> None:
    """``aclose`` cut short (a shutdown's own deadline): the idle children it took from the
    pool end all the same, none is left running with its pipes dropped."""
    pool = WorkerPool(3)
    await asyncio.gather(pool.warm(), pool.warm(), pool.warm())
    pids = pool.pids()
    assert len(pids) >= 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        closing = asyncio.create_task(pool.close())
        await asyncio.sleep(0)  # the first kill is under way
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert await _until(lambda: all(_gone(pid) for pid in pids), 10.0)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_pool_outlives_the_event_loop_that_started_its_children(tmp_path: Path) -> None:
    """A source used from one ``asyncio.run`` and then another (a host app, a test fixture):
    the end of the first loop (its executor's threads end) does not kill the children, and
    the second loop can wait for a busy child (an asyncio primitive is bound to one loop)."""
    _mixed_history(tmp_path)
    q = _input(_at(10), _at(12))
    expected = scan_window(NEVER, tmp_path, q, 5.0).page
    source = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=1, workers=2)

    async def four() -> list[object]:
        return await asyncio.gather(*(source.search(q) for _ in range(4)), return_exceptions=True)

    try:
        assert asyncio.run(four()) == [expected] * 4
        pids = source.workers.pids()
        time.sleep(0.3)  # a parent-death signal would have arrived by now
        assert not any(_gone(pid) for pid in pids)
        assert asyncio.run(four()) == [expected] * 4
        assert source.workers.pids() == pids and source.workers.started == 2
    finally:
        asyncio.run(source.aclose())


# The serial phase: the last query's scan runs against the source's time budget, and with
# four busy parallel workers on two cores it ran out of it (TIMEOUT) twice; alone it passes.
@pytest.mark.solo
async def test_a_query_cancelled_at_any_moment_leaves_the_pool_whole(tmp_path: Path) -> None:
    """Cancel while the slot is awaited, a child starts, a part is scanned, the merge runs:
    afterwards no call is counted busy, no child beyond the pool's size is alive, every child
    a cancel killed is gone, and the next query gets the single scan's page."""
    _mixed_history(tmp_path)
    q = _input(_at(10), _at(12))
    expected = scan_window(NEVER, tmp_path, q, 5.0).page
    source = JsonlLogSource(tmp_path, process_bytes=0, part_bytes=1, workers=2)
    seen: set[int] = set()
    try:
        for delay in (0.0, 0.0, 0.001, 0.005, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5):
            queries = [asyncio.create_task(source.search(q)) for _ in range(2)]
            await asyncio.sleep(delay)
            seen.update(source.workers.pids())
            for query in queries:
                query.cancel()
            for query in queries:
                try:
                    assert await query == expected  # it may have ended before the cancel
                except asyncio.CancelledError:
                    pass
            assert source.workers.busy == 0 and len(source.workers.pids()) <= 2
        assert await source.search(q) == expected
        alive = set(source.workers.pids())
        assert await _until(lambda: all(_gone(pid) for pid in seen - alive), 5.0)
    finally:
        await source.aclose()


_NO_DESCRIPTORS = """
import asyncio, os, resource, sys
from pathlib import Path
from sre_diag.tools.errors import LogSourceError
from sre_diag.tools.logs import JsonlLogSource
from tests.tools.test_logs import _at, _input

async def main() -> None:
    source = JsonlLogSource(Path(sys.argv[1]), process_bytes=0)
    await asyncio.to_thread(print, end="")  # the loop's executor thread exists
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 1, hard))
    try:
        await source.search(_input(_at(10), _at(12)))
    except LogSourceError as exc:
        print(exc.code.value)

asyncio.run(main())
"""


async def test_a_child_that_cannot_be_started_is_unavailable_not_raw(tmp_path: Path) -> None:
    """No descriptor left for the pipes (``EMFILE``; ``EAGAIN`` at the process limit): the
    query is ``UNAVAILABLE``, as a thread scan that cannot open a file is, never a raw
    ``OSError`` (the harness's ``INTERNAL``). Run in its own process: the limit is global."""
    _mixed_history(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _NO_DESCRIPTORS, str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().split() == ["UNAVAILABLE"], err.decode()[-2000:]
