"""Only regular files inside the log folder are read (issue 20 item 4, FAULTS.md "Files"): an hour
file or folder that is a link (into ``/proc``, to a device, to a file outside), a FIFO, a device
node or a socket is skipped — the query answers at once, from the regular files only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.schemas import LogItem, LogSummary
from tests.tools.test_logs import _at, _input, _line, _write

HOUR = "svc/2026-11-28/10.jsonl"
OTHER_HOUR = "svc/2026-11-28/11.jsonl"
BOUND_SECONDS = 5.0  # far longer than any of these queries takes; a hang ends the test


def _lines(message: str, count: int = 3) -> list[str]:
    return [
        _line(f"2026-11-28T10:0{i}:00Z", f"{message} {i}", "ERROR", "svc") for i in range(count)
    ]


async def _query(folder: Path) -> tuple[list[str], LogSummary, JsonlLogSource]:
    source = JsonlLogSource(folder)
    async with asyncio.timeout(BOUND_SECONDS):
        result = await LogsAdapter(source).invoke(
            AdapterCall("c", "r", _input(_at(10), _at(12), "svc"))
        )
    assert isinstance(result, Ready) and isinstance(result.summary, LogSummary)
    return [i.message for i in result.items if isinstance(i, LogItem)], result.summary, source


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """A folder with one regular hour file (11:00) beside the special 10:00 entry under test."""
    folder = tmp_path / "logs"
    _write(folder, OTHER_HOUR, [_line("2026-11-28T11:00:00Z", "regular line", "ERROR", "svc")])
    (folder / HOUR).parent.mkdir(parents=True, exist_ok=True)
    return folder


async def _only_the_regular_file_is_read(folder: Path) -> None:
    messages, summary, source = await _query(folder)
    assert messages == ["regular line"]
    assert summary.matched == 1
    assert source.stats.last_files == (OTHER_HOUR,)


@pytest.mark.parametrize(
    "target", ["/proc/self/status", "/proc/self/fd/0", "/dev/zero", "/dev/urandom"]
)
async def test_a_link_into_proc_or_to_a_device_is_skipped(logs: Path, target: str) -> None:
    (logs / HOUR).symlink_to(target)
    await _only_the_regular_file_is_read(logs)


async def test_a_link_to_a_regular_file_outside_is_skipped(logs: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("\n".join(_lines("secret outside")) + "\n", encoding="utf-8")
    (logs / HOUR).symlink_to(outside)
    await _only_the_regular_file_is_read(logs)


async def test_a_hard_link_to_a_file_outside_is_skipped(logs: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("\n".join(_lines("secret outside")) + "\n", encoding="utf-8")
    try:
        os.link(outside, logs / HOUR)
    except OSError:
        pytest.skip("no hard links on this file system")
    assert (logs / HOUR).stat().st_nlink == 2
    await _only_the_regular_file_is_read(logs)


async def test_a_regular_file_with_one_name_is_read(logs: Path) -> None:
    _write(logs, HOUR, _lines("own file"))
    messages, summary, _ = await _query(logs)
    assert summary.matched == 4 and "regular line" in messages


async def test_a_linked_day_or_service_folder_is_skipped(tmp_path: Path) -> None:
    _write(tmp_path / "elsewhere", "2026-11-28/10.jsonl", _lines("secret outside"))
    day = tmp_path / "linked-day"
    (day / "svc").mkdir(parents=True)
    (day / "svc/2026-11-28").symlink_to(tmp_path / "elsewhere/2026-11-28")
    service = tmp_path / "linked-service"
    service.mkdir()
    (service / "svc").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for folder in (day, service):
        messages, summary, source = await _query(folder)
        assert messages == [] and summary.matched == 0 and source.stats.last_files == ()


async def test_the_log_folder_itself_may_be_a_link(logs: Path, tmp_path: Path) -> None:
    (tmp_path / "via-link").symlink_to(logs, target_is_directory=True)
    await _only_the_regular_file_is_read(tmp_path / "via-link")


@contextlib.contextmanager
def _fifo(path: Path) -> Iterator[None]:
    os.mkfifo(path)
    try:
        yield
    finally:
        # Should a reader be stuck in open(), a writer appearing releases it (EOF at once).
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_fifo_is_skipped_without_waiting_for_a_writer(logs: Path) -> None:
    with _fifo(logs / HOUR):
        await _only_the_regular_file_is_read(logs)


async def test_a_fifo_with_an_endless_writer_is_skipped(logs: Path) -> None:
    with _fifo(logs / HOUR):
        reader = os.open(logs / HOUR, os.O_RDONLY | os.O_NONBLOCK)  # so the writer can open
        writer = os.open(logs / HOUR, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, ("\n".join(_lines("from the pipe")) + "\n").encode())
            await _only_the_regular_file_is_read(logs)
        finally:
            os.close(writer)
            os.close(reader)


async def test_a_device_node_is_skipped(logs: Path) -> None:
    try:
        os.mknod(logs / HOUR, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except (PermissionError, OSError):
        pytest.skip("no permission to create a device node here")
    await _only_the_regular_file_is_read(logs)


async def test_a_socket_is_skipped(logs: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = Path.cwd()
    try:
        os.chdir(logs / HOUR.rsplit("/", 1)[0])  # a short relative name: AF_UNIX paths are short
        server.bind("10.jsonl")
        server.listen(1)
    finally:
        os.chdir(cwd)
    try:
        await _only_the_regular_file_is_read(logs)
    finally:
        server.close()


async def test_a_folder_named_like_an_hour_file_is_skipped(logs: Path) -> None:
    (logs / HOUR).mkdir()
    await _only_the_regular_file_is_read(logs)
