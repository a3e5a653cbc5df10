"""A queued run's thread lock outlives the front that queued it (real processes, real Redis).

A front queues a mention's run and dies (SIGKILL) while no worker has taken the job yet; a new
front starts. The run's thread lock lives only as long as someone renews it: the new front
adopts every job still in the stream and renews their locks, so a follow-up in that thread
long after the lock's own lifetime (the claim time plus 30 s) still meets the busy thread —
never a second run queued beside the first.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from redis.asyncio import Redis

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.slack.jobs import DEFAULT_STREAM
from sre_diag.slack.wording import BUSY
from tests.conftest import StartServer
from tests.slack.redis_server import own_redis
from tests.slack.serve_support import (
    ServeProcess,
    free_port,
    mention_body,
    post_signed,
    serve_env,
    wait_status,
)
from tests.slack.support import MANIFEST_SCOPES

CLAIM = 3.0
LOCK_LIFETIME = CLAIM + 30.0  # the queued lock's TTL: claim time + the lease TTL


async def _front(env: dict[str, str], tmp_path: Path) -> tuple[ServeProcess, int]:
    port = free_port()
    front = await ServeProcess.start(env, tmp_path, http=True, port=port, extra=["--workers", "0"])
    await wait_status(f"http://127.0.0.1:{port}/readyz", 200)
    return front, port


async def _until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    for _ in range(int(within / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {within} s: {what}")


async def _until_queued(redis: Redis, count: int) -> None:
    async def queued() -> bool:
        return int(await redis.xlen(DEFAULT_STREAM)) >= count

    await _until(queued, f"{count} queued")


async def _until_replied(slack: RecordingSlackApi, thread: str, text: str) -> None:
    async def replied() -> bool:
        return any(m.get("thread_ts") == thread and m.get("text") == text for m in slack.messages)

    await _until(replied, f"{text!r} in the thread")


async def test_a_restarted_front_keeps_a_backlog_s_threads_busy(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])  # no worker runs: the job waits in the stream
    thread = "1764300000.002001"
    async with own_redis(tmp_path) as server, RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        env = serve_env(
            tmp_path,
            DIAG_SLACK_API_URL=slack.base_url,
            OPENAI_BASE_URL=model.base_url,
            DIAG_REDIS_URL=server.url,
            DIAG_JOB_CLAIM_SECONDS=str(CLAIM),
        )
        redis = server.client()
        try:
            queued = await _restart_with_backlog(env, tmp_path, redis, slack, thread)
        finally:
            await redis.aclose()
    assert queued == 1  # no second run in the busy thread
    replies = [m["text"] for m in slack.messages if m.get("thread_ts") == thread]
    assert BUSY in replies


async def _restart_with_backlog(
    env: dict[str, str], tmp_path: Path, redis: Redis, slack: RecordingSlackApi, thread: str
) -> int:
    first, port = await _front(env, tmp_path)
    try:
        assert await post_signed(port, mention_body("EvBACK0001", thread)) == 200
        await _until_queued(redis, 1)
        first.send(signal.SIGKILL)
        await first.wait_exit(30)
    finally:
        await first.aclose()
    second, port = await _front(env, tmp_path)
    try:
        await second.wait_for_log("adopted 1 queued runs", within=30)
        await asyncio.sleep(LOCK_LIFETIME + 3.0)  # the lock would have expired by now
        follow_up = mention_body("EvBACK0002", "1764300000.002002")
        follow_up["event"]["thread_ts"] = thread
        assert await post_signed(port, follow_up) == 200
        await _until_replied(slack, thread, BUSY)
        return int(await redis.xlen(DEFAULT_STREAM))
    finally:
        second.send(signal.SIGTERM)
        await second.wait_exit(60)
        await second.aclose()
