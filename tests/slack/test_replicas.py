"""Two replicas serving one Slack app share event dedupe, thread locks and cancels via Redis; the
run's channel is checked on every replica, not only on the one that owns the run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

import sre_diag
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.state import Lease, MemoryState, RedisState, SharedState
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.support import (
    ADMIN,
    OTHER,
    SlackRig,
    cancel_payload,
    redis_url,
    require_redis,
    scoped_keys,
    scrub,
    slack_rig,
    unique_app_id,
)

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05"
SECOND_ADMIN = "CADMIN0003"


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client = await require_redis()
    yield client
    await client.aclose()


@pytest.fixture
def app_id() -> str:
    return unique_app_id()


@pytest.fixture(autouse=True)
async def _clean(admin: Redis, app_id: str) -> AsyncIterator[None]:
    yield
    await scrub(admin, app_id)


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_state_operations(kind: str, admin: Redis, app_id: str) -> None:
    state: SharedState = MemoryState() if kind == "memory" else RedisState(redis_url())
    scope = f"{app_id}:T1"
    thread = f"{scope}:{ADMIN}:1764300000.000001"
    a = Lease(thread, f"{scope}:run-a", ADMIN)
    b = Lease(thread, f"{scope}:run-b", ADMIN)
    try:
        assert await state.claim_event(f"{scope}:Ev1", 60) is True
        assert await state.claim_event(f"{scope}:Ev1", 60) is False
        assert await state.claim_thread(a, 60) is True
        assert await state.claim_thread(b, 60) is False
        assert await state.note_busy(thread) is True  # the first mention into a busy thread
        assert await state.note_busy(thread) is False  # told once per run
        await state.release_thread(b)  # not the owner: no effect
        assert await state.claim_thread(b, 60) is False
        assert await state.renew_threads([a, b], 60) == [b]  # b holds nothing
        # Cancel: only a live run, only from its own channel.
        assert await state.request_cancel(a.run_key, OTHER, 60) is False
        assert await state.cancel_requested(a.run_key) is False
        assert await state.request_cancel(a.run_key, ADMIN, 60) is True
        assert await state.cancel_requested(a.run_key) is True
        await state.release_thread(a)
        assert await state.request_cancel(a.run_key, ADMIN, 60) is False  # run gone
        assert await state.claim_thread(b, 60) is True
        assert await state.note_busy(thread) is True  # a new run: a new notice is due
        await state.release_thread(b)
        assert await state.claim_event(f"{scope}:Ev2", 0.05) is True
        await asyncio.sleep(0.1)
        assert await state.claim_event(f"{scope}:Ev2", 0.05) is True  # expired
        if kind == "redis":
            # Released leases leave no lock, run record or busy notice behind; every key
            # carries the app's scope (the scan matches only those).
            kinds = sorted(k.split(":")[1] for k in await scoped_keys(admin, app_id))
            assert kinds == ["cancel", "event", "event"]
    finally:
        await state.aclose()


async def test_two_replicas_run_a_duplicated_event_once(
    model_server: StartServer, tmp_path: Path, app_id: str
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    event_id = f"EvREPL{uuid.uuid4().hex[:8].upper()}"
    async with (
        slack_rig(model, tmp_path / "a", DIAG_REDIS_URL=redis_url()) as first,
        slack_rig(model, tmp_path / "b", DIAG_REDIS_URL=redis_url()) as second,
    ):
        await first.mention(QUESTION, event_id=event_id, app_id=app_id)
        await second.mention(QUESTION, event_id=event_id, app_id=app_id)
        await first.handle.manager.wait_idle()
        await second.handle.manager.wait_idle()
        assert model.request_count == 1
        assert [r.value for r in second.handle.listeners.ignored] == ["DUPLICATE_EVENT"]


async def _run_key(rig: SlackRig) -> str:
    for _ in range(200):
        for call_ in rig.slack.calls_of("chat.postMessage"):
            blocks = call_.params.get("blocks") or []
            for block in blocks:
                for element in block.get("elements", []) if block.get("type") == "actions" else []:
                    return str(element["value"])
        await asyncio.sleep(0.01)
    raise AssertionError("no status message with a Cancel button")


async def test_cancel_from_another_channel_is_refused_on_a_non_owning_replica(
    model_server: StartServer, tmp_path: Path, admin: Redis, app_id: str
) -> None:
    model = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            ModelStep(content="x", delay_seconds=30),
        ]
    )
    channels = f"{ADMIN},{SECOND_ADMIN}"
    env = {"DIAG_REDIS_URL": redis_url()}
    async with (
        slack_rig(model, tmp_path / "a", admin=channels, **env) as owner,
        slack_rig(model, tmp_path / "b", admin=channels, **env) as other,
    ):
        await owner.mention(QUESTION, app_id=app_id)
        run_key = await _run_key(owner)
        await model.wait_for_requests(2)
        # From another admin channel, and from a channel outside the admin list: the replica
        # that does not own the run refuses both, exactly as the owner would.
        for channel in (SECOND_ADMIN, OTHER):
            response = await other.interact(cancel_payload(run_key, channel, app_id))
            assert response.status == 200
        assert not [k for k in await scoped_keys(admin, app_id) if ":cancel:" in k]
        await asyncio.sleep(0.3)  # several cancel polls of the owner
        assert owner.handle.manager.in_flight == 1 and model.aborted == 0
        # Another app's button with the same run key cancels nothing either.
        await other.interact(cancel_payload(run_key, ADMIN, unique_app_id()))
        await asyncio.sleep(0.3)
        assert owner.handle.manager.in_flight == 1
        # From the run's own channel, on the non-owning replica: the owner stops the run.
        await other.interact(cancel_payload(run_key, ADMIN, app_id))
        await asyncio.wait_for(owner.handle.manager.wait_idle(), 10)
        result = owner.handle.manager.completed[-1]
        assert result.stop_reason is not None and result.stop_reason.value == "CANCELLED"
        assert model.aborted == 1


def test_plugin_register_is_the_slack_register() -> None:
    from sre_diag.slack import register

    assert sre_diag.register is register
