"""The answer token is checked again right before each post of the answer.

An owner takes its run's answer, then stalls (a pause past the grace period: rendering, a rate
limit, SIGSTOP); a claimer takes the run over and answers it. When the owner wakes it must not
post: :meth:`RunFence.confirm` right before the post finds the token gone (one Redis step), so
the window in which both can post is the HTTP call itself. A confirm also restarts the owner's
``posting`` moment, so a claimer that comes during a slow post keeps waiting for it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.slack.delivery import Delivery, post_once
from sre_diag.slack.fence import RunFence, TakeoverVerdict, takeover
from tests.slack.redis_server import own_redis
from tests.slack.support import MANIFEST_SCOPES

KEY = "diag:jobs:fence:run-1"
GRACE = 0.5


def _message(run_id: str) -> dict[str, object]:
    return {
        "channel": "CADMIN0001",
        "thread_ts": "1764300000.000100",
        "text": f"answer of Run {run_id}",
        "metadata": {"event_type": "diag_turn", "event_payload": {"run_id": run_id}},
    }


async def test_a_stalled_owner_whose_answer_was_taken_over_posts_nothing(
    tmp_path: Path,
) -> None:
    async with own_redis(tmp_path) as server, RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        redis = server.client()
        await redis.hset(KEY, mapping={"n": 1, "holder": "1|owner"})
        owner = RunFence(redis, KEY, "1|owner", give_up_seconds=2.0)
        assert await owner.take_answer()
        await asyncio.sleep(GRACE + 0.2)  # the owner stalls past the grace period
        taken = await takeover(redis, KEY, "claimer", GRACE)
        assert taken.verdict is TakeoverVerdict.TAKEN and taken.stale
        client = AsyncWebClient(token="xoxb-1", base_url=slack.base_url)
        outcome = await post_once(
            client, "run-1", _message("run-1"), deadline=time.monotonic() + 5,
            confirm=owner.confirm,
        )  # fmt: skip
        assert outcome.delivery is Delivery.FENCED
        assert owner.lost and slack.calls_of("chat.postMessage") == []
        claimer = RunFence.holding(redis, KEY, taken.token, give_up_seconds=2.0)
        outcome = await post_once(
            client, "run-1", _message("run-1"), deadline=time.monotonic() + 5,
            confirm=claimer.confirm,
        )  # fmt: skip
        assert outcome.delivery is Delivery.POSTED
        assert len(slack.messages) == 1
        await redis.aclose()


async def test_a_confirm_restarts_the_grace_period_of_a_slow_post(tmp_path: Path) -> None:
    async with own_redis(tmp_path) as server:
        redis = server.client()
        await redis.hset(KEY, mapping={"n": 1, "holder": "1|owner"})
        owner = RunFence(redis, KEY, "1|owner", give_up_seconds=2.0)
        assert await owner.take_answer()
        await asyncio.sleep(GRACE + 0.2)
        assert await owner.confirm()  # about to post, after a long render
        waiting = await takeover(redis, KEY, "claimer", GRACE)
        assert waiting.verdict is TakeoverVerdict.WAIT
        await owner.answered()
        done = await takeover(redis, KEY, "claimer", GRACE)
        assert done.verdict is TakeoverVerdict.DONE
        assert await owner.confirm()  # posted already: still its own (a fallback after it)
        await redis.aclose()


async def test_a_fence_redis_lost_lets_its_owner_post(tmp_path: Path) -> None:
    async with own_redis(tmp_path) as server:
        redis = server.client()
        await redis.hset(KEY, mapping={"n": 1, "holder": "1|owner"})
        owner = RunFence(redis, KEY, "1|owner", give_up_seconds=2.0)
        assert await owner.take_answer()
        await redis.delete(KEY)  # a restart without persistence: nobody took over
        assert await owner.confirm()
        await redis.aclose()
