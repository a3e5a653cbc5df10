"""The Loki probe of ``check`` inflates a compressed answer with a bounded output (in process,
against the fragmenting fake Loki): a compression bomb sent in one write is refused at the cap
without ever being inflated whole, whatever the encoding."""

from __future__ import annotations

import tracemalloc

import pytest

from sre_diag.tools.logs.probe import LOKI_BODY_BYTES, probe_loki
from tests.tools.fake_loki import Wire, json_reply, start_fake_loki, text_reply

BOMB_BYTES = 96 << 20  # 96 MB of JSON whitespace: ~96 KB gzip'd


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
async def test_a_bomb_in_one_write_never_inflates_past_the_cap(encoding: str) -> None:
    reply = text_reply('{"status":"success","data":[' + " " * BOMB_BYTES + "]}")
    async with start_fake_loki() as fake:
        fake.labels = lambda: reply
        fake.wire = Wire(encoding=encoding, write_sizes=(4 << 20, 4 << 20))
        tracemalloc.start()
        try:
            report = await probe_loki(fake.url.rstrip("/"), "service", None)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert f"answered more than {LOKI_BODY_BYTES} bytes" in report.detail
    # The fake's own encoded copy (~0.1 MB) and the capped body (1 MB) are in the peak; an
    # answer inflated whole before the cap was checked would be ~96 MB.
    assert peak < 16 << 20, peak


async def test_an_answer_within_the_cap_is_read_whole_in_one_write() -> None:
    services = [f"svc-{i}" for i in range(50)]
    async with start_fake_loki() as fake:
        fake.labels = lambda: json_reply({"status": "success", "data": services})
        fake.wire = Wire(write_sizes=(4 << 20, 4 << 20))
        report = await probe_loki(fake.url.rstrip("/"), "service", None)
    assert report.facts["services"] == services, report.detail
