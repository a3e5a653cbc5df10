"""A large Loki label set still yields a catalogue: the label-values answer is read as a stream
in bounded memory (any size, any cut of its chunks, escapes included) and the first names
``query_logs`` accepts, in sorted order, are listed."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from sre_diag.tools.base import AdapterErrorCode
from sre_diag.tools.errors import LogSourceError
from sre_diag.tools.logs import LogsAdapter, LokiLogSource
from sre_diag.tools.logs.labels import MAX_VALUE_BYTES, LabelValues
from sre_diag.tools.schemas import SERVICE_NAME
from tests.tools.fake_loki import Reply, json_reply, start_fake_loki

MAX_SERVICES = 100


def _accept(value: str) -> bool:
    return SERVICE_NAME.fullmatch(value) is not None


def _values(count: int, rng: random.Random) -> list[str]:
    names = [f"svc-{rng.randrange(10**9):09d}-{'x' * rng.randrange(300)}" for _ in range(count)]
    # Names query_logs refuses (too long, spaces, escapes) among them, some sorting first.
    names += ["a bad name", "0" * 101, 'quote"and\\slash', "\u00e9t\u00e9", "\n", ""]
    rng.shuffle(names)
    return names


def _read(body: bytes, cuts: list[int]) -> list[str]:
    reader = LabelValues(MAX_SERVICES, _accept)
    at = 0
    for cut in [*cuts, len(body)]:
        reader.feed(body[at:cut])
        at = cut
    return reader.result()


def _expected(values: list[str]) -> list[str]:
    return sorted({v for v in values if _accept(v)})[:MAX_SERVICES]


def test_any_cut_of_the_answer_reads_the_same() -> None:
    rng = random.Random(7)
    values = _values(500, rng)
    for ascii_only in (True, False):
        body = json.dumps(
            {"status": "success", "data": values, "extra": {"data": ["zz"]}},
            ensure_ascii=ascii_only,
        ).encode()
        for _ in range(30):
            cuts = sorted(rng.sample(range(1, len(body)), rng.randrange(1, 200)))
            assert _read(body, cuts) == _expected(values)
        assert _read(body, list(range(1, len(body)))) == _expected(values)  # a byte at a time


def test_keys_in_any_order_and_whitespace() -> None:
    body = b'  {\n "data" : [ "b" ,\t"a" ] , "status" : "success" }  '
    assert _read(body, [3, 9, 20]) == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"status": "error", "data": ["a"]}',
        b'{"status": "success"}',
        b'{"status": "success", "data": {"a": 1}}',
        b'{"status": "success", "data": ["a", 1]}',
        b'{"status": "success", "data": ["a"',
        b'{"status": "success", "data": ["a\\q"]}',
        b'["a"]',
        b'{"status": "success", "data": ["a"]]}',
    ],
)
def test_what_is_not_a_label_values_answer_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        _read(body, [len(body) // 2])


def test_memory_is_bounded_by_what_is_kept() -> None:
    huge = "y" * (10 * MAX_VALUE_BYTES)
    values = [f"svc-{n:07d}" for n in range(40_000)] + [huge] * 200
    body = json.dumps({"status": "success", "data": values}).encode()  # ~2.5 MB
    tracemalloc.start()
    try:
        reader = LabelValues(MAX_SERVICES, _accept)
        for at in range(0, len(body), 64 * 1024):
            reader.feed(body[at : at + 64 * 1024])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.result() == values[:MAX_SERVICES]
    assert peak < 400_000, peak  # the 64 KB chunk, a value, the kept names: not the answer


async def test_a_3000_value_answer_of_over_a_megabyte_yields_a_catalogue() -> None:
    rng = random.Random(3)
    # 3,000 values: names query_logs accepts, and long generated ones (pod templates) it refuses.
    names = [f"team-{n:04d}-{'service' * 50}"[:100] for n in range(1500)]
    values = names + [f"{n:04d}-{'template' * 87}" for n in range(1500)]
    rng.shuffle(values)
    body = json.dumps({"status": "success", "data": values}).encode()
    assert len(body) > 1_200_000
    async with start_fake_loki() as loki:
        loki.labels = lambda: Reply(200, body)
        source = LokiLogSource(loki.url, timeout_seconds=10)
        try:
            found = await LogsAdapter(source).catalogue(MAX_SERVICES)
        finally:
            await source.aclose()
    # One more than the catalogue shows: the caller's sign that the list was cut.
    assert found == sorted(names)[: MAX_SERVICES + 1]


async def test_a_broken_answer_is_internal_not_a_crash() -> None:
    async with start_fake_loki() as loki:
        loki.labels = lambda: json_reply({"status": "success", "data": "nope"})
        source = LokiLogSource(loki.url, timeout_seconds=5)
        try:
            with pytest.raises(LogSourceError) as raised:
                await source.services(MAX_SERVICES)
        finally:
            await source.aclose()
    assert raised.value.code is AdapterErrorCode.INTERNAL
