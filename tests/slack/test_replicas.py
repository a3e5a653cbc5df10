"""Two replicas serving one Slack app share event dedupe, thread locks and cancels via Redis."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from redis.asyncio import Redis

import plugin
from plugin.slack.state import MemoryState, RedisState
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step
from tests.slack.support import slack_rig

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def redis_url() -> str:
    client: Redis = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    except Exception as exc:  # the machine provides Redis; a missing one must fail, not skip
        pytest.fail(f"Redis not reachable at {REDIS_URL}: {type(exc).__name__}", pytrace=False)
    finally:
        await client.aclose()
    return REDIS_URL


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_state_operations(kind: str, redis_url: str) -> None:
    state = MemoryState() if kind == "memory" else RedisState(redis_url)
    event, thread, run = (uuid.uuid4().hex for _ in range(3))
    try:
        assert await state.claim_event(event, 60) is True
        assert await state.claim_event(event, 60) is False
        assert await state.claim_thread(thread, "run-a", 60) is True
        assert await state.claim_thread(thread, "run-b", 60) is False
        await state.release_thread(thread, "run-b")  # not the owner: no effect
        assert await state.claim_thread(thread, "run-b", 60) is False
        await state.release_thread(thread, "run-a")
        assert await state.claim_thread(thread, "run-b", 60) is True
        assert await state.cancel_requested(run) is False
        await state.request_cancel(run, 60)
        assert await state.cancel_requested(run) is True
        assert await state.claim_event(f"{event}-short", 0.05) is True
        await asyncio.sleep(0.1)
        assert await state.claim_event(f"{event}-short", 0.05) is True  # expired
    finally:
        await state.aclose()


async def test_two_replicas_run_a_duplicated_event_once(
    model_server: StartServer, tmp_path: Path, redis_url: str
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    event_id = f"EvREPL{uuid.uuid4().hex[:8].upper()}"
    async with (
        slack_rig(model, tmp_path / "a", DIAG_REDIS_URL=redis_url) as first,
        slack_rig(model, tmp_path / "b", DIAG_REDIS_URL=redis_url) as second,
    ):
        text = "<@UDIAG0001> payment-api 5xx since 10:05"
        await first.mention(text, event_id=event_id)
        await second.mention(text, event_id=event_id)
        await first.handle.manager.wait_idle()
        await second.handle.manager.wait_idle()
        assert model.request_count == 1
        assert [r.value for r in second.handle.listeners.ignored] == ["DUPLICATE_EVENT"]


def test_plugin_register_is_the_slack_register() -> None:
    from plugin.slack import register

    assert plugin.register is register
