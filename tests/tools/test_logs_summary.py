"""query_logs' ``summary`` (CONTRACTS §4): exact counts, buckets, onset and dominant patterns over
every matching line of the window — generated logs with known numbers, for the folder source and
for a local fake Loki (metric query, sample, labels, logfmt, org id, basic auth) — and its place
in the bounded observation."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.contract.observations import ready_observation
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import (
    JsonlLogSource,
    LogsAdapter,
    LokiLogSource,
    build_count_logql,
    build_logql,
)
from sre_diag.tools.logs.summary import (
    MAX_KEYS,
    PATTERN_BYTES,
    PATTERN_CHARS,
    Grid,
    Tally,
    mask_message,
    message_pattern,
    pattern_of,
)
from sre_diag.tools.plain import visible_controls
from sre_diag.tools.schemas import LogItem, LogLevel, LogsInput, LogSummary
from tests.tools.fake_loki import FakeLoki, Reply, json_reply
from tests.tools.test_logs import (
    _line,
    _loki_body,
    _matrix_body,
    _ns,
    _write,
    loki,  # noqa: F401  (the fake Loki fixture)
)

DAY = datetime(2026, 11, 28, tzinfo=UTC)
POOL = "db pool exhausted: timed out after {ms}ms waiting for connection"
POOL_PATTERN = "db pool exhausted: timed out after <*>ms waiting for connection"
HEALTH = "GET /healthz 200 in {ms}ms"
SLOW = "slow query: payment_reconciliation took {ms}ms rows_examined={rows}"
POOL_LINES = 1_102
ONSET_MINUTE = 7


def _at(hour: int, minute: int = 0, second: int = 0, ms: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute, second=second, microsecond=ms * 1000)


def _q(
    start: datetime,
    end: datetime,
    *,
    service: str = "payment-api",
    level: LogLevel | None = None,
    contains: str | None = None,
    limit: int = 20,
) -> LogsInput:
    return LogsInput(
        service=service, start=start, end=end, level=level, contains=contains, limit=limit
    )


def _iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _incident(folder: Path) -> dict[int, int]:
    """payment-api 10:00–11:00: 3 health lines a minute; from minute 7 to 36 the pool is
    exhausted (1,102 ERROR lines, varying ms) beside 4 WARN slow queries a minute; 09:59 and
    11:00 hold lines outside a 10:00–11:00 window. Returns the expected lines per minute."""
    rng = random.Random(13)
    per_minute: dict[int, int] = {}
    rows: list[tuple[datetime, str, str]] = []
    pool_minutes = list(range(ONSET_MINUTE, 37))
    pool_counts = [POOL_LINES // len(pool_minutes)] * len(pool_minutes)
    pool_counts[-1] += POOL_LINES - sum(pool_counts)
    for minute in range(60):
        lines = [("INFO", HEALTH.format(ms=rng.randint(1, 40))) for _ in range(3)]
        if minute in pool_minutes:
            lines += [
                ("ERROR", POOL.format(ms=rng.choice((3000, 3001, 2999, 3050))))
                for _ in range(pool_counts[minute - ONSET_MINUTE])
            ]
            rows_examined = rng.randint(10**6, 2 * 10**6)
            lines += [("WARN", SLOW.format(ms=8000 + i, rows=rows_examined)) for i in range(4)]
        per_minute[minute] = len(lines)
        for i, (level, message) in enumerate(lines):
            ts = _at(10, minute) + timedelta(milliseconds=(i * 59_999) // len(lines))
            rows.append((ts, level, message))
    rows.sort(key=lambda row: row[0])
    text = [_line(_iso(ts), m, level, service="payment-api") for ts, level, m in rows]
    _write(folder, "payment-api/2026-11-28/10.jsonl", text)
    _write(folder, "payment-api/2026-11-28/09.jsonl", [
        _line("2026-11-28T09:59:59.999Z", POOL.format(ms=1), "ERROR", service="payment-api"),
    ])  # fmt: skip
    _write(folder, "payment-api/2026-11-28/11.jsonl", [
        _line("2026-11-28T11:00:00.000Z", POOL.format(ms=1), "ERROR", service="payment-api"),
    ])  # fmt: skip
    return per_minute


async def _summary(
    source: JsonlLogSource | LokiLogSource, q: LogsInput
) -> tuple[Ready, LogSummary]:
    result = await LogsAdapter(source).invoke(AdapterCall("call-1", "run-1", q))
    assert isinstance(result, Ready), result
    assert isinstance(result.summary, LogSummary)
    return result, result.summary


# --------------------------------------------------------------------------------------------
# Folder source


async def test_counts_onset_and_dominant_pattern_are_exact(tmp_path: Path) -> None:
    per_minute = _incident(tmp_path)
    result, summary = await _summary(JsonlLogSource(tmp_path), _q(_at(10), _at(11)))
    assert summary.exact and summary.matched == sum(per_minute.values())
    assert summary.buckets.start == "2026-11-28T10:00:00.000Z"
    assert summary.buckets.width_seconds == 60
    assert summary.buckets.counts == [per_minute[m] for m in range(60)]
    assert summary.first_ts == "2026-11-28T10:00:00.000Z"
    top = summary.top_messages[0]
    assert (top.pattern, top.count) == (POOL_PATTERN, POOL_LINES)
    assert top.first_ts.startswith("2026-11-28T10:07:")
    assert top.last_ts.startswith("2026-11-28T10:36:")
    patterns = [p.pattern for p in summary.top_messages]
    assert patterns[1:] == [
        "GET /healthz <*> in <*>ms",
        "slow query: payment_reconciliation took <*>ms rows_examined=<*>",
    ]
    assert [p.count for p in summary.top_messages[1:]] == [180, 4 * 30]
    # the items are the newest matching lines, and the summary says how many there were
    items = [i for i in result.items if isinstance(i, LogItem)]
    assert len(items) == 20 and result.truncated
    assert items[0].ts == summary.last_ts and items[0].ts.startswith("2026-11-28T10:59:")


async def test_level_and_contains_filters_shape_the_summary(tmp_path: Path) -> None:
    _incident(tmp_path)
    source = JsonlLogSource(tmp_path)
    _, errors = await _summary(source, _q(_at(10), _at(11), level=LogLevel.ERROR))
    assert errors.matched == POOL_LINES
    onset = next(i for i, count in enumerate(errors.buckets.counts) if count)
    assert onset == ONSET_MINUTE and errors.first_ts is not None
    assert errors.first_ts.startswith("2026-11-28T10:07:")
    assert [(p.pattern, p.count) for p in errors.top_messages] == [(POOL_PATTERN, POOL_LINES)]
    _, health = await _summary(source, _q(_at(10), _at(11), contains="HEALTHZ"))
    assert health.matched == 180 and health.buckets.counts == [3] * 60
    _, nothing = await _summary(source, _q(_at(10), _at(11), contains="no such text"))
    assert nothing.matched == 0 and nothing.first_ts is None and nothing.top_messages == []


async def test_window_edges_and_unaligned_grid(tmp_path: Path) -> None:
    per_minute = _incident(tmp_path)
    source = JsonlLogSource(tmp_path)
    # 09:59:59.999 and 11:00:00.000 (end exclusive) are outside; the 09 file is read
    _, summary = await _summary(source, _q(_at(9, 30), _at(11), level=LogLevel.ERROR))
    assert summary.matched == POOL_LINES + 1
    assert summary.buckets.width_seconds == 300 and len(summary.buckets.counts) == 18
    assert summary.buckets.counts[5] == 1  # 09:55–10:00
    _, late = await _summary(source, _q(_at(10, 59, 30), _at(11, 0, 0, 1), level=LogLevel.ERROR))
    assert late.matched == 1 and late.first_ts == "2026-11-28T11:00:00.000Z"
    _, mid = await _summary(source, _q(_at(10, 7, 30), _at(10, 37, 30)))
    assert mid.buckets.start == "2026-11-28T10:07:30.000Z" and len(mid.buckets.counts) == 30
    assert mid.matched == sum(mid.buckets.counts)
    full = sum(per_minute[m] for m in range(8, 37))
    assert full < mid.matched < full + per_minute[7] + per_minute[37]


@pytest.mark.parametrize(
    ("hours", "width", "count"),
    [(1, 60, 60), (0.5, 60, 30), (61 / 60, 300, 13), (5, 300, 60), (6, 900, 24), (15, 900, 60),
     (15.5, 1800, 31), (24, 1800, 48)],
)  # fmt: skip
def test_bucket_width_is_the_smallest_that_fits(hours: float, width: int, count: int) -> None:
    grid = Grid.for_window(_at(0), _at(0) + timedelta(hours=hours))
    assert (grid.width_seconds, grid.count) == (width, count)


async def test_irregular_lines_give_the_same_summary_as_a_plain_reading(tmp_path: Path) -> None:
    """Batches with irregular lines (blank, malformed, offsets, other services, escapes,
    out of order) are read line by line; regular batches by the C-loop path: both agree with a
    plain ``json.loads`` reading of the file."""
    rng = random.Random(5)
    lines = []
    for _ in range(6_000):
        ts = _at(10) + timedelta(milliseconds=rng.randrange(3_600_000))
        lines.append(_line(_iso(ts), POOL.format(ms=rng.randint(1, 9999)), "ERROR", "svc",
                           pad="x" * 60))  # fmt: skip
    lines[4_500:4_500] = [
        "",
        "{not json",
        _line("2026-11-28T11:30:00+01:00", "offset \\u00e9 line", "WARN", "svc"),
        _line("2026-11-28T10:30:00Z", "other service", "INFO", "svc-canary"),
        json.dumps({"ts": "2026-11-28T10:31:00Z", "service": "svc", "level": "INFO",
                    "message": 'caf\u00e9 "quoted" 42'}),
    ]  # fmt: skip
    _write(tmp_path, "svc/2026-11-28/10.jsonl", lines)
    q = _q(_at(10), _at(11), service="svc", limit=7)
    result, summary = await _summary(JsonlLogSource(tmp_path), q)
    reference = Tally(Grid.for_window(q.start, q.end))
    kept = []
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        ts = datetime.fromisoformat(obj["ts"]).astimezone(UTC)
        if obj["service"] == "svc" and q.start <= ts < q.end:
            reference.add(ts, obj["message"])
            kept.append((ts, obj["message"]))
    assert summary == reference.summary(exact=True)
    assert summary.matched == 6_002
    newest = sorted(kept, key=lambda row: row[0], reverse=True)[:7]
    items = [i for i in result.items if isinstance(i, LogItem)]
    assert [i.message for i in items] == [message for _, message in newest]


def test_too_many_distinct_messages_make_the_summary_inexact() -> None:
    tally = Tally(Grid.for_window(_at(10), _at(11)))
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(MAX_KEYS + 1):
        word = "".join(letters[(i // 26**k) % 26] for k in range(4))
        tally.add(_at(10, 5), f"user {word} logged in")
    summary = tally.summary(exact=True)
    assert summary.matched == MAX_KEYS + 1 and not summary.exact


# --------------------------------------------------------------------------------------------
# Patterns are evidence: masked, redacted, bounded


@pytest.mark.parametrize(
    ("message", "pattern"),
    [
        ("POST /v1/payments 503 in 3004ms order=ord_10245",
         "POST /v<*>/payments <*> in <*>ms order=ord_<*>"),
        ("GET /v1/payments/pay_MVFKZ6VQPC8Z 200 in 7ms", "GET /v<*>/payments/pay_<*> <*> in <*>ms"),
        ("conn from 10.2.3.4:5432 trace=7fb5ba6a5d4b29d5f6fa91c4806099ac",
         "conn from <*> trace=<*>"),
        ("job 123e4567-e89b-12d3-a456-426614174000 done", "job <*> done"),
        ('login user="alice" failed at 2026-11-28T10:05:02Z', 'login user="<*>" failed at <*>'),
        ("took 1.5s (p99=0.250s) size=12KiB 99%", "took <*>s (p<*>=<*>s) size=<*> <*>%"),
    ],
)  # fmt: skip
def test_masker_masks_variable_parts(message: str, pattern: str) -> None:
    assert pattern_of(message.encode().translate(bytes.maketrans(b"123456789", b"0" * 9))) == (
        pattern
    )
    assert mask_message(message) == pattern


def test_patterns_are_redacted_and_bounded() -> None:
    tally = Tally(Grid.for_window(_at(10), _at(11)))
    tally.add(_at(10, 1), "db connect dsn=mysql://app:Pa55w0rd@db:3306/x password=hunter2 ok")
    tally.add(_at(10, 2), "x" * 5_000 + " Authorization: Bearer abcdefghijklmnop")
    tally.add(_at(10, 3), "\x01" * 400)
    tally.add(_at(10, 4), "连接池" * 300)
    patterns = [p.pattern for p in tally.summary(exact=True).top_messages]
    assert "Pa55w0rd" not in patterns[0] and "hunter2" not in patterns[0]
    assert "***" in patterns[0] and "[REDACTED]" in patterns[0]
    for pattern in patterns:
        assert len(pattern) <= PATTERN_CHARS
        assert len(json.dumps(pattern, ensure_ascii=False).encode()) <= PATTERN_BYTES


# --------------------------------------------------------------------------------------------
# The observation: summary first and whole, newest items that still fit


async def test_over_bound_observation_keeps_the_summary_and_the_newest_items(
    tmp_path: Path,
) -> None:
    _incident(tmp_path)
    q = _q(_at(10), _at(11), limit=50)
    result, summary = await _summary(JsonlLogSource(tmp_path), q)
    text, count, truncated = ready_observation(
        "call-1", "query_logs", result.items, truncated=result.truncated, max_bytes=4096,
        summary=result.summary,
    )  # fmt: skip
    assert len(text.encode()) <= 4096 and truncated and 0 < count < 50
    observation = json.loads(text)
    assert list(observation) == [
        "tool_call_id", "tool", "evidence_status", "summary", "item_count", "items", "truncated",
    ]  # fmt: skip
    assert observation["summary"] == summary.model_dump(mode="json")
    newest = [i.model_dump() for i in result.items[:count]]
    assert observation["items"] == newest and observation["item_count"] == count
    # far below the default bound: the least frequent patterns go, then the summary
    small, count, _ = ready_observation(
        "call-1", "query_logs", result.items, truncated=True, max_bytes=700, summary=summary
    )
    shrunk = json.loads(small)
    assert count == 0 and len(small.encode()) <= 700
    assert shrunk["summary"]["top_messages"] == [
        p.model_dump() for p in summary.top_messages[: len(shrunk["summary"]["top_messages"])]
    ]
    tiny, _, _ = ready_observation(
        "call-1", "query_logs", result.items, truncated=True, max_bytes=256, summary=summary
    )
    assert "summary" not in json.loads(tiny) and len(tiny.encode()) <= 256


# --------------------------------------------------------------------------------------------
# Loki (local fake): metric query, sample, labels, logfmt, org id, basic auth


@pytest.fixture
async def loki_source(loki: FakeLoki) -> AsyncIterator[LokiLogSource]:  # noqa: F811
    source = LokiLogSource(loki.url, timeout_seconds=2)
    yield source
    await source.aclose()


def _pool_stream(times: list[datetime], labels: dict[str, str] | None = None) -> Reply:
    values = [
        (ts, _line(_iso(ts), POOL.format(ms=3000 + i), "ERROR")) for i, ts in enumerate(times)
    ]
    return json_reply(_loki_body([(labels or {"service": "payment-api"}, values)]))


async def test_loki_counts_come_from_a_metric_query_stepped_by_the_bucket(
    loki: FakeLoki,  # noqa: F811
) -> None:
    sample = [_at(10, 36, 59) - timedelta(seconds=i) for i in range(3)]
    loki.reply = lambda: _pool_stream(sample)
    loki.oldest = lambda: _pool_stream([_at(10, 7, 0, 4)])
    origin = _at(10).timestamp()
    per_bucket = {m: 37 for m in range(ONSET_MINUTE, 37)}
    points = [(origin + 60 * (m + 1) - 1e-9, n) for m, n in per_bucket.items()]
    loki.counts = lambda query: json_reply(_matrix_body(points))
    source = LokiLogSource(loki.url, sample_lines=3)
    q = _q(_at(10), _at(11), level=LogLevel.ERROR, limit=2)
    result, summary = await _summary(source, q)
    await source.aclose()
    grid = Grid.for_window(q.start, q.end)
    assert loki.count_requests == [
        {
            "query": 'sum(count_over_time({service="payment-api"} | json | __error__=""'
            ' | level="ERROR" [60s]))',
            "start": str(_ns(_at(10, 1)) - 1),  # (t - 60s, t] at t = 10:01 - 1 ns
            "end": str(_ns(_at(11)) - 1),
            "step": "60s",
        }
    ]
    assert loki.count_requests[0]["query"] == build_count_logql(q, grid, "service", "json")
    assert [r["direction"] for r in loki.log_requests] == ["backward", "forward"]
    assert [r["limit"] for r in loki.log_requests] == ["3", "3"]
    assert not summary.exact and summary.matched == 37 * 30
    assert summary.buckets.counts == [per_bucket.get(m, 0) for m in range(60)]
    assert next(i for i, n in enumerate(summary.buckets.counts) if n) == ONSET_MINUTE
    assert summary.first_ts == "2026-11-28T10:07:00.004Z"
    assert summary.last_ts == "2026-11-28T10:36:59.000Z"
    assert [(p.pattern, p.count) for p in summary.top_messages] == [(POOL_PATTERN, 3)]
    assert len(result.items) == 2 and result.truncated


async def test_loki_sample_that_holds_every_match_is_exact(
    loki: FakeLoki,  # noqa: F811
    loki_source: LokiLogSource,
) -> None:
    times = [_at(10, 8, 30), _at(10, 7, 1), _at(10, 7, 0)]
    loki.reply = lambda: _pool_stream(times)
    q = _q(_at(10), _at(11))
    _, summary = await _summary(loki_source, q)
    assert [r["direction"] for r in loki.log_requests] == ["backward"]
    assert loki.log_requests[0]["limit"] == "500" and len(loki.count_requests) == 1
    assert summary.exact and summary.matched == 3
    assert summary.buckets.counts[7:9] == [2, 1] and sum(summary.buckets.counts) == 3
    assert summary.top_messages[0].pattern == POOL_PATTERN


async def test_loki_org_id_and_basic_auth_from_the_url(loki: FakeLoki) -> None:  # noqa: F811
    loki.reply = lambda: _pool_stream([_at(10, 7)])
    url = loki.url.replace("http://", "http://bob:s3cr%40t@")
    source = LokiLogSource(url, org_id="tenant-a")
    await _summary(source, _q(_at(10), _at(11)))
    await source.aclose()
    assert source.endpoint == loki.url + "loki/api/v1/query_range"
    expected = "Basic " + base64.b64encode(b"bob:s3cr@t").decode()
    assert len(loki.headers) == 2
    for headers in loki.headers:
        assert headers["X-Scope-OrgID"] == "tenant-a"
        assert headers["Authorization"] == expected
    plain = LokiLogSource(loki.url)
    await _summary(plain, _q(_at(10), _at(11)))
    await plain.aclose()
    assert "X-Scope-OrgID" not in loki.headers[-1] and "Authorization" not in loki.headers[-1]


async def test_loki_service_label_and_logfmt_lines(loki: FakeLoki) -> None:  # noqa: F811
    lines = [
        (_at(10, 9, 2), 'ts=2026-11-28T10:09:02Z level=error msg="db pool exhausted: timed out '
                        'after 3012ms waiting for connection" pool=main'),
        (_at(10, 9, 1), 'level=error msg="db pool exhausted: timed out after 2999ms waiting for '
                        'connection"'),
        (_at(10, 8), "lvl=warn message=slow"),
    ]  # fmt: skip
    loki.reply = lambda: json_reply(_loki_body([({"app": "payment-api"}, lines)]))
    source = LokiLogSource(loki.url, service_label="app", line_format="logfmt")
    q = _q(_at(10), _at(11), level=LogLevel.ERROR)
    result, summary = await _summary(source, q)
    await source.aclose()
    query = '{app="payment-api"} | logfmt | __error__="" | level=~"(?i)(?:error|err)"'
    assert build_logql(q, "app", "logfmt") == query
    assert loki.log_requests[0]["query"] == query
    assert loki.count_requests[0]["query"] == f"sum(count_over_time({query} [60s]))"
    items = [i for i in result.items if isinstance(i, LogItem)]
    assert [(i.service, i.level, i.message) for i in items] == [
        ("payment-api", "error", POOL.format(ms=3012)),
        ("payment-api", "error", POOL.format(ms=2999)),
        ("payment-api", "warn", "slow"),
    ]
    assert summary.top_messages[0].pattern == POOL_PATTERN and summary.top_messages[0].count == 2


def test_loki_settings_reach_the_source() -> None:
    from sre_diag.settings import Settings
    from sre_diag.tools.base import ToolName
    from sre_diag.wiring import build_adapters

    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        DIAG_LOGS_SOURCE="http://u:p@loki.internal:3100",
        DIAG_LOKI_SERVICE_LABEL="service_name",
        DIAG_LOKI_LINE_FORMAT="logfmt",
        DIAG_LOKI_ORG_ID="team-a",
    )
    adapter = build_adapters(settings)[ToolName.QUERY_LOGS]
    assert isinstance(adapter, LogsAdapter)
    source = adapter.source
    assert isinstance(source, LokiLogSource)
    assert (source.shape.label, source.shape.line_format) == ("service_name", "logfmt")
    assert source.headers == {"X-Scope-OrgID": "team-a"}
    assert source.endpoint == "http://loki.internal:3100/loki/api/v1/query_range"
    assert source.authorization == "Basic " + base64.b64encode(b"u:p").decode()


@pytest.mark.parametrize(
    "message",
    [
        "login from \x1b]0;pwned\x07 at port 22",
        "job \x1b[2J\x1b[H done",
        "user \u202eevil\u202c logged in",
        "path \x9b31m red \x7f end",
        "bell\x07 and nul\x00 inside",
    ],
)
def test_a_pattern_shows_controls_and_is_what_patterns_prints(message: str) -> None:
    """The summary's pattern carries no terminal or bidi control raw (it reaches the model,
    Slack and a terminal) and is exactly the text ``sre-diag patterns`` prints for the line."""
    tally = Tally(Grid.for_window(_at(10), _at(11)))
    tally.add(_at(10, 1), message)
    ((pattern, _seen),) = tally.top_patterns()
    assert pattern == message_pattern(message) == visible_controls(pattern)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E
                   for c in pattern)  # fmt: skip
    assert "\\x" in pattern or "\\u" in pattern
