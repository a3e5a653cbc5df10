"""The folder source and the Loki source agree on the same lines (CONTRACTS §4): ``matched`` and
the buckets count exactly ``start <= ts < end`` at every window edge, and ``contains`` means the
same (Unicode case folding of the decoded message, however a JSON encoder escaped it).

One query set runs against both: a folder of JSON-lines files, and the fake Loki holding the
same raw lines (tests/tools/fake_loki.py evaluates the LogQL the source sends, with Loki's
``(t - range, t]`` ranges for ``count_over_time`` and ``[start, end)`` for log queries). The Loki
source runs with a sample too small to hold every match, so its counts come from the metric
queries — the path that used to count lines outside the window — and once with a sample that
holds them all.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.tools.logs import JsonlLogSource, LokiLogSource
from sre_diag.tools.logs.source import LogPage
from sre_diag.tools.schemas import LogLevel, LogsInput
from tests.tools.fake_loki import LokiStore, start_fake_loki

DAY = datetime(2026, 11, 28, tzinfo=UTC)
SERVICE = "payment-api"


def _t(hour: int, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute, second=second, microsecond=micro)


# Instants on and beside every edge the queries below use.
EDGES = [
    _t(9, 59, 59, 999_999), _t(10), _t(10, 0, 0, 1), _t(10, 0, 59, 999_999), _t(10, 1),
    _t(10, 5, 0, 500_000), _t(10, 29, 59, 999_999), _t(10, 30), _t(10, 30, 0, 1), _t(10, 59, 59),
    _t(10, 59, 59, 999_999), _t(11), _t(11, 0, 0, 1), _t(11, 0, 30), _t(11, 1), _t(11, 4),
]  # fmt: skip
MESSAGES = [
    ("ERROR", "paiement échoué pour la commande"),
    ("ERROR", "PAIEMENT ÉCHOUÉ POUR LA COMMANDE"),
    ("WARN", "Lieferung in die STRASSE fehlgeschlagen"),
    ("INFO", "Lieferung in die Straße ok"),
    ("ERROR", "ﬁle not found: /var/lib/app"),
    ("INFO", "FILE NOT FOUND: /tmp"),
    ("ERROR", "temperature 300 \u212aelvin"),
    ("INFO", "db pool exhausted: timed out after 3000ms"),
    ("ERROR", 'quote " and backslash \\ and <tag> & slash /'),
]


def _lines() -> list[tuple[datetime, str]]:
    """Each message at each edge, and a spread through the window; half written with
    ``ensure_ascii`` (``\\u00c9CHOU\\u00c9`` in the raw line), half as UTF-8."""
    instants = [*EDGES, *(_t(10) + timedelta(seconds=37 * i) for i in range(120))]
    lines = []
    for n, ts in enumerate(instants):
        level, message = MESSAGES[n % len(MESSAGES)]
        record = {"ts": ts.isoformat(), "service": SERVICE, "level": level, "message": message}
        lines.append((ts, json.dumps(record, ensure_ascii=n % 2 == 0)))
    return lines


def _folder(folder: Path, lines: list[tuple[datetime, str]]) -> None:
    by_file: dict[Path, list[str]] = {}
    for ts, line in lines:
        by_file.setdefault(folder / SERVICE / f"{ts:%Y-%m-%d}" / f"{ts:%H}.jsonl", []).append(line)
    for path, rows in by_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _ns(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1_000


WINDOWS = [
    (_t(10), _t(11)),
    (_t(10), _t(11, 1)),
    (_t(10, 0, 0, 1), _t(11, 0, 0, 1)),
    (_t(10, 1), _t(10, 30)),
    (_t(10, 30), _t(11, 4)),
    (_t(9, 59, 59, 999_999), _t(10, 0, 59, 999_999)),
    (_t(10, 5), _t(10, 5, 1)),
]
FILTERS: list[tuple[str | None, LogLevel | None]] = [
    (None, None), ("échoué", None), ("ÉCHOUÉ", LogLevel.ERROR), ("straße", None),
    ("strasse", None), ("file not", None), ("kelvin", None), ("\\ and <tag>", None),
    ('" and', None), (None, LogLevel.WARN), ("zzz-none", None),
]  # fmt: skip


def _shown(page: LogPage) -> dict[str, object]:
    summary = page.summary
    assert summary is not None
    return {
        "matched": summary.matched,
        "buckets": summary.buckets.model_dump(),
        "first_ts": summary.first_ts,
        "last_ts": summary.last_ts,
        "items": [(r.ts, r.message) for r in page.items],
        "first_items": [(r.ts, r.message) for r in page.first_items],
    }


@pytest.mark.parametrize("sample_lines", [1, 1000], ids=["counted", "sampled"])
async def test_both_sources_agree_at_every_edge(tmp_path: Path, sample_lines: int) -> None:
    lines = _lines()
    _folder(tmp_path, lines)
    folder = JsonlLogSource(tmp_path)
    store = LokiStore([(_ns(ts), {"service": SERVICE}, line) for ts, line in lines])
    compared = 0
    async with start_fake_loki() as fake:
        fake.store = store
        loki = LokiLogSource(fake.url, timeout_seconds=5, sample_lines=sample_lines)
        for start, end in WINDOWS:
            for contains, level in FILTERS:
                q = LogsInput(
                    service=SERVICE, start=start, end=end, contains=contains, level=level, limit=2
                )
                expected = _shown(await folder.search(q))
                got = _shown(await loki.search(q))
                assert got == expected, (start, end, contains, level)
                compared += expected["matched"] > 0  # type: ignore[operator]
        await loki.aclose()
    await folder.aclose()
    assert compared >= len(WINDOWS) * 6  # the filters do match lines: nothing trivially equal


async def test_counted_path_leaves_lines_beyond_the_window_out() -> None:
    # "Did the errors stop at 11:01?": lines every 10 s until 11:05, a 61-minute window.
    lines = [
        (_t(10) + timedelta(seconds=10 * i), json.dumps({
            "ts": (_t(10) + timedelta(seconds=10 * i)).isoformat(), "service": SERVICE,
            "level": "ERROR", "message": f"boom {i}"}))
        for i in range(6 * 65 + 1)
    ]  # fmt: skip
    store = LokiStore([(_ns(ts), {"service": SERVICE}, line) for ts, line in lines])
    async with start_fake_loki() as fake:
        fake.store = store
        loki = LokiLogSource(fake.url, timeout_seconds=5, sample_lines=1)
        q = LogsInput(service=SERVICE, start=_t(10), end=_t(11, 1), limit=1)
        page = await loki.search(q)
        await loki.aclose()
    assert page.summary is not None and not page.summary.exact
    assert page.summary.matched == 6 * 61  # 10:00:00 in, 11:01:00 out
    assert page.summary.buckets.width_seconds == 300
    assert page.summary.buckets.counts == [30] * 12 + [6]
