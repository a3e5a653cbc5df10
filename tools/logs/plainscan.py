"""Plain-text log files beside the hour files: ``<folder>/<service>/*.log`` and rotations.

A service folder may hold ``name.log`` and its rotations ``name.log.1``, ``name.log.2.gz``,
``name.log.gz`` (:func:`plain_files`). They are read oldest rotation first, each line's time,
level and message read by :func:`sre_diag.tools.logs.plain.parse_plain`; an untimed line that
continues the entry above it (indented, ``Traceback (…``, ``Caused by:``, ``at …``, an
exception's ``SomeException: …`` or ``SomeError: …`` line, the line closing a Python traceback)
is appended to that entry's message, up to :data:`TRACE_LINES` lines and :data:`TRACE_CHARS`
characters; any other untimed line is skipped and counted with the malformed lines. The bounds
are the hour files': only regular files reached from the folder without a link
(:func:`~sre_diag.tools.logs.files.open_inside`), at most the size a file had when opened, lines
of at most ``MAX_LINE_BYTES``, and at most :data:`FILE_BYTES` bytes per file and
:data:`WINDOW_BYTES` per query after gzip decompression (a gzip bomb stops there); a file cut
short makes the summary ``exact: false``. A file last modified more than :data:`MTIME_SLACK`
before the window's start holds no line of the window and is not opened; every other candidate
is read whole, as no other bound on its times is safe.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

from sre_diag.tools.logs.files import open_inside
from sre_diag.tools.logs.jsonl import _line_batches, _Scan
from sre_diag.tools.logs.plain import continues, parse_plain
from sre_diag.tools.logs.prefilter import Match, Row
from sre_diag.tools.schemas import LogsInput
from sre_diag.tools.threads import Stop

__all__ = [
    "FILE_BYTES",
    "MAX_ENTRIES",
    "MAX_FILES",
    "MTIME_SLACK",
    "TRACE_CHARS",
    "TRACE_LINES",
    "WINDOW_BYTES",
    "Entries",
    "PlainRead",
    "plain_files",
    "scan_plain",
]

FILE_BYTES = 256 * 1024 * 1024  # one plain file's bytes read, at most (a .gz: decompressed)
WINDOW_BYTES = 1024 * 1024 * 1024  # all plain files of one query, at most
MAX_FILES = 64  # plain files of one service read per query, at most (the newest)
MAX_ENTRIES = 10_000  # entries of a service folder looked at, at most (then exact: false)
MTIME_SLACK = timedelta(days=1)  # a zone-less local time read as UTC may run this far ahead
TRACE_LINES = 200  # continuation lines appended to one entry, at most
TRACE_CHARS = 16 * 1024  # characters appended to one entry's message, at most
_CHUNK = 256 * 1024
_NAME = re.compile(r"(?P<base>[^.][^/]*\.log)(?:\.(?P<n>\d{1,6}))?(?P<gz>\.gz)?")


@dataclass(slots=True)
class PlainRead:
    """What reading the plain files of one query cost, and whether one was cut short."""

    budget: int = WINDOW_BYTES
    files: list[str] = field(default_factory=list)
    lines: int = 0
    skipped: int = 0
    capped: bool = False


def _order(name: str) -> tuple[str, float] | None:
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    number = found.group("n")
    age = float(number) if number else (0.5 if found.group("gz") else 0.0)
    return found.group("base"), -age  # oldest rotation first


def plain_files(folder: Path, q: LogsInput) -> tuple[list[tuple[str, int]], bool]:
    """The service's plain log files that may hold lines of the window (relative to the
    folder, read order, sizes as listed), and whether some may be left out: more than
    :data:`MAX_FILES` (the oldest are), or a folder of more than :data:`MAX_ENTRIES` entries.
    Links and other non-regular entries are not listed; the service folder is opened without
    following a link."""
    if q.service in {".", ".."}:
        return [], False
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(q.service, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        finally:
            os.close(top)
    except (OSError, ValueError):
        return [], False
    oldest = q.start.timestamp() - MTIME_SLACK.total_seconds()
    found: list[tuple[tuple[str, float], str, int]] = []
    cut = False
    try:
        with os.scandir(fd) as entries:
            for seen, entry in enumerate(entries):
                if seen >= MAX_ENTRIES:
                    cut = True
                    break
                order = _order(entry.name)
                if order is None:
                    continue
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_mtime >= oldest:
                    found.append((order, f"{q.service}/{entry.name}", info.st_size))
    except OSError:
        return [], False
    finally:
        os.close(fd)
    found.sort()
    if len(found) > MAX_FILES:
        newest = sorted(found, key=lambda item: -item[0][1])[:MAX_FILES]
        kept = {rel for _, rel, _ in newest}
        return [(rel, size) for _, rel, size in found if rel in kept], True
    return [(rel, size) for _, rel, size in found], cut


def _raw(handle: IO[bytes], limit: int) -> Iterator[bytes]:
    while limit > 0:
        block = handle.read(min(_CHUNK, limit))
        if not block:
            return
        limit -= len(block)
        yield block


def _inflated(handle: IO[bytes], size: int, limit: int, read: PlainRead) -> Iterator[bytes]:
    """The decompressed bytes of a gzip file (every member), at most ``limit`` of them
    however small the file; a corrupt or cut stream ends the file as read so far."""
    inflate = zlib.decompressobj(wbits=31)
    member = False  # inside a gzip member not yet ended
    try:
        for block in _raw(handle, size):
            while block:
                member = True
                out = inflate.decompress(block, min(_CHUNK, limit))
                limit -= len(out)
                if out:
                    yield out
                if limit <= 0:
                    read.capped = True
                    return
                block = inflate.unconsumed_tail
                if inflate.eof:  # the next member, if any
                    block, member = inflate.unused_data, False
                    inflate = zlib.decompressobj(wbits=31)
    except zlib.error:
        member = True
    if member:  # corrupt, or cut before its end: the file holds more than was read
        read.capped = True


def file_blocks(handle: IO[bytes], size: int, gz: bool, read: PlainRead) -> Iterator[bytes]:
    """The bytes of one opened file within :data:`FILE_BYTES` and what is left of the
    query's budget (the cut is counted in ``read``)."""
    limit = min(FILE_BYTES, read.budget)
    if gz:
        blocks = _inflated(handle, size, limit, read)
    else:
        if size > limit:
            read.capped = True
        blocks = _raw(handle, min(size, limit))
    for block in blocks:
        read.budget -= len(block)
        yield block


