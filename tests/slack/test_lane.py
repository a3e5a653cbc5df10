"""One outbound lane per channel: a final answer waiting for the channel's budget goes first.

Against the Slack double rate-limiting like Slack (``chat.postMessage`` about one a second per
channel, a 429 with ``Retry-After``), a storm in one channel — a run's status message updated
many times a second, an alert pointer edited with its count, new patterns' pointer posts — runs
while a final answer is pending after a 429: nothing of the storm is accepted into the channel
until the answer is, and once it is, the latest status and the pointer's final count land.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.doubles.recording_slack import (
    SLACK_LIMITS,
    Limit,
    RateLimits,
    RecordedCall,
    RecordingSlackApi,
)
from sre_diag.slack.blocks import StatusView, render_status
from sre_diag.slack.delivery import Delivery, post_once
from sre_diag.slack.lane import Lanes, NotSent, Priority, workspace_of
from sre_diag.slack.pointers import Pointer, PointerBoard
from sre_diag.slack.posting import post_status, update
from sre_diag.slack.progress import ProgressTracker, StatusBoard
from sre_diag.slack.run_request import RunRequest
from sre_diag.slack.state import MemoryState, PointerNote
from tests.slack.support import ADMIN, FAST_STATUS, MANIFEST_SCOPES

ROOT = "1764300000.000100"
ALERT = "1764300000.000200"
RETRY_AFTER = 2
IN_FLIGHT = 0.5
"""A call the lane let go just before the answer's first attempt may reach Slack just after it."""

# Slack's per-channel post limit; chat.update generous, so only the channel's budget and the
# lane's order decide what goes when.
LIMITS = RateLimits(
    post_per_channel=SLACK_LIMITS.post_per_channel,
    tiers={**SLACK_LIMITS.tiers, "chat.update": Limit(6000, 100)},
)


def is_answer(params: dict[str, Any]) -> bool:
    return "metadata" in params


def _answer(run_id: str) -> dict[str, Any]:
    return {
        "channel": ADMIN,
        "thread_ts": ROOT,
        "text": f"answer of Run {run_id}",
        "metadata": {"event_type": "diag_turn", "event_payload": {"run_id": run_id}},
    }


def _accepted(slack: RecordingSlackApi) -> list[RecordedCall]:
    """Calls into the channel that Slack acted on (not rate-limited, not a scripted 429)."""
    refused = {id(r.call) for r in slack.refusals}
    return [
        c
        for c in slack.calls
        if c.method in {"chat.postMessage", "chat.update"}
        and c.params.get("channel") == ADMIN
        and id(c) not in refused
    ]


def _pointer_text(prefix: str) -> Callable[[PointerNote], Awaitable[str]]:
    async def text(note: PointerNote) -> str:
        return f"{prefix}: {note.count} alerts"

    return text


async def _status_storm(tracker: ProgressTracker, stop: asyncio.Event) -> None:
    while not stop.is_set():
        tracker.update(state="RUNNING", checks_done=tracker.view.checks_done + 1)
        await asyncio.sleep(0.02)


async def _alert_storm(board: PointerBoard, client: AsyncWebClient, stop: asyncio.Event) -> int:
    """Alerts of one pattern (one pointer, edited) and now and then a new pattern (a post)."""
    main = Pointer("p:main", client, ADMIN, ALERT, 600.0)
    counted = 0
    while not stop.is_set():
        await board.point(main, _pointer_text("main"))
        counted += 1
        if counted % 10 == 0:
            other = Pointer(f"p:{counted}", client, ADMIN, f"1764300001.{counted:06d}", 600.0)
            await board.point(other, _pointer_text(f"other {counted}"))
        await asyncio.sleep(0.03)
    return counted


