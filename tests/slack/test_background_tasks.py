"""``sre_diag.aio``: a background loop whose client swallowed a cancellation still ends (the loops
check ``stopping()`` on each turn, as the product's do), and no stop waits longer than told."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sre_diag.aio import stop_task, stop_tasks, stopping


async def _client_call(seconds: float) -> None:
    """A call into a client that turns a cancellation into an ordinary error."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        raise ConnectionError("connection reset while cancelling") from None


def _loop(calls: list[int], call_seconds: float, pause: float) -> asyncio.Task[None]:
    async def loop() -> None:
        while not stopping():
            try:
                await _client_call(call_seconds)
            except Exception:
                pass  # one failed call never ends the loop
            calls.append(1)
            await asyncio.sleep(pause)

    return asyncio.create_task(loop(), name="diag-test-loop")


async def test_a_loop_that_swallowed_the_cancellation_is_stopped() -> None:
    calls: list[int] = []
    task = _loop(calls, call_seconds=10.0, pause=0.05)
    await asyncio.sleep(0.05)  # inside the client call
    assert await stop_task(task, 3.0)
    assert task.done() and calls == [1]  # it ended at its next turn, not after another call


async def test_several_loops_stop_within_one_bound() -> None:
    calls: list[int] = []
    tasks = [_loop(calls, call_seconds=0.01 * i, pause=0.0) for i in range(1, 6)]
    await asyncio.sleep(0.05)
    assert await stop_tasks(tasks, 3.0)
    assert all(t.done() for t in tasks)


async def test_a_task_that_never_ends_is_left_after_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="diag-stubborn")
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.ERROR, logger="sre_diag.aio"):
        assert not await stop_task(task, 0.6)
    assert loop.time() - started < 2.0
    assert "diag-stubborn" in caplog.text
    release.set()
    assert await stop_task(task, 2.0)


async def test_none_and_finished_tasks_are_stopped_already() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    assert await stop_task(None)
    assert await stop_task(task)  # its exception is retrieved, not reported at exit
