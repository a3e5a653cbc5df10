"""A large window scanned in parts, one per child process, and the parts merged exactly.

A window's hour files, in the order a scan reads them (newest hour first), are cut into
``n`` contiguous parts of about equal bytes (:func:`plan_parts`); a cut inside a file is a byte
offset, and :func:`~sre_diag.tools.logs.jsonl.range_blocks` gives each line to the part in which
it starts. Each part is scanned in its own child (:func:`scan_parts`: the tally, the newest
``limit`` matches and the read counters; sent back pickled, :func:`scan_packed`, and passed on
by the parent unread), and one child merges them (:func:`merge_parts`) and masks the
patterns. The merged page is the one a single scan gives — counts, buckets, first and last
instants, the newest matches with ties in the order read, the patterns — because every part's
newest matches hold the global newest among its lines and parts merge in read order.
One difference, only when a part alone sees more than ``MAX_KEYS`` distinct messages (the
summary is then ``exact: false`` either way): a message first seen in an earlier part and
crowded out of a later part's table is undercounted.
"""

from __future__ import annotations

import os
import pickle
import stat
from dataclasses import dataclass
from pathlib import Path

from sre_diag.log import failure_reason
from sre_diag.tools.base import AdapterErrorCode
from sre_diag.tools.logs.jsonl import Scanned, _hours, _Newest, _Oldest, _Scan, _scan_hour
from sre_diag.tools.logs.prefilter import Row
from sre_diag.tools.logs.source import LogPage
from sre_diag.tools.logs.summary import Grid, Tally
from sre_diag.tools.schemas import LogsInput
from sre_diag.tools.threads import Stop

__all__ = [
    "Part",
    "Partial",
    "merge_packed",
    "merge_parts",
    "plan_parts",
    "scan_packed",
    "scan_parts",
    "window_files",
]


@dataclass(frozen=True, slots=True)
class Part:
    """The lines of one hour file (relative to the folder) that start in ``[start, end)``."""

    rel: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Partial:
    """What one part's scan found (a child sends it back whole)."""

    tally: Tally
    newest: list[Row]
    files: tuple[str, ...]
    lines: int
    malformed: int
    code: AdapterErrorCode | None = None
    reason: str = ""
    oldest: tuple[Row, ...] = ()


def window_files(folder: Path, q: LogsInput) -> list[tuple[str, int]]:
    """The window's hour files that exist as regular files (links not followed), in read
    order, with their sizes; none for ``.`` and ``..``, which the whole scan refuses (``..``
    would name files beside the folder, ``.`` the folder's own date folders)."""
    if q.service in {".", ".."}:
        return []
    found = []
    for hour in _hours(q.start, q.end):
        rel = f"{q.service}/{hour:%Y-%m-%d}/{hour:%H}.jsonl"
        try:
            info = os.lstat(folder / rel)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((rel, info.st_size))
    return found


def plan_parts(files: list[tuple[str, int]], n: int) -> list[list[Part]]:
    """``files`` (read order, sizes) cut into at most ``n`` contiguous parts of about equal
    bytes; no part is empty. The last part ends at the size seen here: lines written after
    that (the current hour grows) are read by the next query, as lines written after a whole
    scan opened its file are."""
    total = sum(size for _, size in files)
    if n <= 1 or total == 0:
        return [[Part(rel, 0, size) for rel, size in files]] if files else []
    cuts = [total * k // n for k in range(1, n)]
    parts: list[list[Part]] = [[]]
    offset = 0  # bytes of the files before this one
    for rel, size in files:
        start = 0
        while cuts and cuts[0] < offset + size:
            cut = cuts.pop(0) - offset
            if cut > start:
                parts[-1].append(Part(rel, start, cut))
                start = cut
            if parts[-1]:
                parts.append([])
        if size > start or size == 0:  # an empty file is opened too, as a whole scan does
            parts[-1].append(Part(rel, start, size))
        offset += size
    return [part for part in parts if part]


def scan_parts(stop: Stop, folder: Path, q: LogsInput, parts: list[Part]) -> Partial:
    """Scan ``parts`` in order (in a child process, see module docs); logs nothing itself."""
    scan = _Scan(Tally(Grid.for_window(q.start, q.end)), _Newest(q.limit))
    code, reason = None, ""
    try:
        for part in parts:
            _scan_hour(folder, folder / part.rel, q, scan, stop, (part.start, part.end))
    except OSError as exc:
        code, reason = AdapterErrorCode.UNAVAILABLE, failure_reason(exc)
    scan.newest._compact()
    scan.oldest.compact()
    files = tuple(dict.fromkeys(scan.files))
    return Partial(
        scan.tally, scan.newest.rows, files, scan.lines, scan.malformed, code, reason,
        tuple(scan.oldest.rows),
    )  # fmt: skip


def scan_packed(stop: Stop, folder: Path, q: LogsInput, parts: list[Part]) -> bytes:
    """:func:`scan_parts`, pickled where it ran: the parent hands the bytes to the merge
    unread, since unpickling (and pickling again) a tally of tens of thousands of keys holds the
    parent's GIL for 100 ms and more (the log lines choose how many keys there are)."""
    return pickle.dumps(scan_parts(stop, folder, q, parts), protocol=pickle.HIGHEST_PROTOCOL)


def merge_packed(stop: Stop, q: LogsInput, packed: list[bytes], mask_seconds: float) -> Scanned:
    """:func:`merge_parts` of the :func:`scan_packed` results (in a child process: these bytes
    come from this module's own children, never from outside)."""
    partials = [pickle.loads(part) for part in packed]
    return merge_parts(stop, q, partials, mask_seconds)


def merge_parts(stop: Stop, q: LogsInput, partials: list[Partial], mask_seconds: float) -> Scanned:
    """The page of the whole window from its parts in read order (see module docs)."""
    files = tuple(dict.fromkeys(f for p in partials for f in p.files))
    lines = sum(p.lines for p in partials)
    malformed = sum(p.malformed for p in partials)
    for partial in partials:
        if partial.code is not None:
            return Scanned(None, partial.code, partial.reason, files, lines, malformed)
    tally, newest = partials[0].tally, _Newest(q.limit)
    for partial in partials[1:]:
        tally.merge(partial.tally)
    oldest = _Oldest()
    for partial in partials:
        for row in partial.newest:
            newest.add(row)
        for row in partial.oldest:  # parts in read order, each oldest first: ties kept
            oldest.add(row)
    page = LogPage(
        items=newest.records(),
        truncated=tally.matched > q.limit,
        summary=tally.summary(exact=True, stop=stop.with_budget(mask_seconds)),
        first_items=oldest.records(),
    )
    return Scanned(page, None, "", files, lines, malformed)
