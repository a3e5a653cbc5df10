"""Issue 20: a Slack Web API read is bounded in time, however slowly the peer writes.

There is no clean seam for a byte cap in ``slack_sdk`` over aiohttp (README, Reliability: "What
is bounded where"); what bounds a read is the client's total timeout, which covers the body.
The peer is the fragmenting socket fake (``tests/tools/fake_loki.py``) answering every Web API
method: a normal answer in small chunked gzip writes is read whole; a trickled or endless one
ends at the timeout, well before it could be read.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from tests.tools.fake_loki import FakeLoki, Reply, Wire, json_reply, start_fake_loki

LIVENESS_SECONDS = 20.0


@dataclass
class FakeSlackApi(FakeLoki):
    """Every path answers ``{"ok": true, …}`` (a big ``messages`` list when asked)."""

    filler: int = 10

    def answer(self, path: str, query: dict[str, str]) -> Reply:
        messages = [{"ts": f"1.{n}", "text": "x" * 200} for n in range(self.filler)]
        return json_reply({"ok": True, "channel": "C1", "ts": "1.1", "messages": messages})


def test_the_clients_default_total_timeout_is_what_the_readme_says() -> None:
    assert AsyncWebClient(token="xoxb-test").timeout == 30


async def test_an_answer_in_small_chunked_gzip_writes_is_read_whole() -> None:
    async with start_fake_loki(FakeSlackApi(filler=200)) as fake:
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url, timeout=10)
        answer = await client.conversations_replies(channel="C1", ts="1.1")
    assert answer["ok"] is True and len(answer["messages"]) == 200
    assert len(json.dumps(answer.data)) > 40_000


SLOW = {
    "trickle": Wire(write_sizes=(1, 1), pause=0.05, pause_every=1),
    "endless": Wire(encoding=None, endless=True, write_sizes=(1, 64), pause=0.01),
}


@pytest.mark.parametrize("wire", SLOW.values(), ids=SLOW.keys())
async def test_a_slow_answer_ends_at_the_total_timeout(wire: Wire) -> None:
    async with start_fake_loki(FakeSlackApi(wire=wire, filler=200)) as fake:
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url, timeout=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(
                client.chat_postMessage(channel="C1", text="hi"), LIVENESS_SECONDS
            )
        assert loop.time() - started < LIVENESS_SECONDS / 2