class Entries:
    """Lines of one file turned into entries: a timed line starts one, continuation lines
    join it (bounded), other untimed lines are skipped; :meth:`flush` hands the last one."""

    __slots__ = ("chars", "end", "open", "parts", "pending", "read", "service", "traceback")

    def __init__(self, service: str, end: datetime, read: PlainRead) -> None:
        self.end = end
        self.service = service
        self.read = read
        self.pending: Row | None = None
        self.parts: list[str] = []
        self.chars = 0  # characters in ``parts``, with their newlines
        self.open = False
        self.traceback = False

    def feed(self, raw: bytes | None) -> Row | None:
        """One line (``None``: over-long); the entry it completed, if any."""
        if raw is None:
            self.read.skipped += 1
            self.open = False
            return None
        line = raw.decode("utf-8", "replace").rstrip("\r").removeprefix("\ufeff")
        if not line.strip():
            return None
        parsed = parse_plain(line, self.end)
        if parsed is not None:
            done = self.flush()
            self.pending = (parsed[0], self.service, parsed[1], parsed[2])
            self.open, self.traceback = True, parsed[2].startswith("Traceback (")
            return done
        self._untimed(line)
        return None

    def _untimed(self, line: str) -> None:
        if self.open and continues(line):
            self.traceback = self.traceback or line.startswith("Traceback (")
            self._append(line)
        elif self.open and self.traceback:  # ``ValueError: …`` closes a Python traceback
            self.traceback = False
            self._append(line)
        else:
            self.read.skipped += 1
            self.open = False

    def _append(self, line: str) -> None:
        room = TRACE_CHARS - self.chars
        if len(self.parts) < TRACE_LINES and room > 1:
            kept = line[: room - 1]
            self.parts.append(kept)
            self.chars += len(kept) + 1

    def flush(self) -> Row | None:
        """The entry being built, with its continuation lines, if any."""
        row, self.pending = self.pending, None
        if row is not None and self.parts:
            row = (row[0], row[1], row[2], "\n".join([row[3], *self.parts]))
        self.parts, self.chars, self.open, self.traceback = [], 0, False, False
        return row


def scan_plain(folder: Path, q: LogsInput, scan: _Scan, stop: Stop, budget: int) -> None:
    """Read the service's plain files (:func:`plain_files`) into ``scan``: every entry the
    query matches is counted and kept as an hour file's line is; :meth:`Stop.check` once per
    block. ``OSError`` (permission, I/O) propagates as it does for the hour files."""
    files, dropped = plain_files(folder, q)
    read = PlainRead(budget=budget, capped=dropped)
    match = Match(q)
    try:
        for rel, _ in files:
            if read.budget <= 0:
                read.capped = True
                break
            _scan_file(folder, rel, read, match, scan, stop)
    finally:
        scan.files.extend(read.files)
        scan.lines += read.lines
        scan.malformed += read.skipped
        scan.capped = scan.capped or read.capped


def _scan_file(
    folder: Path, rel: str, read: PlainRead, match: Match, scan: _Scan, stop: Stop
) -> None:
    opened = open_inside(folder, Path(rel))
    if opened is None:
        return
    handle, size = opened
    read.files.append(rel)
    entries = Entries(match.service, match.end, read)
    with handle:
        for batch in _line_batches(file_blocks(handle, size, rel.endswith(".gz"), read)):
            stop.check()
            read.lines += len(batch)
            for raw in batch:
                _keep(entries.feed(raw), match, scan)
    _keep(entries.flush(), match, scan)


def _keep(row: Row | None, match: Match, scan: _Scan) -> None:
    if row is not None and match.wants(row):
        scan.tally.add(row[0], row[3])
        scan.newest.add(row)
        scan.oldest.add(row)
