"""query_logs: the JSON-lines folder source, the Loki source (against a local fake), projection."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sre_diag.resources import BUNDLED_LOGS
from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready, ToolName
from sre_diag.tools.logs import (
    MAX_LINE_BYTES,
    MESSAGE_CHARS,
    TRUNCATION_MARK,
    JsonlLogSource,
    LogsAdapter,
    LokiLogSource,
    build_log_source,
    build_logql,
    logql_string,
)
from sre_diag.tools.schemas import LogItem, LogLevel, LogsInput
from tests.tools.fake_loki import FakeLoki, Reply, json_reply, start_fake_loki, text_reply

DAY = datetime(2026, 11, 28, tzinfo=UTC)


def _at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute, second=second)


def _input(
    start: datetime,
    end: datetime,
    service: str = "payment-api",
    *,
    contains: str | None = None,
    level: LogLevel | None = None,
    limit: int = 20,
) -> LogsInput:
    return LogsInput(
        service=service, start=start, end=end, contains=contains, level=level, limit=limit
    )


async def _ready(adapter: LogsAdapter, q: LogsInput) -> tuple[list[LogItem], bool]:
    result = await adapter.invoke(AdapterCall("call-1", "run-1", q))
    assert isinstance(result, Ready), result
    items = [item for item in result.items if isinstance(item, LogItem)]
    assert len(items) == len(result.items)
    return items, result.truncated


def _line(ts: str, message: str, level: str = "INFO", service: str = "svc", **extra: Any) -> str:
    record = {"ts": ts, "service": service, "level": level, "message": message, **extra}
    return json.dumps(record)


def _write(folder: Path, rel: str, lines: list[str]) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Folder source over the bundled incident


@pytest.fixture
def bundled() -> tuple[JsonlLogSource, LogsAdapter]:
    source = JsonlLogSource(BUNDLED_LOGS)
    return source, LogsAdapter(source)


async def test_incident_errors_newest_first_and_truncated(
    bundled: tuple[JsonlLogSource, LogsAdapter],
) -> None:
    source, adapter = bundled
    q = _input(_at(10), _at(11), contains="DB POOL exhausted", level=LogLevel.ERROR, limit=5)
    items, truncated = await _ready(adapter, q)
    assert len(items) == 5 and truncated
    assert [i.ts for i in items] == sorted((i.ts for i in items), reverse=True)
    for item in items:
        assert item.level == "ERROR" and item.service == "payment-api"
        assert "db pool exhausted" in item.message
        assert "2026-11-28T10:05:00.000Z" <= item.ts < "2026-11-28T10:40:00.000Z"
        assert item.ts.endswith("Z") and len(item.ts) == len("2026-11-28T10:05:00.000Z")
    assert source.stats.last_files == ("payment-api/2026-11-28/10.jsonl",)


async def test_only_the_window_hours_are_opened(
    bundled: tuple[JsonlLogSource, LogsAdapter],
) -> None:
    source, adapter = bundled
    await _ready(adapter, _input(_at(9, 30), _at(10, 30), contains="rollback", limit=50))
    assert source.stats.last_files == (
        "payment-api/2026-11-28/10.jsonl",
        "payment-api/2026-11-28/09.jsonl",
    )
    before = source.stats.files_opened
    await _ready(adapter, _input(_at(13, 15), _at(13, 45)))
    assert source.stats.files_opened - before == 1
    assert source.stats.last_files == ("payment-api/2026-11-28/13.jsonl",)


async def test_a_day_window_reads_every_hour_of_the_window_for_its_summary(
    bundled: tuple[JsonlLogSource, LogsAdapter],
) -> None:
    source, adapter = bundled
    q = _input(_at(0), _at(23, 59), limit=3)
    result = await adapter.invoke(AdapterCall("call-1", "run-1", q))
    assert isinstance(result, Ready) and len(result.items) == 3 and result.truncated
    assert next(i.ts for i in result.items if isinstance(i, LogItem)).startswith("2026-11-28T23:")
    assert source.stats.last_files == tuple(
        f"payment-api/2026-11-28/{hour:02d}.jsonl" for hour in range(23, -1, -1)
    )
    lines = sum(
        len((BUNDLED_LOGS / name).read_bytes().splitlines()) for name in source.stats.last_files
    )
    assert source.stats.lines_read == lines


async def test_red_herring_psp_is_healthy(bundled: tuple[JsonlLogSource, LogsAdapter]) -> None:
    _, adapter = bundled
    window = (_at(10), _at(11))
    errors, _ = await _ready(adapter, _input(*window, "stripe-gateway", level=LogLevel.ERROR))
    assert errors == []
    ok, _ = await _ready(adapter, _input(*window, "stripe-gateway", contains="p99", limit=50))
    assert ok and all("errors=0" in item.message for item in ok)


async def test_affected_orders_are_logged_by_order_service(
    bundled: tuple[JsonlLogSource, LogsAdapter],
) -> None:
    _, adapter = bundled
    for order in ("ord_10231", "ord_10232", "ord_10245"):
        q = _input(_at(10), _at(11), "order-service", contains=f"order {order} ", limit=50)
        items, _ = await _ready(adapter, q)
        assert any("payment-api returned 503" in item.message for item in items), order


async def test_bundled_secrets_are_redacted(bundled: tuple[JsonlLogSource, LogsAdapter]) -> None:
    _, adapter = bundled
    dsn, _ = await _ready(adapter, _input(_at(10, 2), _at(10, 3), contains="dsn="))
    assert dsn[0].message == (
        "db connect dsn=mysql://payments_rw:***@db-primary.internal:3306/payments"
    )
    q = _input(_at(10, 12), _at(10, 13), "checkout-web", contains="authorization")
    bearer, _ = await _ready(adapter, q)
    assert bearer[0].message.endswith("Authorization: Bearer [REDACTED]")
    q = _input(_at(3), _at(4), "stripe-gateway", contains="api_key")
    key, _ = await _ready(adapter, q)
    assert "sk_test" not in key[0].message and "[REDACTED]" in key[0].message


# --------------------------------------------------------------------------------------------
# Folder source edge cases


async def test_filters_window_bounds_and_out_of_order_lines(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "svc/2026-11-28/10.jsonl",
        [
            _line("2026-11-28T10:30:00Z", "Payment FAILED for ord_1", "ERROR"),
            _line("2026-11-28T10:00:00Z", "payment failed at start", "ERROR"),
            _line("2026-11-28T10:45:00+00:00", "payment failed later", "ERROR"),
            _line("2026-11-28T11:00:00Z", "payment failed at end (exclusive)", "ERROR"),
            _line("2026-11-28T10:50:00Z", "payment failed (warn)", "WARN"),
            _line("2026-11-28T10:55:00Z", "payment failed", "ERROR", service="svc-canary"),
            _line("2026-11-28T10:20:00Z", "all good", "ERROR"),
        ],
    )
    adapter = LogsAdapter(JsonlLogSource(tmp_path))
    q = _input(_at(10), _at(11), "svc", contains="PAYMENT failed", level=LogLevel.ERROR)
    items, truncated = await _ready(adapter, q)
    assert [i.message for i in items] == [
        "payment failed later",
        "Payment FAILED for ord_1",
        "payment failed at start",
    ]
    assert not truncated


async def test_window_in_another_offset_maps_to_utc_files(tmp_path: Path) -> None:
    _write(tmp_path, "svc/2026-11-28/02.jsonl", [_line("2026-11-28T02:10:00Z", "early")])
    source = JsonlLogSource(tmp_path)
    shanghai = timezone(timedelta(hours=8))
    start = datetime(2026, 11, 28, 10, 0, tzinfo=shanghai)
    items, _ = await _ready(LogsAdapter(source), _input(start, start + timedelta(hours=1), "svc"))
    assert [i.ts for i in items] == ["2026-11-28T02:10:00.000Z"]
    assert source.stats.last_files == ("svc/2026-11-28/02.jsonl",)


async def test_malformed_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = [
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"ts": "2026-11-28T10:01:00Z", "service": "svc", "level": "INFO"}),
        _line("2026-11-28T10:02:00", "naive timestamp"),
        _line("yesterday", "bad timestamp"),
        json.dumps({"ts": "2026-11-28T10:03:00Z", "service": "svc", "level": 3, "message": "x"}),
        "x" * (MAX_LINE_BYTES + 10),
        "",
        _line("2026-11-28T10:04:00Z", "good one"),
    ]
    _write(tmp_path, "svc/2026-11-28/10.jsonl", lines)
    with (tmp_path / "svc/2026-11-28/10.jsonl").open("ab") as handle:
        handle.write(b"\xff\xfe broken utf-8\n")
    source = JsonlLogSource(tmp_path)
    items, _ = await _ready(LogsAdapter(source), _input(_at(10), _at(11), "svc"))
    assert [i.message for i in items] == ["good one"]
    assert source.stats.malformed_lines == 8


async def test_long_messages_are_bounded_with_a_mark(tmp_path: Path) -> None:
    message = "stack: " + "frame " * 200 + "password=hunter2"
    _write(tmp_path, "svc/2026-11-28/10.jsonl", [_line("2026-11-28T10:00:01Z", message)])
    items, _ = await _ready(LogsAdapter(JsonlLogSource(tmp_path)), _input(_at(10), _at(11), "svc"))
    assert len(items[0].message) == MESSAGE_CHARS
    assert items[0].message.endswith(TRUNCATION_MARK)


async def test_unknown_service_is_empty(bundled: tuple[JsonlLogSource, LogsAdapter]) -> None:
    source, adapter = bundled
    assert await _ready(adapter, _input(_at(10), _at(11), "no-such-service")) == ([], False)
    assert source.stats.last_files == ()


async def test_dot_dot_service_is_invalid(tmp_path: Path) -> None:
    adapter = LogsAdapter(JsonlLogSource(tmp_path / "logs"))
    (tmp_path / "logs").mkdir()
    result = await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11), "..")))
    assert result == Failed(AdapterErrorCode.INVALID_INPUT)


async def test_missing_folder_is_unavailable(tmp_path: Path) -> None:
    adapter = LogsAdapter(JsonlLogSource(tmp_path / "nope"))
    result = await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)
    assert adapter.tool is ToolName.QUERY_LOGS
    await adapter.aclose()


async def test_a_folder_in_place_of_an_hour_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "svc/2026-11-28/10.jsonl").mkdir(parents=True)
    source = JsonlLogSource(tmp_path)
    assert await _ready(LogsAdapter(source), _input(_at(10), _at(11), "svc")) == ([], False)


async def test_unreadable_hour_file_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "svc/2026-11-28/10.jsonl", [_line("2026-11-28T10:00:01Z", "x")])
    real_open = os.open

    def deny(path: Any, *args: Any, **kwargs: Any) -> int:
        # The OS boundary: tests run as root, so a chmod would not deny anything.
        if str(path).endswith(".jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    adapter = LogsAdapter(JsonlLogSource(tmp_path))
    result = await adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11), "svc")))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)


def test_factory_picks_the_source() -> None:
    assert isinstance(build_log_source("http://loki:3100"), LokiLogSource)
    assert isinstance(build_log_source("HTTPS://loki.example.com/"), LokiLogSource)
    folder = build_log_source("examples/incident/logs")
    assert isinstance(folder, JsonlLogSource) and folder.folder == Path("examples/incident/logs")


# --------------------------------------------------------------------------------------------
# LogQL


def _logql_literal(text: str) -> tuple[str, str]:
    """Decode the LogQL string literal at the start of ``text``; (value, rest after it)."""
    assert text[0] == '"'
    out, i = [], 1
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    while text[i] != '"':
        if text[i] == "\\":
            if text[i + 1] == "x":
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(escapes[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out), text[i + 1 :]


def _line_filter(query: str) -> re.Pattern[str]:
    """The message matcher of a query (fully matched against the decoded message)."""
    head, _, literal = query.partition(" | message=~")
    assert head in {
        '{service="payment-api"} | json | __error__=""',
        '{service="payment-api"} | json | __error__="" | level="WARN"',
    }
    value, rest = _logql_literal(literal)
    assert rest == ""
    # RE2 and Python agree on this subset once \x{HHHH} is spelled as the character.
    python = re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: re.escape(chr(int(m[1], 16))), value)
    return re.compile(python)


def test_logql_escapes_hostile_input() -> None:
    q = _input(_at(10), _at(11), contains='"} |= "x', level=LogLevel.WARN)
    query = build_logql(q)
    assert query.startswith(
        '{service="payment-api"} | json | __error__="" | level="WARN" | message=~"'
    )
    pattern = _line_filter(query)
    assert pattern.fullmatch('a "} |= "x b')
    assert pattern.fullmatch('a "} |= "X b')
    assert not pattern.fullmatch("a } |= x b")
    slashes = _input(_at(10), _at(11), contains="C:\\tmp\\a.b")
    pattern = _line_filter(build_logql(slashes))
    assert pattern.fullmatch("C:\\tmp\\a.b") and pattern.fullmatch("x c:\\TMP\\A.b\ny")
    assert not pattern.fullmatch("C:\\tmp\\aXb")
    assert logql_string('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'


@pytest.mark.parametrize(
    ("contains", "raw"),
    [
        ("<script>", "\\u003cscript\\u003e"),
        ("a&b", "a\\u0026b"),
        ("a/b", "a\\/b"),
        ("naïve café", "na\\u00efve caf\\u00e9"),
        ("连接池", "\\u8fde\\u63a5\\u6c60"),
        ("pool 😀 full", "pool \\ud83d\\ude00 full"),
        ("tab\tthen", "tab\\tthen"),
    ],
)
def test_loki_message_filter_matches_the_decoded_message(contains: str, raw: str) -> None:
    # Loki's ``| json`` decodes the message however it was escaped; the matcher sees that.
    pattern = _line_filter(build_logql(_input(_at(10), _at(11), contains=contains)))
    assert pattern.fullmatch(json.loads(f'"x {raw} y"'))
    assert pattern.fullmatch(f"plain {contains.upper()} text")
    assert not pattern.fullmatch(f"plain {contains[:-1]} text")


def test_logql_without_filters_has_no_parser() -> None:
    assert build_logql(_input(_at(10), _at(11), "svc.v2:x_y-z")) == '{service="svc.v2:x_y-z"}'


# --------------------------------------------------------------------------------------------
# Loki fake


def _matrix_body(points: list[tuple[float, int]]) -> dict[str, Any]:
    values = [[at, str(count)] for at, count in points]
    result = [{"metric": {}, "values": values}] if points else []
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _loki_body(streams: list[tuple[dict[str, str], list[tuple[datetime, str]]]]) -> dict[str, Any]:
    result = [
        {"stream": labels, "values": [[str(_ns(ts)), line] for ts, line in values]}
        for labels, values in streams
    ]
    return {"status": "success", "data": {"resultType": "streams", "result": result}}


def _ns(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1_000


@pytest.fixture
async def loki() -> AsyncIterator[FakeLoki]:
    """The socket fake, answering as a real Loki does: chunked, gzip, in 1–100 byte writes."""
    async with start_fake_loki() as fake:
        yield fake


@pytest.fixture
async def loki_adapter(loki: FakeLoki) -> AsyncIterator[LogsAdapter]:
    adapter = LogsAdapter(LokiLogSource(loki.url, timeout_seconds=0.5))
    yield adapter
    await adapter.aclose()


async def test_loki_request_shape_and_merge(loki: FakeLoki, loki_adapter: LogsAdapter) -> None:
    labels = {"service": "payment-api"}
    loki.reply = lambda: json_reply(
        _loki_body(
            [
                (
                    labels,
                    [
                        (_at(10, 7, 1), _line("x", "db pool exhausted A", "ERROR")),
                        (_at(10, 5, 0), "plain text line with token=abc123"),
                    ],
                ),
                ({**labels, "level": "WARN"}, [(_at(10, 6), "slow query: 8412ms")]),
            ]
        )
    )
    q = _input(_at(10), _at(11), contains='"} |= "x\\', level=LogLevel.ERROR, limit=2)
    items, truncated = await _ready(loki_adapter, q)
    assert loki.paths == ["/loki/api/v1/query_range"] * 2
    assert loki.log_requests == [
        {
            "query": build_logql(q),
            "start": str(_ns(_at(10))),
            "end": str(_ns(_at(11))),
            "limit": "500",
            "direction": "backward",
        }
    ]
    assert '| json | __error__="" | level="ERROR" | message=~' in loki.requests[0]["query"]
    filter_ = _line_filter(loki.requests[0]["query"].replace("ERROR", "WARN"))
    assert filter_.fullmatch('x "} |= "x\\ y')
    assert truncated
    assert [(i.ts, i.level, i.message) for i in items] == [
        ("2026-11-28T10:07:01.000Z", "ERROR", "db pool exhausted A"),
        ("2026-11-28T10:06:00.000Z", "WARN", "slow query: 8412ms"),
    ]


async def test_loki_plain_lines_and_redaction(loki: FakeLoki, loki_adapter: LogsAdapter) -> None:
    loki.reply = lambda: json_reply(
        _loki_body([({"service": "svc"}, [(_at(10, 5), "retry with token=abc123 failed")])])
    )
    items, truncated = await _ready(loki_adapter, _input(_at(10), _at(11), "svc"))
    assert [(i.service, i.level, i.message) for i in items] == [
        ("svc", "", "retry with token=[REDACTED] failed")
    ]
    assert not truncated


def _status(code: int) -> Callable[[], Reply]:
    return lambda: text_reply("secret internal detail: password=hunter2", code)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (_status(500), AdapterErrorCode.UNAVAILABLE),
        (_status(503), AdapterErrorCode.UNAVAILABLE),
        (_status(400), AdapterErrorCode.INVALID_INPUT),
        (lambda: text_reply("<html>garbage</html>"), AdapterErrorCode.INTERNAL),
        (lambda: json_reply({"status": "error"}), AdapterErrorCode.INTERNAL),
        (
            lambda: json_reply(
                {"status": "success", "data": {"resultType": "matrix", "result": []}}
            ),
            AdapterErrorCode.INTERNAL,
        ),
        (
            lambda: json_reply(
                {
                    "status": "success",
                    "data": {
                        "resultType": "streams",
                        "result": [{"stream": {}, "values": [["not-a-number", "x"]]}],
                    },
                }
            ),
            AdapterErrorCode.INTERNAL,
        ),
    ],
)
async def test_loki_error_mapping(
    loki: FakeLoki,
    loki_adapter: LogsAdapter,
    reply: Callable[[], Reply],
    code: AdapterErrorCode,
) -> None:
    loki.reply = reply
    result = await loki_adapter.invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    assert result == Failed(code)


async def test_loki_timeout(loki: FakeLoki) -> None:
    loki.delay = 2.0
    source = LokiLogSource(loki.url, timeout_seconds=0.2)
    result = await LogsAdapter(source).invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    await source.aclose()
    assert result == Failed(AdapterErrorCode.TIMEOUT)


async def test_loki_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = LokiLogSource(f"http://127.0.0.1:{port}", timeout_seconds=2)
    result = await LogsAdapter(source).invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    await source.aclose()
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)


async def test_loki_oversized_body_is_unavailable_not_internal(loki: FakeLoki) -> None:
    loki.reply = lambda: json_reply(_loki_body([({"service": "svc"}, [(_at(10, 5), "x" * 4096)])]))
    source = LokiLogSource(loki.url, max_body_bytes=1024)
    result = await LogsAdapter(source).invoke(AdapterCall("c", "r", _input(_at(10), _at(11))))
    await source.aclose()
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)


# --------------------------------------------------------------------------------------------
# The generator of the bundled data


@functools.cache
def _generator() -> ModuleType:
    path = BUNDLED_LOGS.parent / "generate_logs.py"
    spec = importlib.util.spec_from_file_location("generate_logs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_logs"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.jsonl")}


def test_bundled_logs_are_what_the_generator_writes(tmp_path: Path) -> None:
    gen = _generator()
    gen.main(["--out", str(tmp_path)])
    assert _tree(tmp_path) == _tree(BUNDLED_LOGS)


def test_generator_writes_exactly_n_lines_deterministically(tmp_path: Path) -> None:
    gen = _generator()
    start = datetime(2026, 12, 1, tzinfo=UTC)
    assert gen.generate(tmp_path / "a", start, 3, 5000, 7) == 5000
    assert gen.generate(tmp_path / "b", start, 3, 5000, 7) == 5000
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    lines = [line for blob in _tree(tmp_path / "a").values() for line in blob.splitlines()]
    assert len(lines) == 5000


async def test_cost_follows_the_window_not_the_history(tmp_path: Path) -> None:
    gen = _generator()
    gen.generate(tmp_path, DAY - timedelta(days=2), 72, 60_000, 1)
    source = JsonlLogSource(tmp_path)
    q = _input(_at(13), _at(14), "order-service", contains="no such text")
    assert await _ready(LogsAdapter(source), q) == ([], False)
    hour_file = tmp_path / "order-service/2026-11-28/13.jsonl"
    assert source.stats.last_files == ("order-service/2026-11-28/13.jsonl",)
    assert source.stats.lines_read == len(hour_file.read_bytes().splitlines())
