"""Stopping background tasks for good.

A background loop that talks to Redis or Slack catches ``Exception`` around each call so that
one failed call never ends it. A cancellation that lands inside such a client can come out as an
ordinary error (redis-py turns one that races its socket timeout into
``redis.exceptions.TimeoutError``): the loop swallows it and goes on, and a plain
``task.cancel(); await task`` then waits forever — a worker that never drains, a front that never
exits. So every such loop checks :func:`stopping` (a cancellation was requested, even one that
was swallowed) on each turn, and :func:`stop_task` repeats the cancellation until the task has
ended and never waits longer than it is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["shielded", "stop_task", "stop_tasks", "stopping"]

_log = logging.getLogger(__name__)

_RECANCEL_SECONDS = 0.25


def stopping() -> bool:
    """Whether the running task was asked to stop: a cancellation was requested and not taken
    back, even if a client caught it and raised something else."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_task(task: asyncio.Task[Any] | None, timeout_seconds: float = 5.0) -> bool:
    """Cancel ``task`` and wait until it ended, cancelling again every 0.25 s while it runs;
    at most ``timeout_seconds``. Whether it ended (a task left running is logged)."""
    if task is None:
        return True
    return await stop_tasks([task], timeout_seconds)


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], timeout_seconds: float = 5.0) -> bool:
    """:func:`stop_task` for several tasks at once, within one ``timeout_seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    running = {task for task in tasks if not task.done()}
    while running:
        for task in running:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            names = ", ".join(sorted(task.get_name() for task in running))
            _log.error("background task(s) still running after %g s: %s", timeout_seconds, names)
            return False
        _, pending = await asyncio.wait(running, timeout=min(_RECANCEL_SECONDS, left))
        running = set(pending)
    for task in tasks:
        if task.done() and not task.cancelled():
            with contextlib.suppress(BaseException):
                task.exception()  # retrieved: never "exception was never retrieved"
    return True


async def shielded(work: Coroutine[Any, Any, None]) -> None:
    """Finish ``work`` even if this task is being cancelled (shutdown): a run's thread is told
    and its lock released. Never raises: what ``work`` raises is retrieved and dropped."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except BaseException:
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
