"""Thread locks that live as long as their run needs them (issue 19), against a redis-server of
the test's own: a run queued longer than its lock's lifetime keeps its thread (the front renews
the locks of the runs it queued), and an in-process run keeps its thread through a Redis pause
longer than the lock's TTL (the renewal takes an expired lock again while the run lives).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.jobs import DEFAULT_STREAM, JobQueue
from sre_diag.slack.state import DEFAULT_NAMESPACE, connect_redis
from sre_diag.slack.wording import BUSY
from tests.conftest import StartServer
from tests.harness.support import draft_json
from tests.slack.redis_server import own_redis
from tests.slack.support import ADMIN, APP_ID, TEAM_ID, slack_rig

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05 UTC"


def _lock(thread_ts: str) -> str:
    return f"{DEFAULT_NAMESPACE}:thread:{APP_ID}:{TEAM_ID}:{ADMIN}:{thread_ts}"


async def test_a_run_queued_longer_than_its_lock_lifetime_keeps_its_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    # No worker takes the job: it waits in the queue for many lock lifetimes (claim time 0.4 s
    # + lease TTL 0.3 s). A follow-up mention in that thread is told "busy", once, and never
    # queues a second run.
    model = await model_server([])
    thread = "1764300000.001401"
    async with own_redis(tmp_path) as redis:
        queue = JobQueue(connect_redis(redis.url), DEFAULT_STREAM)
        admin = redis.client()
        try:
            async with slack_rig(
                model, tmp_path, lock_ttl=0.3, queue=queue,
                DIAG_REDIS_URL=redis.url, DIAG_JOB_CLAIM_SECONDS="0.4",
            ) as rig:  # fmt: skip
                await rig.mention(QUESTION, ts=thread)
                held = await admin.get(_lock(thread))
                assert held is not None
                waited = time.monotonic()
                while time.monotonic() - waited < 3.0:  # over four lock lifetimes
                    assert await admin.get(_lock(thread)) == held
                    await asyncio.sleep(0.1)
                for _ in range(3):
                    await rig.mention(QUESTION, thread_ts=thread)
                texts = rig.thread_texts(thread)
                assert await admin.xlen(DEFAULT_STREAM) == 1  # one job queued, ever
                assert sum(BUSY in t for t in texts) == 1, texts
                assert rig.handle.manager.pending is not None
                assert len(rig.handle.manager.pending) == 1
        finally:
            await admin.aclose()
            await queue.redis.aclose()


async def test_an_in_process_run_keeps_its_thread_through_a_redis_pause_longer_than_its_ttl(
    model_server: StartServer, tmp_path: Path
) -> None:
    # Several replicas share a Redis, no queue. Redis answers nobody for 1.5 s, five lock TTLs:
    # the lock expired meanwhile. The run still lives, so its renewal takes the thread again,
    # and a follow-up mention after the pause is told "busy" instead of starting a second run
    # (the scripted model would fail the test on that second run's request).
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=4.0)])
    thread = "1764300000.001501"
    async with own_redis(tmp_path) as redis:
        admin = redis.client()
        try:
            async with slack_rig(model, tmp_path, lock_ttl=0.3, DIAG_REDIS_URL=redis.url) as rig:
                await rig.mention(QUESTION, ts=thread)
                await model.wait_for_requests(1)
                held = await admin.get(_lock(thread))
                await redis.pause(1.5)
                await asyncio.sleep(1.6)
                # The pause is over; the first renewal (every 0.1 s) takes the lock again.
                back = time.monotonic()
                while await admin.get(_lock(thread)) != held:
                    assert time.monotonic() - back < 5, "the lock was never taken again"
                    await asyncio.sleep(0.05)
                await rig.mention(QUESTION, thread_ts=thread)
                await rig.handle.manager.wait_idle()
                texts = rig.thread_texts(thread)
                assert sum(BUSY in t for t in texts) == 1, texts
                assert len(rig.answers()) == 1
                assert model.request_count == 1
        finally:
            await admin.aclose()
