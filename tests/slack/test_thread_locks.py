"""Thread locks live as long as their run: renewed while queued and running (a run queued many
TTLs long keeps its thread), released token-checked (a Redis pause during the release frees the
thread within seconds, an outage within one short TTL), scoped by app and workspace; Redis out
of reach gets a polite reply; ``replay`` with production settings never touches that Redis.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from sre_diag.commands.replay import replay_envelope
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.state import DEFAULT_NAMESPACE
from sre_diag.slack.wording import BUSY, UNAVAILABLE
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step, settings_for
from tests.slack.support import (
    ADMIN,
    APP_ID,
    TEAM_ID,
    SlackRig,
    TcpProxy,
    cancel_payload,
    closed_port,
    redis_url,
    require_redis,
    scoped_keys,
    scrub,
    slack_rig,
    unique_app_id,
)

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05 UTC"
NO_CONCLUSION = draft_json(conclusion=False)


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


def lock_key(app_id: str, thread_ts: str, team_id: str = TEAM_ID) -> str:
    return f"{DEFAULT_NAMESPACE}:thread:{app_id}:{team_id}:{ADMIN}:{thread_ts}"


def busy_replies(rig: SlackRig, thread_ts: str) -> int:
    return sum(BUSY in text for text in rig.thread_texts(thread_ts))


async def gone_after(admin: Redis, key: str, limit: float) -> float:
    """Seconds until ``key`` no longer exists (fails past ``limit``)."""
    start = time.monotonic()
    while await admin.exists(key):
        assert time.monotonic() - start < limit, f"{key} still held after {limit} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_run_queued_many_lock_ttls_keeps_its_thread(
    model_server: StartServer, tmp_path: Path, admin: Redis, app_id: str, kind: str
) -> None:
    ttl, blocked_for = 0.3, 1.5  # the second run waits five lock TTLs for the only slot
    model = await model_server(
        [ModelStep(content=NO_CONCLUSION, delay_seconds=blocked_for), final_step(NO_CONCLUSION)]
    )
    env = {"DIAG_REDIS_URL": redis_url()} if kind == "redis" else {}
    first, second = "1764300000.000501", "1764300000.000502"
    async with slack_rig(model, tmp_path, lock_ttl=ttl, DIAG_MAX_CONCURRENT_RUNS="1", **env) as rig:
        await rig.mention(QUESTION, ts=first, app_id=app_id)
        await model.wait_for_requests(1)
        await rig.mention(QUESTION, ts=second, app_id=app_id)  # queued behind the first
        token = None
        samples = 0
        started = time.monotonic()
        while time.monotonic() - started < blocked_for - 0.3:
            # Mentions into the queued run's thread never start a second run there.
            await rig.mention(QUESTION, thread_ts=second, app_id=app_id)
            if kind == "redis":
                held = await admin.get(lock_key(app_id, second))
                assert held is not None and held == (token or held)
                assert 0 < await admin.pttl(lock_key(app_id, second)) <= ttl * 1000
                token, samples = held, samples + 1
            await asyncio.sleep(0.1)
        assert rig.handle.manager.in_flight == 2
        await rig.handle.manager.wait_idle()
        assert model.request_count == 2 and len(rig.answers()) == 2
        assert busy_replies(rig, second) == 1
        if kind == "redis":
            assert samples >= 5
            left = await scoped_keys(admin, app_id)  # no lock, run record or notice survives
            assert all(":event:" in k for k in left)


async def test_redis_paused_during_release_frees_the_thread_within_seconds(
    model_server: StartServer, tmp_path: Path, admin: Redis, app_id: str
) -> None:
    model = await model_server(
        [ModelStep(content=NO_CONCLUSION, delay_seconds=0.3), final_step(NO_CONCLUSION)]
    )
    root = "1764300000.000601"
    key = lock_key(app_id, root)
    async with slack_rig(model, tmp_path, DIAG_REDIS_URL=redis_url()) as rig:
        await rig.mention(QUESTION, ts=root, app_id=app_id)
        await model.wait_for_requests(1)
        paused_at = time.monotonic()
        await admin.execute_command("CLIENT", "PAUSE", "3000", "WRITE")
        try:
            await rig.slack.wait_for_calls("chat.postMessage", 2)  # the status, then the answer
            answered = time.monotonic() - paused_at
            # While Redis is paused the lock is still there, with a TTL of seconds, not minutes.
            assert 0 < await admin.pttl(key) <= 30_000
            lifetime = await gone_after(admin, key, limit=10)
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        assert answered < 1.0 and answered + lifetime < 5.0, (answered, lifetime)
        print(f"lock gone {lifetime:.2f} s after the answer (Redis paused 3 s)")
        await rig.handle.manager.wait_idle()
        await rig.mention(QUESTION, thread_ts=root, app_id=app_id)  # the follow-up is served
        await rig.handle.manager.wait_idle()
        assert model.request_count == 2 and len(rig.answers()) == 2
        assert busy_replies(rig, root) == 0


async def test_redis_outage_leaves_the_thread_locked_at_most_one_ttl(
    model_server: StartServer, tmp_path: Path, admin: Redis, app_id: str
) -> None:
    ttl = 1.0
    model = await model_server([ModelStep(content=NO_CONCLUSION, delay_seconds=0.5)])
    proxy = await TcpProxy().start()
    root = "1764300000.000701"
    key = lock_key(app_id, root)
    async with slack_rig(model, tmp_path, lock_ttl=ttl, DIAG_REDIS_URL=proxy.url()) as rig:
        await rig.mention(QUESTION, ts=root, app_id=app_id)
        await model.wait_for_requests(1)
        assert await admin.exists(key)
        await proxy.cut()  # Redis unreachable from the bot: no renewal, no release
        cut_at = time.monotonic()
        lifetime = await gone_after(admin, key, limit=ttl + 0.5)
        await rig.handle.manager.wait_idle()
        assert len(rig.answers()) == 1  # the run still answered
    print(f"lock gone {lifetime:.2f} s after Redis became unreachable (TTL {ttl} s)")
    assert time.monotonic() - cut_at >= lifetime


async def test_redis_down_gets_a_polite_reply(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([])
    down = f"redis://127.0.0.1:{closed_port()}/0"
    async with slack_rig(model, tmp_path, DIAG_REDIS_URL=down) as rig:
        root = "1764300000.000801"
        response = await rig.mention(QUESTION, ts=root)
        in_thread = await rig.mention(QUESTION, thread_ts=root)
        await rig.handle.manager.wait_idle()
        assert (response.status, in_thread.status) == (200, 200)
        assert rig.thread_texts(root) == [UNAVAILABLE, UNAVAILABLE]
        assert model.request_count == 0 and rig.handle.manager.in_flight == 0
        # A Cancel click for a run this replica does not own cannot reach Redis: acked, logged.
        clicked = await rig.interact(cancel_payload("0123456789abcdef", ADMIN, APP_ID))
        assert clicked.status == 200


@pytest.mark.parametrize("shared_by", ["two apps", "two workspaces of one app"])
async def test_two_apps_sharing_one_redis_do_not_block_each_other(
    model_server: StartServer, tmp_path: Path, admin: Redis, app_id: str, shared_by: str
) -> None:
    model = await model_server(
        [ModelStep(content=NO_CONCLUSION, delay_seconds=0.5) for _ in range(2)]
    )
    other_app = unique_app_id()
    scopes = (
        [(app_id, TEAM_ID), (other_app, TEAM_ID)]
        if shared_by == "two apps"
        else [(app_id, TEAM_ID), (app_id, "T00000002")]
    )
    root = "1764300000.000901"  # the same channel and thread ts in both
    try:
        async with (
            slack_rig(model, tmp_path / "a", DIAG_REDIS_URL=redis_url()) as one,
            slack_rig(model, tmp_path / "b", DIAG_REDIS_URL=redis_url()) as two,
        ):
            for rig, (app, team) in zip((one, two), scopes, strict=True):
                await rig.mention(QUESTION, ts=root, app_id=app, team_id=team)
            await model.wait_for_requests(2)  # both run at once
            held = [await admin.get(lock_key(app, root, team)) for app, team in scopes]
            assert all(held) and held[0] != held[1]
            await one.handle.manager.wait_idle()
            await two.handle.manager.wait_idle()
            for rig in (one, two):
                assert len(rig.answers()) == 1 and busy_replies(rig, root) == 0
    finally:
        await scrub(admin, other_app)


async def test_replay_with_production_settings_leaves_redis_untouched(
    model_server: StartServer, tmp_path: Path, app_id: str
) -> None:
    db = 14  # a database of its own, so that the snapshot sees nothing but this test
    production = await require_redis(db)
    model = await model_server([final_step(NO_CONCLUSION)])
    root, event_id = "1764300000.001001", f"Ev{uuid.uuid4().hex[:10].upper()}"
    envelope = {
        "token": "legacy",
        "team_id": TEAM_ID,
        "api_app_id": app_id,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": {
            "type": "app_mention",
            "user": "UHUMAN01",
            "text": QUESTION,
            "ts": "1764300000.001002",
            "thread_ts": root,
            "channel": ADMIN,
            "event_ts": "1764300000.001002",
        },
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(envelope), encoding="utf-8")
    # The live run of that very thread holds its lock, and the live event was seen.
    live = {
        lock_key(app_id, root): "live-run-token",
        f"{DEFAULT_NAMESPACE}:event:{app_id}:{TEAM_ID}:{event_id}": "1",
    }
    try:
        for key, value in live.items():
            await production.set(key, value, px=120_000)
        before = await _snapshot(production)
        settings = settings_for(model, tmp_path, DIAG_REDIS_URL=redis_url(db))
        output = await replay_envelope(path, settings)
        after = await _snapshot(production)
    finally:
        await production.delete(*live)
        await production.aclose()
    assert output.result.outcome.value == "DRAFT"
    assert after == before and set(live) <= set(before)
    record = await _audit_record(tmp_path / "audit", output.result.run_id)
    assert record["session_id"] == f"replay:{ADMIN}:{root}"
    assert record["kind"] == "replay"


async def _snapshot(client: Redis) -> dict[str, Any]:
    keys = sorted([k async for k in client.scan_iter()])
    return {k: (await client.type(k), await client.dump(k)) for k in keys}


async def _audit_record(folder: Path, run_id: str) -> dict[str, Any]:
    """The run's audit record (written after the answer, so it may take a moment)."""
    for _ in range(500):
        record = _find_record(folder, run_id)
        if record is not None:
            return record
        await asyncio.sleep(0.02)
    raise AssertionError(f"no audit record for {run_id}")


def _find_record(folder: Path, run_id: str) -> dict[str, Any] | None:
    for path in folder.rglob("*.jsonl"):
        for line in path.read_text("utf-8").splitlines():
            record: dict[str, Any] = json.loads(line)
            if record.get("run_id") == run_id:
                return record
    return None
