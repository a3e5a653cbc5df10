"""``check`` reaching Loki over a real socket that answers like a real one (FAULTS.md, peers):
a fragmented, chunked, gzip answer is read whole; a trickle ends at the check's one bound; a
cut answer, an oversized one and a hostile label value each give a clear line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cli.test_check import _failed, run_check
from tests.tools.fake_loki import FakeLoki, Wire, json_reply, start_fake_loki, text_reply

SERVICES = [f"service-{i:03d}" for i in range(300)]


@pytest.fixture
async def fake() -> AsyncIterator[FakeLoki]:
    async with start_fake_loki() as served:
        served.labels = lambda: json_reply({"status": "success", "data": SERVICES})
        yield served


async def test_a_fragmented_chunked_gzip_answer_is_read_whole(
    tmp_path: Path, fake: FakeLoki
) -> None:
    fake.wire = Wire(write_sizes=(1, 30))
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    assert checked.code == 0, checked.out
    logs = checked.part("logs")
    assert logs["facts"]["services"] == SERVICES[:100]  # bounded like the catalogue
    assert fake.paths == ["/loki/api/v1/label/service/values"]


async def test_a_trickle_ends_at_the_one_bound(tmp_path: Path, fake: FakeLoki) -> None:
    fake.wire = Wire(write_sizes=(1, 2), pause=0.05, pause_every=1)
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    assert "no answer within 5 s" in _failed(checked, "logs")
    # Measured at the peer, from the connection's accept to its close: the check's one bound
    # (5 s), never the minute a trickle of this body would take (the process start aside).
    assert len(fake.connection_seconds) == 1 and fake.connection_seconds[0] < 5 + 1.5


async def test_a_reset_mid_body_is_a_clear_failure(tmp_path: Path, fake: FakeLoki) -> None:
    fake.wire = Wire(reset_after=100)
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    assert "unreachable" in _failed(checked, "logs")


async def test_an_oversized_answer_stops_at_the_cap(tmp_path: Path, fake: FakeLoki) -> None:
    fake.labels = lambda: json_reply({"status": "success", "data": ["x" * 1000] * 3000})
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    assert "answered more than 1048576 bytes" in _failed(checked, "logs")


async def test_hostile_label_values_are_cleaned_and_cut(tmp_path: Path, fake: FakeLoki) -> None:
    hostile = "evil\x1b[2J\u202e\n" + "y" * 5000
    fake.labels = lambda: json_reply({"status": "success", "data": [hostile, "payment-api"]})
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    services = checked.part("logs")["facts"]["services"]
    assert services[1] == "payment-api"
    assert len(services[0]) <= 100 and "\x1b" not in services[0] and "\u202e" not in services[0]
    assert "\x1b" not in checked.out


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compression_bomb_in_one_write_stops_at_the_cap(
    tmp_path: Path, fake: FakeLoki, encoding: str
) -> None:
    # 64 MB of JSON whitespace compress to ~64 KB, sent in ONE write: the answer is inflated
    # with a bounded output and refused at the 1 MB cap, never inflated whole first.
    padding = " " * (64 << 20)
    fake.labels = lambda: text_reply('{"status":"success","data":[' + padding + "]}")
    fake.wire = Wire(encoding=encoding, write_sizes=(1 << 20, 1 << 20))
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=fake.url)
    assert "answered more than 1048576 bytes" in _failed(checked, "logs")
