"""The recording Slack double misbehaves like Slack: per-channel and per-tier rate limits with
``Retry-After``, latency before and after a call takes effect, a 5xx after the message was
stored, and a dropped connection. The tests that rely on it must see the real peer's shape."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.doubles.recording_slack import SLACK_LIMITS, Limit, RateLimits, RecordingSlackApi
from tests.slack.support import MANIFEST_SCOPES


def _client(slack: RecordingSlackApi, timeout: int = 30) -> AsyncWebClient:
    return AsyncWebClient(
        token="xoxb-1", base_url=slack.base_url, timeout=timeout, retry_handlers=[]
    )


async def _post(client: AsyncWebClient, channel: str) -> int:
    try:
        await client.chat_postMessage(channel=channel, text="x")
    except SlackApiError as exc:
        assert exc.response["error"] == "ratelimited"
        return int(exc.response.headers["Retry-After"])
    return 0


async def test_posts_are_limited_per_channel_with_a_short_burst() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES, limits=SLACK_LIMITS) as slack:
        client = _client(slack)
        first = [await _post(client, "CSTORM001") for _ in range(6)]
        burst = SLACK_LIMITS.post_per_channel.burst
        assert first[:burst] == [0] * burst
        assert all(wait >= 1 for wait in first[burst:])
        # Another channel has its own budget.
        assert await _post(client, "COTHER002") == 0
        assert len(slack.messages) == burst + 1
        assert len(slack.refused("chat.postMessage")) == 6 - burst
        await asyncio.sleep(1.05)
        assert await _post(client, "CSTORM001") == 0


async def test_retry_after_tells_how_long_until_the_next_call_goes() -> None:
    limits = RateLimits(post_per_channel=Limit(60, 1), tiers={"chat.update": Limit(6, 1)})
    async with RecordingSlackApi(limits=limits) as slack:
        client = _client(slack)
        posted = await client.chat_postMessage(channel="C1", text="x")
        await client.chat_update(channel="C1", ts=posted["ts"], text="y")
        with pytest.raises(SlackApiError) as raised:
            await client.chat_update(channel="C1", ts=posted["ts"], text="z")
        assert raised.value.response.status_code == 429
        assert raised.value.response.headers["Retry-After"] == "10"  # one in 10 s
        assert slack.messages[0]["text"] == "y"


async def test_a_503_after_store_leaves_the_message_in_the_channel() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.fail("chat.postMessage", status=503, error="service_unavailable", after_store=True)
        slack.fail("chat.postMessage", status=503, error="service_unavailable")
        client = _client(slack)
        for _ in range(2):
            with pytest.raises(SlackApiError) as raised:
                await client.chat_postMessage(channel="C1", text="x")
            assert raised.value.response.status_code == 503
        assert len(slack.messages) == 1  # the first one was stored, the second not


async def test_a_dropped_connection_before_or_after_store() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.drop("chat.postMessage")
        slack.drop("chat.postMessage", after_store=False)
        client = _client(slack)
        for _ in range(2):
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await client.chat_postMessage(channel="C1", text="x")
        assert len(slack.messages) == 1
        await client.chat_postMessage(channel="C1", text="x")
        assert len(slack.messages) == 2


async def test_latency_before_store_and_delay_after_it() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.latency("chat.postMessage", 1.5, match=lambda p: p.get("text") == "slow")
        slack.delay("chat.postMessage", 2.0, match=lambda p: p.get("text") == "late")
        client = _client(slack, timeout=1)
        with pytest.raises(TimeoutError):
            await client.chat_postMessage(channel="C1", text="slow")
        assert slack.messages == []  # still waiting: not stored
        with pytest.raises(TimeoutError):
            await client.chat_postMessage(channel="C1", text="late")
        # "late" was stored at once, its answer never heard; "slow" once its latency passed
        # (a slow Slack still acts on a call whose caller gave up).
        assert [m["text"] for m in slack.messages] == ["late", "slow"]
        started = time.monotonic()
        await client.chat_postMessage(channel="C1", text="plain")
        assert time.monotonic() - started < 1


async def test_match_limits_a_fault_to_the_calls_it_accepts() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.fail("chat.postMessage", status=503, match=lambda p: "metadata" in p, times=2)
        client = _client(slack)
        await client.chat_postMessage(channel="C1", text="status")
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(
                channel="C1", text="answer", metadata={"event_type": "t", "event_payload": {}}
            )
        assert [m["text"] for m in slack.messages] == ["status"]