async def _eventually(check: Callable[[], bool], seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never came")


async def test_a_pending_answer_goes_before_a_storm_and_the_storm_still_lands() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES, limits=LIMITS) as slack:
        client = AsyncWebClient(token="xoxb-lane-1", base_url=slack.base_url)
        thread = RunRequest(client, ADMIN, ROOT, query="")
        state = MemoryState()
        pointers = PointerBoard(state, update_every=0.2)
        status_board = StatusBoard(FAST_STATUS, interval_seconds=0.02)
        tracker = ProgressTracker(StatusView(run_key="run-2", state="QUEUED"), 0.02)
        status_ts = await post_status(thread, render_status(tracker.view))
        assert status_ts is not None

        async def publish(view: StatusView) -> None:
            await update(thread, status_ts, render_status(view))

        status_board.add(tracker, publish, workspace="T1")
        stop = asyncio.Event()
        storm = asyncio.gather(_status_storm(tracker, stop), _alert_storm(pointers, client, stop))
        await asyncio.sleep(1.0)  # the storm is under way: pointer posted, edits, updates
        slack.fail(
            "chat.postMessage", status=429, error="ratelimited", retry_after=RETRY_AFTER,
            match=is_answer,
        )  # fmt: skip
        outcome = await post_once(client, "run-1", _answer("run-1"), deadline=time.monotonic() + 30)
        await asyncio.sleep(1.0)  # the storm goes on after the answer
        stop.set()
        _, counted = await storm
        await tracker.finish("Done.")
        assert await status_board.flush(10.0)

        # Everything that matters lands: the pointer's final count, the latest status.
        def pointer_final() -> bool:
            return any(m.get("text") == f"main: {counted} alerts" for m in slack.messages)

        await _eventually(pointer_final)
        await pointers.aclose()
        await status_board.aclose()

    assert outcome.delivery is Delivery.POSTED
    answers = [c for c in slack.calls_of("chat.postMessage") if is_answer(c.params)]
    assert len([m for m in slack.messages if m.get("metadata")]) == 1  # stored once
    first, landed = answers[0].at, answers[-1].at  # the 429, ..., the post that was stored
    assert landed - first >= RETRY_AFTER - 0.1
    storm_calls = [c for c in _accepted(slack) if not is_answer(c.params)]
    during = [c.method for c in storm_calls if first + IN_FLIGHT < c.at < landed]
    assert during == []  # nothing of the storm was accepted while the answer waited
    after = [c for c in storm_calls if c.at > landed]
    assert len(after) >= 5  # the storm went on once the answer was in
    later = [c for c in _accepted(slack) if c.at > first + IN_FLIGHT]
    assert later[0] is answers[-1]  # the answer lands first
    status = [m for m in slack.messages if m["ts"] == status_ts]
    assert status[0]["text"] == render_status(tracker.view).text
    assert len([m for m in slack.messages if str(m.get("text")).startswith("main:")]) == 1


async def test_an_answer_waits_for_the_channel_budget_within_its_deadline_only() -> None:
    """The channel's posts are spent (a 429 held it): an answer whose deadline comes first is
    not sent at all (nothing reaches Slack); with time left it waits and goes first."""
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES, limits=SLACK_LIMITS) as slack:
        client = AsyncWebClient(token="xoxb-lane-2", base_url=slack.base_url)
        lanes = Lanes()
        lanes.hold(workspace_of(client), ADMIN, "chat.postMessage", 1.0)

        async def never() -> None:
            raise AssertionError("sent past its deadline")

        with pytest.raises(NotSent):
            await lanes.call(
                client, ADMIN, Priority.ANSWER, "chat.postMessage", never,
                deadline=time.monotonic() + 0.3,
            )  # fmt: skip
        sent: list[str] = []

        async def post() -> None:
            sent.append("answer")
            await client.chat_postMessage(channel=ADMIN, text="answer")

        started = time.monotonic()
        await lanes.call(
            client, ADMIN, Priority.ANSWER, "chat.postMessage", post,
            deadline=time.monotonic() + 5,
        )  # fmt: skip
        assert sent == ["answer"] and time.monotonic() - started >= 0.5
        assert len(slack.calls_of("chat.postMessage")) == 1


async def test_lower_value_waits_behind_higher_value_in_one_channel_only() -> None:
    """Pointers wait behind status work, status behind an answer being delivered; another
    channel is not held back."""
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        client = AsyncWebClient(token="xoxb-lane-3", base_url=slack.base_url)
        lanes = Lanes()
        order: list[str] = []

        def sender(name: str) -> Callable[[], Awaitable[None]]:
            async def send() -> None:
                order.append(name)

            return send

        async with lanes.answering(client, ADMIN):
            pointer = asyncio.create_task(
                lanes.call(client, ADMIN, Priority.POINTER, "chat.update", sender("pointer"))
            )
            status = asyncio.create_task(
                lanes.call(client, ADMIN, Priority.STATUS, "chat.update", sender("status"))
            )
            await lanes.call(client, "COTHER001", Priority.POINTER, "chat.update", sender("other"))
            await asyncio.sleep(0.2)
            assert order == ["other"]  # the answer's channel holds its lower-value work
            await lanes.call(client, ADMIN, Priority.ANSWER, "chat.postMessage", sender("answer"))
        await asyncio.gather(pointer, status)
        assert order == ["other", "answer", "status", "pointer"]
