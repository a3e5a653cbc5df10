"""One whole scan of a window in the log folder: the hour files of the window's hours
(:mod:`sre_diag.tools.logs.jsonl`), then the service's plain-text files
(:mod:`sre_diag.tools.logs.plainscan`), summarised together.

Apart from both readers because it uses both: the plain-text reader reuses the JSON-lines
reader's line batching and scan state, so neither may import the other's whole scan.
"""

from __future__ import annotations

from pathlib import Path

from sre_diag.log import failure_reason
from sre_diag.tools.base import AdapterErrorCode
from sre_diag.tools.logs.jsonl import Scanned, _hours, _Newest, _Scan, _scan_hour
from sre_diag.tools.logs.plainscan import scan_plain
from sre_diag.tools.logs.source import LogPage
from sre_diag.tools.logs.summary import Grid, Tally
from sre_diag.tools.schemas import LogsInput
from sre_diag.tools.threads import Stop

__all__ = ["scan_window"]


def scan_window(
    stop: Stop, folder: Path, q: LogsInput, mask_seconds: float, plain_bytes: int = 1 << 30
) -> Scanned:
    """Read the files of the window's hours (and only those), then the service's plain-text
    files (:mod:`sre_diag.tools.logs.plainscan`, at most ``plain_bytes`` of them), and
    summarise every match; :meth:`Stop.check` once per block (``OutOfTime`` past the stop's
    budget). Runs in a worker thread or in a child process (:mod:`sre_diag.tools.workers`): it
    logs nothing itself."""
    if not folder.is_dir():
        return Scanned(None, AdapterErrorCode.UNAVAILABLE)
    if q.service in {".", ".."}:
        return Scanned(None, AdapterErrorCode.INVALID_INPUT)
    service_dir = folder / q.service
    scan = _Scan(Tally(Grid.for_window(q.start, q.end)), _Newest(q.limit))
    try:
        for hour in _hours(q.start, q.end):
            path = service_dir / f"{hour:%Y-%m-%d}" / f"{hour:%H}.jsonl"
            _scan_hour(folder, path, q, scan, stop)
        scan_plain(folder, q, scan, stop, plain_bytes)
    except OSError as exc:
        return scan.counted(None, AdapterErrorCode.UNAVAILABLE, failure_reason(exc))
    page = LogPage(
        items=scan.newest.records(),
        truncated=scan.tally.matched > q.limit,
        summary=scan.tally.summary(exact=not scan.capped, stop=stop.with_budget(mask_seconds)),
        first_items=scan.oldest.records(),
    )
    return scan.counted(page)
