"""Queue manners: ``chat.update`` stays within Slack's Tier 3 (about 50 a minute per workspace)
however long the queue, every finished run still gets its final status; a busy thread gets one
"busy" reply per run, whichever replica hears the mentions.

The minute is scaled down to two seconds (the production budget of 40 plus a burst of 5 per
scaled minute, against Slack's 50) so the test runs in seconds; calls are counted where Slack
would count them, on arrival at the recording API, so the scheduling jitter of a busy event loop
is included (it compresses a 2 s window far more than a real minute). The token bucket itself is
checked on a fake clock at the production budget.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.progress import StatusBudget, TokenBucket
from sre_diag.slack.wording import BUSY
from tests.conftest import StartServer
from tests.harness.support import draft_json
from tests.slack.support import (
    FAST_STATUS,
    SlackRig,
    most_in_any_window,
    redis_url,
    require_redis,
    scrub,
    slack_rig,
    unique_app_id,
)

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05 UTC"
NO_CONCLUSION = draft_json(conclusion=False)
TIER_3 = 50
SCALED_MINUTE = 2.0
SCALED_BUDGET = StatusBudget(rate=40, per_seconds=SCALED_MINUTE, burst=5)


def test_token_bucket_keeps_every_minute_under_tier_3() -> None:
    now = [0.0]
    bucket = TokenBucket(StatusBudget(), clock=lambda: now[0])
    taken: list[float] = []
    while now[0] < 600:  # ten minutes of a caller that always wants to update
        if bucket.take():
            taken.append(now[0])
        now[0] += 0.01
    per_minute = most_in_any_window(taken, 60.0)
    print(f"production budget: at most {per_minute} chat.update in any minute")
    assert per_minute <= 45 < TIER_3
    assert len(taken) >= 10 * 40  # and the budget is spent, not wasted


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


async def _long_queue(
    model_server: StartServer, tmp_path: Path, budget: StatusBudget, runs: int
) -> SlackRig:
    model = await model_server(
        [ModelStep(content=NO_CONCLUSION, delay_seconds=0.05) for _ in range(runs)]
    )
    async with slack_rig(
        model, tmp_path, status_budget=budget, DIAG_MAX_CONCURRENT_RUNS="2"
    ) as rig:
        for n in range(runs):
            await rig.mention(QUESTION, ts=f"1764300000.{n:06d}")
        await rig.handle.manager.wait_idle()
        assert len(rig.answers()) == runs
    return rig


async def test_chat_update_stays_within_the_tier_with_a_long_queue(
    model_server: StartServer, tmp_path: Path
) -> None:
    runs = 100
    rig = await _long_queue(model_server, tmp_path / "budget", SCALED_BUDGET, runs)
    updates = rig.slack.calls_of("chat.update")
    per_minute = most_in_any_window([c.at for c in updates], SCALED_MINUTE)
    # Every status message still ended in its final state, without the Cancel button.
    last: dict[str, dict[str, Any]] = {}
    for update in updates:
        last[str(update.params["ts"])] = update.params
    finished = [p for p in last.values() if not any(b["type"] == "actions" for b in _blocks(p))]
    assert len(finished) == runs
    assert all(p["text"] == "Done: the diagnosis is posted below." for p in finished)
    # The same queue without the budget: what the tier would have had to absorb.
    unbudgeted = await _long_queue(model_server, tmp_path / "free", FAST_STATUS, runs)
    free = most_in_any_window(
        [c.at for c in unbudgeted.slack.calls_of("chat.update")], SCALED_MINUTE
    )
    print(
        f"{runs} queued runs: at most {per_minute} chat.update per scaled minute with the budget "
        f"({len(updates)} in all), {free} without"
    )
    assert per_minute < TIER_3 < free


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client = await require_redis()
    yield client
    await client.aclose()


@pytest.mark.parametrize("replicas", [1, 2])
async def test_one_busy_reply_per_thread_per_run(
    model_server: StartServer, tmp_path: Path, admin: Redis, replicas: int
) -> None:
    model = await model_server(
        [ModelStep(content=NO_CONCLUSION, delay_seconds=1.0) for _ in range(2)]
    )
    app_id = unique_app_id()
    env = {"DIAG_REDIS_URL": redis_url()} if replicas > 1 else {}
    root = "1764300000.000100"
    try:
        async with AsyncExitStack() as stack:
            rigs = [
                await stack.enter_async_context(slack_rig(model, tmp_path / str(n), **env))
                for n in range(replicas)
            ]
            busy: dict[int, int] = defaultdict(int)
            for run in (1, 2):
                where = {"ts": root} if run == 1 else {"thread_ts": root}
                await rigs[0].mention(QUESTION, app_id=app_id, **where)
                await model.wait_for_requests(run)
                for n in range(4):  # mentions into the busy thread, spread over the replicas
                    await rigs[n % replicas].mention(QUESTION, app_id=app_id, thread_ts=root)
                busy[run] = sum(
                    sum(BUSY in text for text in rig.thread_texts(root)) for rig in rigs
                ) - sum(busy.values())
                for rig in rigs:
                    await rig.handle.manager.wait_idle()
            assert dict(busy) == {1: 1, 2: 1}
            assert sum(len(rig.answers()) for rig in rigs) == 2
    finally:
        await scrub(admin, app_id)


def test_a_retry_after_holds_the_whole_budget() -> None:
    now = [0.0]
    bucket = TokenBucket(StatusBudget(), clock=lambda: now[0])
    bucket.hold(30)
    while not bucket.take():
        now[0] += 0.5
    assert now[0] >= 30  # not one call before Slack's Retry-After has passed


async def test_chat_update_rate_limited_past_the_retries_pauses_status_updates(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([ModelStep(content=NO_CONCLUSION, delay_seconds=0.3)])
    async with slack_rig(model, tmp_path) as rig:
        # The first status refresh meets 429 three times: the SDK's two retries give up.
        rig.slack.fail("chat.update", status=429, error="ratelimited", retry_after=0, times=3)
        await rig.mention(QUESTION)
        await rig.handle.manager.wait_idle()
        updates = rig.slack.calls_of("chat.update")
        assert len(rig.answers()) == 1
    refused, after = updates[:3], updates[3:]
    assert after and after[0].at - refused[-1].at >= 1.0  # the bucket honoured Retry-After
    assert after[-1].params["text"] == "Done: the diagnosis is posted below."
