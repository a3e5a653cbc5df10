"""The status tracker's Cancel poll always ends when its run does.

The poll asks the shared state (Redis) each second whether Cancel was pressed elsewhere. A
cancellation that lands inside the state's client can come out as an ordinary error (redis-py
turns a cancellation racing its socket timeout into ``redis.exceptions.TimeoutError``), which the
poll swallows so that one failed read never stops polling. ``finish`` must end the poll anyway:
a worker once waited for such a poll forever, held the job's slot and never drained.
"""

from __future__ import annotations

import asyncio

from sre_diag.slack.blocks import StatusView
from sre_diag.slack.progress import ProgressTracker


def _tracker(poll_seconds: float) -> tuple[ProgressTracker, list[str]]:
    calls: list[str] = []

    async def poll() -> bool:
        calls.append("poll")
        try:
            await asyncio.sleep(poll_seconds)
        except asyncio.CancelledError:
            raise ConnectionError("cancelled while reading") from None  # what the client did
        return False

    tracker = ProgressTracker(
        view=StatusView(run_key="k1", state="RUNNING"),
        interval_seconds=0.05,
        poll_cancel=poll,
        on_cancel_requested=lambda: calls.append("cancel"),
    )
    return tracker, calls


async def test_finish_ends_a_poll_whose_cancellation_was_swallowed() -> None:
    tracker, calls = _tracker(poll_seconds=0.5)
    tracker.start()
    for _ in range(100):  # until the poll is inside the state's client
        if calls:
            break
        await asyncio.sleep(0.01)
    assert calls == ["poll"]
    await asyncio.wait_for(tracker.finish("Done."), 2)
    assert tracker.view.state == "FINISHED"
    await asyncio.sleep(0.3)
    polls = len(calls)
    await asyncio.sleep(0.3)
    assert len(calls) == polls  # no poll after the run finished
    assert "cancel" not in calls


async def test_finish_between_polls_ends_it_at_once() -> None:
    tracker, calls = _tracker(poll_seconds=0.0)
    tracker.start()
    await asyncio.sleep(0.02)  # sleeping between polls
    await asyncio.wait_for(tracker.finish("Done."), 1)
    assert tracker.view.final_note == "Done."
    polls = len(calls)
    await asyncio.sleep(0.2)
    assert len(calls) == polls


async def test_a_cancel_seen_by_the_poll_is_passed_on() -> None:
    pressed: list[str] = []

    async def poll() -> bool:
        return True

    tracker = ProgressTracker(
        view=StatusView(run_key="k2", state="RUNNING"),
        interval_seconds=0.01,
        poll_cancel=poll,
        on_cancel_requested=lambda: pressed.append("cancel"),
    )
    tracker.start()
    await asyncio.sleep(0.1)
    assert pressed == ["cancel"]
    await asyncio.wait_for(tracker.finish("Cancelled."), 1)
