"""The JSON-lines sink: ``DIR/audit-YYYY-MM-DD.jsonl`` (UTC day), one whole line per record.

The file is opened without following a link (``O_NOFOLLOW``) and without blocking
(``O_NONBLOCK``: a FIFO with no reader fails at once instead of hanging), and written only when
``fstat`` says it is a regular file. Each record is ONE ``write`` of the full line in append
mode; a short write (a full disk, a file size limit) is cut back, so the next record never
starts after a partial line, and a partial line someone else left is closed first.

The blocking calls run on the sink's own daemon thread, never on the shared default executor
(the evidence tools' ``asyncio.to_thread`` threads) and never joined at exit: a call stuck in
the kernel cannot starve other runs' tools nor hold the process.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import queue
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sre_diag.audit.base import AuditWriteError
from sre_diag.audit.record import encode_record

__all__ = ["JsonlAuditSink", "append_line"]

_T = TypeVar("_T")

_FLAGS = (
    os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    | os.O_CLOEXEC
)  # fmt: skip
_FILE_MODE = 0o640
_LOCK_WAIT_SECONDS = 1.0
_OPEN_REFUSALS = {
    errno.ELOOP: "is a symbolic link; links are not followed",
    errno.ENXIO: "is a FIFO or socket with no reader; only regular files are written",
    errno.EISDIR: "is a directory",
}


class _DaemonWorker:
    """One daemon thread running blocking calls in order.

    Unlike ``ThreadPoolExecutor`` threads (the default executor's included), it is not joined
    at interpreter exit, so a call stuck in the kernel cannot keep the process from exiting.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.put((call, future))
        return future

    def stop(self) -> None:
        """Let the thread end after the calls already queued; a later submit starts a new one."""
        with self._lock:
            if self._thread is not None:
                self._thread = None
                self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue  # its waiter gave up before it started
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)


class JsonlAuditSink:
    """Appends records to ``DIR/audit-YYYY-MM-DD.jsonl`` (UTC day), off every event loop."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).expanduser()
        self.phase = "writing the audit file"
        self._worker = _DaemonWorker("diag-audit-jsonl")

    def path_for(self, day: datetime) -> Path:
        return self.directory / f"audit-{day:%Y-%m-%d}.jsonl"

    async def write(self, record: dict[str, Any]) -> None:
        line = (encode_record(record) + "\n").encode("utf-8")
        path = self.path_for(datetime.now(UTC))
        await asyncio.wrap_future(self._worker.submit(partial(append_line, path, line)))

    async def aclose(self) -> None:
        self._worker.stop()


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` to the regular file ``path`` whole, or leave the file as it was."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditWriteError(f"cannot create {path.parent}: {_os_reason(exc)}") from None
    fd = _open_regular(path)
    try:
        _append_whole(fd, path, line)
    finally:
        os.close(fd)


def _open_regular(path: Path) -> int:
    try:
        fd = os.open(path, _FLAGS, _FILE_MODE)
    except OSError as exc:
        refusal = _OPEN_REFUSALS.get(exc.errno or 0)
        if refusal is not None:
            raise AuditWriteError(f"{path} {refusal}; refused") from None
        raise AuditWriteError(f"cannot open {path}: {_os_reason(exc)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise AuditWriteError(
            f"{path} is a {_kind(mode)}, not a regular file; only regular files are written"
        )
    return fd


def _append_whole(fd: int, path: Path, line: bytes) -> None:
    locked = _lock(fd)
    try:
        # Close a partial line left by someone else, so ours stays whole. Only under the lock:
        # another writer's append in flight can show a size whose last byte is not yet there.
        if locked:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
        written = _write(fd, path, line)
        if written != len(line):
            _undo_short_write(fd, path, written, len(line))
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _undo_short_write(fd: int, path: Path, written: int, wanted: int) -> None:
    """Cut our partial line back off (a full disk, a file size limit) and report it."""
    end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: our bytes end here
    try:
        os.ftruncate(fd, end - written)
        undone = "the partial line was removed"
    except OSError as exc:
        undone = f"the partial line could not be removed ({_os_reason(exc)})"
    raise AuditWriteError(
        f"short write to {path}: {written} of {wanted} bytes (disk full or file size "
        f"limit); {undone}"
    )


def _write(fd: int, path: Path, line: bytes) -> int:
    try:
        return os.write(fd, line)
    except OSError as exc:
        raise AuditWriteError(f"cannot append to {path}: {_os_reason(exc)}") from None


def _lock(fd: int) -> bool:
    """An exclusive advisory lock among our writers (other harnesses, processes), briefly.

    Never waits long: a writer that cannot get it within ~1 s appends without the partial-line
    check rather than hang.
    """
    deadline = time.monotonic() + _LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        except OSError:
            return False


def _os_reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return f"{name} ({exc.strerror or 'no detail'})"


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"),
    )  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "special file")
