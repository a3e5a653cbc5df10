"""The folder log source (:class:`JsonlLogSource`): the window's hour files (layout in
:mod:`sre_diag.tools.logs.jsonl`) scanned in a worker thread when they are small, in child
processes (:mod:`sre_diag.tools.workers`) cut in parts (:mod:`sre_diag.tools.logs.parts`) when they
are large, so a large scan never shares the event loop's interpreter, uses the machine's cores
and is killed, not merely asked to stop, when its query is cancelled."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

from sre_diag.log import log_failure
from sre_diag.tools.base import AdapterErrorCode, ProbeReport
from sre_diag.tools.logs.jsonl import (
    PART_BYTES,
    PROCESS_BYTES,
    SCAN_SECONDS,
    WORKERS,
    ReadStats,
    Scanned,
    scan_window,
)
from sre_diag.tools.logs.parts import Part, merge_packed, plan_parts, scan_packed, window_files
from sre_diag.tools.logs.plainscan import WINDOW_BYTES, plain_files
from sre_diag.tools.logs.probe import probe_folder
from sre_diag.tools.logs.source import MASK_SECONDS, LogPage, LogSourceError
from sre_diag.tools.schemas import SERVICE_NAME, LogsInput
from sre_diag.tools.threads import OutOfTime, Stop, in_thread
from sre_diag.tools.workers import WorkerFailed, WorkerPool

__all__ = ["JsonlLogSource"]

# The package's logger: lines keep the name they had before the package was split.
logger = logging.getLogger(__package__)

GZIP_RATIO = 8  # a .gz file counts this many times its size when choosing a child process


def _window_files(
    folder: Path, q: LogsInput
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    return window_files(folder, q), plain_files(folder, q)[0]


class JsonlLogSource:
    """Searches ``<folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl`` files and the service's
    plain-text log files (:mod:`sre_diag.tools.logs.plainscan`; see module docs)."""

    def __init__(
        self,
        folder: Path,
        *,
        scan_seconds: float = SCAN_SECONDS,
        mask_seconds: float = MASK_SECONDS,
        process_bytes: int | None = PROCESS_BYTES,
        part_bytes: int = PART_BYTES,
        workers: int = WORKERS,
        plain_bytes: int = WINDOW_BYTES,
    ) -> None:
        self.folder = folder
        self.stats = ReadStats()
        self.scan_seconds = scan_seconds
        self.mask_seconds = mask_seconds
        self.process_bytes = process_bytes
        self.part_bytes = max(1, part_bytes)
        self.workers = WorkerPool(workers)
        self.plain_bytes = plain_bytes
        self._stats_lock = threading.Lock()

    async def search(self, q: LogsInput) -> LogPage:
        """Scan the window's files: in child processes of :attr:`workers` when they hold
        :attr:`process_bytes` or more (in parts, :mod:`sre_diag.tools.logs.parts`), else in a
        worker thread (:func:`scan_window`); either stops at once when the query is cancelled
        (the run's deadline, a Cancel) and answers ``TIMEOUT`` past :attr:`scan_seconds`."""
        try:
            scanned = await self._scan(q)
        except OutOfTime:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None
        except WorkerFailed as exc:
            log_failure(logger, logging.WARNING, "log scan worker failed (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        self._record(scanned)
        if scanned.reason:
            logger.warning("log folder unreadable (%s)", scanned.reason)
        if scanned.page is None:
            raise LogSourceError(scanned.code or AdapterErrorCode.INTERNAL)
        return scanned.page

    async def _scan(self, q: LogsInput) -> Scanned:
        budget = Stop(self.scan_seconds)
        args = (self.folder, q, self.mask_seconds, self.plain_bytes)
        if self.process_bytes is None:
            return await in_thread(scan_window, budget, *args)
        files, plain = await asyncio.to_thread(_window_files, self.folder, q)
        total = sum(size for _, size in files) + sum(
            size * (GZIP_RATIO if rel.endswith(".gz") else 1) for rel, size in plain
        )
        if total < self.process_bytes:
            return await in_thread(scan_window, budget, *args)
        # Plain files are read whole, in order, by one child: their entries span lines, so
        # they are not cut in parts as the hour files are.
        parts = (
            []
            if plain
            else plan_parts(files, min(self.workers.size, max(1, total // self.part_bytes)))
        )
        if len(parts) <= 1:
            return await self.workers.call(scan_window, budget.left(), *args)
        return await self._in_parts(q, parts, budget)

    async def _in_parts(self, q: LogsInput, parts: list[list[Part]], budget: Stop) -> Scanned:
        try:
            async with asyncio.TaskGroup() as group:
                calls = [
                    group.create_task(
                        self.workers.call(scan_packed, budget.left(), self.folder, q, part)
                    )
                    for part in parts
                ]
        except BaseExceptionGroup as failed:  # the first failure; the other parts were cancelled
            raise failed.exceptions[0] from None
        packed = [call.result() for call in calls]  # never unpickled here (see scan_packed)
        left = max(budget.left(), 0.0)
        return await self.workers.call(merge_packed, left, q, packed, self.mask_seconds)

    async def aclose(self) -> None:
        """The child processes (if any were started) end; nothing else is held open."""
        await self.workers.close()

    async def probe(self) -> ProbeReport:
        """The folder exists, is readable and holds service folders."""
        return await probe_folder(self.folder)

    async def services(self, limit: int) -> list[str]:
        """The first ``limit`` service folder names, sorted: hidden entries, links and names
        ``query_logs`` would refuse are skipped."""
        return await asyncio.to_thread(self._services, limit)

    def _services(self, limit: int) -> list[str]:
        try:
            with os.scandir(self.folder) as entries:
                names = sorted(
                    entry.name
                    for entry in entries
                    if not entry.name.startswith(".")
                    and SERVICE_NAME.fullmatch(entry.name)
                    and entry.is_dir(follow_symlinks=False)
                )
        except OSError as exc:
            log_failure(logger, logging.WARNING, "log folder unreadable (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        return names[:limit]

    def _record(self, scanned: Scanned) -> None:
        if scanned.malformed:
            logger.warning(
                "skipped %d malformed log lines in %s", scanned.malformed, list(scanned.files)
            )
        with self._stats_lock:
            self.stats.files_opened += len(scanned.files)
            self.stats.lines_read += scanned.lines
            self.stats.malformed_lines += scanned.malformed
            self.stats.last_files = scanned.files
