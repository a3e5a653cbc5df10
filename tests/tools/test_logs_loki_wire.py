"""The Loki source against answers as they come off a real network (FAULTS.md, peers).

The socket fake (``tests/tools/fake_loki.py``) writes every answer in pieces of 1–100 bytes,
chunked and gzip- or deflate-encoded, or trickles, resets, closes mid-body, never ends, never
answers. The promise: an answer parsed exactly as if it came in one piece, and every fault a
defined ``ERROR`` code (never ``INTERNAL``) within the source's timeout.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready
from sre_diag.tools.logs import LogsAdapter, LogSourceError, LokiLogSource
from sre_diag.tools.schemas import LogsInput
from tests.tools.fake_loki import ONE_PIECE, FakeLoki, Reply, Wire, json_reply, start_fake_loki
from tests.tools.test_logs import _line, _loki_body, _matrix_body

START = datetime(2026, 11, 28, 10, tzinfo=UTC)
END = START + timedelta(hours=1)
QUERY = LogsInput(service="payment-api", start=START, end=END, limit=20)
MESSAGES = (
    "db pool exhausted: timed out after {n}ms waiting for connection",
    "GET /v1/payments/{n} 200 in {n}ms",
    "retry {n} of 5 for order ord-{n} token=secret{n}",
    "支払い処理に失敗しました: 注文 {n} — ✓ é",
)
FAULT_BOUND_SECONDS = 2.0  # a fault ends within the source's timeout plus this


def _sample_body(lines: int) -> dict[str, object]:
    values = [
        (
            START + timedelta(seconds=7 * i),
            _line("x", MESSAGES[i % len(MESSAGES)].format(n=i * 37), "ERROR"),
        )
        for i in range(lines)
    ]
    return _loki_body([({"service": "payment-api"}, values)])


def _counts_body(total: int) -> dict[str, object]:
    return _matrix_body([(START.timestamp() + 60 * (i + 1), total // 60) for i in range(60)])


def _script(fake: FakeLoki, lines: int = 400) -> None:
    fake.reply = lambda: json_reply(_sample_body(lines))
    fake.counts = lambda query: json_reply(_counts_body(6000))
    fake.labels = lambda: json_reply(
        {"status": "success", "data": [f"svc-{i:04d}" for i in range(2000)]}
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeLoki]:
    async with start_fake_loki() as served:
        _script(served)
        yield served


async def _invoke(source: LokiLogSource, q: LogsInput = QUERY) -> object:
    try:
        return await LogsAdapter(source).invoke(AdapterCall("call-1", "run-1", q))
    finally:
        await source.aclose()


async def _one_piece_answer() -> tuple[object, list[str]]:
    async with start_fake_loki(FakeLoki(wire=ONE_PIECE)) as served:
        _script(served)
        source = LokiLogSource(served.url, timeout_seconds=10)
        services = await source.services(100)
        return await _invoke(source), services


WIRES = {
    "chunked-gzip-1-100": Wire(),
    "chunked-gzip-1-byte": Wire(write_sizes=(1, 1)),
    "chunked-deflate": Wire(encoding="deflate"),
    "length-raw-deflate": Wire(chunked=False, encoding="deflate-raw"),
    "chunked-plain": Wire(encoding=None),
    "length-gzip": Wire(chunked=False),
    "length-plain-fragmented": Wire(chunked=False, encoding=None, write_sizes=(1, 7)),
}


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_a_fragmented_encoded_answer_parses_as_one_piece(fake: FakeLoki, wire: Wire) -> None:
    expected, expected_services = await _one_piece_answer()
    assert isinstance(expected, Ready) and len(expected.items) == 20
    fake.wire = wire
    source = LokiLogSource(fake.url, timeout_seconds=30)
    services = await source.services(100)
    result = await _invoke(source)
    assert result == expected
    assert services == expected_services == [f"svc-{i:04d}" for i in range(100)]
    assert len(fake.count_requests) == 1 and len(fake.log_requests) == 1  # 400 lines < 500


async def test_the_answers_are_far_larger_than_one_read(fake: FakeLoki) -> None:
    """The test above proves something only if the body spans many socket reads."""
    body = json_reply(_sample_body(400)).body
    assert len(body) > 64 * 1024


def _assert_within(started: float, timeout: float) -> None:
    assert time.monotonic() - started < timeout + FAULT_BOUND_SECONDS


@pytest.mark.parametrize(
    "wire",
    [
        Wire(reset_after=3000),
        Wire(reset_after=0, encoding=None),
        Wire(close_after=3000),
        Wire(close_after=3000, chunked=False, encoding=None),
        Wire(close_after=10, chunked=False),
    ],
    ids=["reset-gzip", "reset-at-body-start", "close-chunked", "close-length", "close-in-gzip"],
)
async def test_a_connection_cut_mid_body_is_unavailable(fake: FakeLoki, wire: Wire) -> None:
    fake.wire = wire
    started = time.monotonic()
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=3))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)
    _assert_within(started, 3)


async def test_a_slow_trickle_times_out_within_the_bound(fake: FakeLoki) -> None:
    # 1–5 bytes every 20 ms: the 100 KB answer would take minutes; every read makes progress,
    # so only a total bound (not a per-read one) ends it.
    fake.wire = Wire(write_sizes=(1, 5), pause=0.02, pause_every=1)
    started = time.monotonic()
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=0.8))
    assert result == Failed(AdapterErrorCode.TIMEOUT)
    _assert_within(started, 0.8)


async def test_a_peer_that_never_answers_times_out(fake: FakeLoki) -> None:
    fake.wire = Wire(silent=True)
    started = time.monotonic()
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=0.5))
    assert result == Failed(AdapterErrorCode.TIMEOUT)
    _assert_within(started, 0.5)
    assert fake.connections >= 1  # it did accept


async def test_an_endless_body_stops_at_the_byte_cap(fake: FakeLoki) -> None:
    fake.wire = Wire(endless=True, encoding=None, write_sizes=(4096, 65536), pause=0.0)
    cap = 256 * 1024
    started = time.monotonic()
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=20, max_body_bytes=cap))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)
    _assert_within(started, 0)  # long before the 20 s timeout: the cap ended it
    assert fake.body_bytes_sent < 64 * cap  # reading stopped and the connection was dropped


@pytest.mark.parametrize(
    "wire", [Wire(), Wire(chunked=False, encoding=None)], ids=["chunked-gzip", "length"]
)
async def test_a_body_over_the_cap_is_unavailable_not_internal(fake: FakeLoki, wire: Wire) -> None:
    fake.wire = wire
    fake.reply = lambda: json_reply(_sample_body(50))
    size = len(json_reply(_sample_body(50)).body)
    result = await _invoke(LokiLogSource(fake.url, max_body_bytes=size - 1))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)
    result = await _invoke(LokiLogSource(fake.url, max_body_bytes=size))
    assert isinstance(result, Ready) and len(result.items) == 20


async def test_a_gzip_bomb_stops_at_the_decoded_cap(fake: FakeLoki) -> None:
    """64 MB of JSON whitespace gzip to ~64 KB on the wire; the cap counts decoded bytes."""
    bomb = b'{"status":"success","data":{"resultType":"streams","result":[' + b" " * (64 << 20)
    fake.reply = lambda: Reply(body=bomb)
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=20, max_body_bytes=1 << 20))
    assert result == Failed(AdapterErrorCode.UNAVAILABLE)


async def test_a_large_label_list_of_overlong_values_lists_none(fake: FakeLoki) -> None:
    # 2 MB of values no service name can be: read as a stream, none held, none listed.
    fake.labels = lambda: json_reply({"status": "success", "data": ["x" * 1000] * 2000})
    source = LokiLogSource(fake.url)
    assert await source.services(100) == []
    await source.aclose()


async def test_a_label_list_cut_mid_body_is_unavailable(fake: FakeLoki) -> None:
    fake.wire = Wire(reset_after=200)
    source = LokiLogSource(fake.url, timeout_seconds=3)
    with pytest.raises(LogSourceError) as caught:
        await source.services(100)
    await source.aclose()
    assert caught.value.code is AdapterErrorCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (
            Reply(429, b"too many outstanding requests", "text/plain", (("Retry-After", "1"),)),
            AdapterErrorCode.UNAVAILABLE,
        ),
        (Reply(429, b"slow down", "text/plain"), AdapterErrorCode.UNAVAILABLE),
        (
            Reply(502, b"<html>bad gateway password=hunter2</html>", "text/html"),
            AdapterErrorCode.UNAVAILABLE,
        ),
        (
            Reply(504, b"upstream timed out", "text/plain", (("Retry-After", "120"),)),
            AdapterErrorCode.UNAVAILABLE,
        ),
        (
            Reply(400, b"parse error at line 1, col 12: syntax error", "text/plain"),
            AdapterErrorCode.INVALID_INPUT,
        ),
    ],
    ids=["429-retry-after", "429", "502-html", "504-retry-after", "400"],
)
async def test_refusals_over_the_wire_are_defined_codes_and_never_retried(
    fake: FakeLoki, reply: Reply, code: AdapterErrorCode
) -> None:
    fake.reply = lambda: reply
    started = time.monotonic()
    result = await _invoke(LokiLogSource(fake.url, timeout_seconds=3))
    assert result == Failed(code)
    _assert_within(started, 0)  # answered at once: no wait for Retry-After, no retry
    assert len(fake.log_requests) == 1
