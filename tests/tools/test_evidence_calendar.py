"""Issue 10 item 2: calendar edges are a refused input or a skipped line, never a failure.

A window such as ``0001-01-01T00:10+01:00`` (before year 1 in UTC) or ``9999-12-31T23:59-01:00``
(after year 9999) used to pass validation and overflow later, failing the whole run. Now the input
model refuses it (the harness answers ``REJECTED INVALID_ENVELOPE``; see
tests/reliability/test_evidence_calendar_harness.py). A log line whose ``ts`` is out of range or
otherwise odd is skipped and counted instead of turning its hour file's queries into
``INTERNAL``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter, parse_line
from sre_diag.tools.schemas import LogItem, LogsInput, LogSummary


def _window(start: str, end: str) -> str:
    return json.dumps({"service": "svc", "start": start, "end": end})


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("0001-01-01T00:10+01:00", "0001-01-01T00:20+01:00"),
        ("0001-01-01T00:00:00Z", "0001-01-01T01:00:00Z"),
        ("0001-01-01T05:00+05:30", "0001-01-01T06:00+05:30"),
        ("0001-01-01T23:59:59+23:59", "0001-01-02T00:30+23:59"),
        ("2026-11-28T10:00:00Z", "0001-01-01T00:10+01:00"),  # end alone out of range
        ("9999-12-31T23:00-01:00", "9999-12-31T23:59-01:00"),
        ("9999-12-31T22:00:00Z", "9999-12-31T23:59:59.999999Z"),
        ("9999-12-31T12:00-23:59", "9999-12-31T13:00-23:59"),
        ("9999-12-31T00:00:00Z", "9999-12-31T00:30:00Z"),  # a day from the edge: refused too
    ],
)
def test_window_at_the_calendar_edge_is_refused(start: str, end: str) -> None:
    with pytest.raises(ValidationError):
        LogsInput.model_validate_json(_window(start, end))


def test_windows_near_the_edge_still_work(tmp_path: Path) -> None:
    for start, end in [
        ("0001-01-02T00:00:00Z", "0001-01-02T01:00:00Z"),
        ("9999-12-30T22:00:00Z", "9999-12-30T23:00:00Z"),
        ("1970-01-01T00:00:00Z", "1970-01-01T01:00:00+00:30"),
    ]:
        q = LogsInput.model_validate_json(_window(start, end))
        assert q.canonical() and q.scope()
        result = asyncio.run(LogsAdapter(JsonlLogSource(tmp_path)).invoke(AdapterCall("c", "r", q)))
        assert isinstance(result, Ready) and result.items == [] and not result.truncated
        assert isinstance(result.summary, LogSummary) and result.summary.matched == 0


OFFSETS = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@settings(max_examples=300, deadline=None)
@given(
    naive=st.one_of(
        st.datetimes(max_value=datetime(1, 1, 3)),
        st.datetimes(min_value=datetime(9999, 12, 29)),
        st.datetimes(),
    ),
    offset=OFFSETS,
    minutes=st.integers(-10, 24 * 60 + 10),
)
def test_any_rfc3339_window_is_refused_or_fully_usable(
    naive: datetime, offset: timezone, minutes: int
) -> None:
    start = naive.replace(tzinfo=offset)
    try:
        end = start + timedelta(minutes=minutes)
    except OverflowError:
        return
    try:
        q = LogsInput.model_validate_json(_window(start.isoformat(), end.isoformat()))
    except ValidationError:
        return
    # Accepted: everything downstream of validation works on it.
    assert q.canonical() and q.scope()
    folder = Path("/nonexistent-diag-logs")  # the source reports UNAVAILABLE, it never raises
    result = asyncio.run(LogsAdapter(JsonlLogSource(folder)).invoke(AdapterCall("c", "r", q)))
    assert result is not None


ODD_TS: list[object] = [
    "0001-01-01T00:10+01:00",
    "0001-01-01T00:00:00+00:01",
    "9999-12-31T23:59-01:00",
    "9999-12-31T23:59:59.999999-00:01",
    "0000-01-01T00:00:00Z",
    "10000-01-01T00:00:00Z",
    "+002026-11-28T10:00:00Z",
    "2026-11-28T10:00:00+24:00",
    "2026-02-30T10:00:00Z",
    "NaN",
    "",
    None,
    float("nan"),
    1764324000,
    ["2026-11-28T10:00:00Z"],
    {"$date": "2026-11-28T10:00:00Z"},
]


@pytest.mark.parametrize("ts", ODD_TS, ids=[repr(ts)[:40] for ts in ODD_TS])
def test_odd_ts_is_a_malformed_line(ts: object) -> None:
    raw = json.dumps({"ts": ts, "service": "svc", "level": "ERROR", "message": "x"}).encode()
    assert parse_line(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nested too deep for the parser
        b'{"ts": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"ts": 1' + b"0" * 5000 + b', "service": "svc", "level": "ERROR", "message": "x"}',
        b'{"ts": NaN, "service": "svc", "level": "ERROR", "message": "x"}',
        b'{"ts": Infinity, "service": "svc", "level": "ERROR", "message": "x"}',
    ],
)
def test_hostile_json_is_a_malformed_line(raw: bytes) -> None:
    assert parse_line(raw) is None


async def test_one_odd_line_never_spoils_its_hour_file(tmp_path: Path) -> None:
    good = [
        json.dumps({"ts": f"2026-11-28T10:0{m}:00Z", "service": "svc", "level": "ERROR",
                    "message": f"good {m}"})
        for m in range(3)
    ]  # fmt: skip
    odd = [
        json.dumps({"ts": ts, "service": "svc", "level": "ERROR", "message": "odd"})
        for ts in ODD_TS
    ]
    hostile = ["[" * 100_000 + "]" * 100_000, '{"ts": NaN, "service": "svc"}']
    path = tmp_path / "svc" / "2026-11-28" / "10.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join([good[0], *odd, good[1], *hostile, good[2]]) + "\n", "utf-8")
    source = JsonlLogSource(tmp_path)
    adapter = LogsAdapter(source)
    start = datetime(2026, 11, 28, 10, tzinfo=UTC)
    for contains, level in [(None, None), ("good", None), ("odd", None), (None, "ERROR")]:
        q = LogsInput.model_validate(
            {"service": "svc", "start": start, "end": start + timedelta(hours=1),
             "contains": contains, "level": level},
            strict=False,
        )  # fmt: skip
        result = await adapter.invoke(AdapterCall("c", "r", q))
        assert isinstance(result, Ready), (contains, level, result)
        messages = [i.message for i in result.items if isinstance(i, LogItem)]
        assert messages == ([] if contains == "odd" else ["good 2", "good 1", "good 0"])
    assert source.stats.malformed_lines >= len(ODD_TS) + len(hostile)
