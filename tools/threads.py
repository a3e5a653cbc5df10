"""CPU-heavy evidence work (scans, parsing, masking) in a worker thread that can be stopped.

``asyncio.to_thread`` alone keeps the event loop free, but cancelling the awaiting coroutine
(the run's deadline, a Cancel) leaves the thread running to its end: a core stays busy and the
process cannot exit. :func:`in_thread` hands the function a :class:`Stop` and sets it when the
await is cancelled; the function calls :meth:`Stop.check` once per batch (a file block, a few
dozen pattern keys), so it ends within one batch of the cancellation. A :class:`Stop` may also
carry a time budget of its own, after which :meth:`Stop.check` raises :class:`OutOfTime`
(the caller turns that into ``TIMEOUT`` or an ``exact: false`` summary).

Exceptions::

    Stopped            the awaiting coroutine was cancelled: nobody waits for the answer
    └── OutOfTime      the call's own time budget ran out
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from sre_diag.tools.errors import OutOfTime, Stopped

__all__ = ["NEVER", "OutOfTime", "Stop", "Stopped", "in_thread"]

P = ParamSpec("P")
T = TypeVar("T")


class Stop:
    """A stop flag and an optional monotonic time budget, checked by the worker per batch."""

    __slots__ = ("_clock", "_event", "_until")

    def __init__(
        self, budget_seconds: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._event = threading.Event()
        self._clock = clock
        self._until = None if budget_seconds is None else clock() + budget_seconds

    def with_budget(self, seconds: float) -> Stop:
        """A stop set together with this one, with a budget of ``seconds`` from now (the
        sooner of the two ends it)."""
        child = Stop(seconds, self._clock)
        child._event = self._event
        if self._until is not None and child._until is not None:
            child._until = min(child._until, self._until)
        return child

    def set(self) -> None:
        """Ask the worker to stop at its next check."""
        self._event.set()

    @property
    def requested(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._event.is_set()

    def out_of_time(self) -> bool:
        """Whether the time budget (if any) is spent."""
        return self._until is not None and self._clock() >= self._until

    def left(self) -> float:
        """Seconds of the budget left (``inf`` without one)."""
        return float("inf") if self._until is None else self._until - self._clock()

    def check(self) -> None:
        """Raise :class:`Stopped` once stopping was asked, :class:`OutOfTime` past the budget."""
        if self._event.is_set():
            raise Stopped
        if self.out_of_time():
            raise OutOfTime


NEVER = Stop()
"""A stop that is never set and has no budget (pure callers and tests)."""


async def in_thread(
    fn: Callable[Concatenate[Stop, P], T],
    stop: Stop | None = None,
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``fn(stop, *args, **kwargs)`` in a worker thread; cancelling the await sets ``stop``."""
    flag = stop if stop is not None else Stop()
    try:
        return await asyncio.to_thread(fn, flag, *args, **kwargs)
    except asyncio.CancelledError:
        flag.set()
        raise
