"""Live progress: a step hook that records each run's status, and one board that turns those
changes into ``chat.update`` calls within Slack's rate tier, however many runs are queued.

``chat.update`` is a Tier 3 method (about 50 calls a minute per workspace). Every status message
of this process shares one :class:`TokenBucket` per workspace; the :class:`StatusBoard` spends it
in this order: final states first (they remove the Cancel button), then alternately a running
run and a queued one, each round-robin, and never one message more often than its interval
(``interval_seconds`` while running, ``QUEUED_EVERY_TICKS`` times that while queued: a queue
position moves for every waiting run whenever a slot frees).

Each update takes its turn in its channel's lane (:mod:`sre_diag.slack.lane`): behind any
answer being delivered into the channel, ahead of alert pointers. An update Slack rate-limited
is sent again (its latest state) once the ``Retry-After`` passed; one Slack refused is not.

The hook itself only records state (model-round callbacks are synchronous). Cancel requests
made on other replicas are polled by a small task per run when the state is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from slack_sdk.errors import SlackApiError

from sre_diag.aio import stop_task, stopping
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import Invocation
from sre_diag.harness.state import ModelRound, RunState
from sre_diag.log import log_failure
from sre_diag.slack.blocks import StatusView
from sre_diag.tools.base import ToolName

__all__ = ["QUEUED_EVERY_TICKS", "ProgressTracker", "StatusBoard", "StatusBudget", "TokenBucket"]

QUEUED_EVERY_TICKS = 10

_log = logging.getLogger(__name__)

Clock = Callable[[], float]
Publish = Callable[[StatusView], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class StatusBudget:
    """``chat.update`` calls allowed per workspace: ``rate`` each ``per_seconds``, plus a saved
    ``burst``. Any window of ``per_seconds`` sees at most ``rate + burst`` calls: the defaults
    keep every minute at 45 or fewer, under Tier 3's 50."""

    rate: float = 40.0
    """Calls refilled each ``per_seconds``."""
    per_seconds: float = 60.0
    """The window the rate is given for (Slack's tiers are per minute)."""
    burst: int = 5
    """Calls that may be saved up while idle and spent at once."""


class TokenBucket:
    """A token bucket on an injectable clock."""

    def __init__(self, budget: StatusBudget, clock: Clock = time.monotonic) -> None:
        self._per_second = budget.rate / budget.per_seconds
        self._capacity = float(budget.burst)
        self._tokens = float(budget.burst)
        self._clock = clock
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._per_second)
        self._at = now

    def wait_seconds(self) -> float:
        """0 when a call may be made now, else how long until one may."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self._per_second

    def take(self) -> bool:
        """Spend one call if one is available."""
        if self.wait_seconds() > 0:
            return False
        self._tokens -= 1
        return True

    def hold(self, seconds: float) -> None:
        """Slack said "rate limited, retry after ``seconds``": no call before then."""
        self._refill()
        self._tokens = min(self._tokens, 0.0) - seconds * self._per_second


@dataclass
class ProgressTracker(StepHook):
    """Collects progress from the run; the board publishes it."""

    view: StatusView
    interval_seconds: float = 1.0
    poll_cancel: Callable[[], Awaitable[bool]] | None = None
    on_cancel_requested: Callable[[], None] | None = None
    on_change: Callable[[], None] | None = None
    version: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def update(self, **changes: object) -> None:
        self.view = replace(self.view, **changes)  # type: ignore[arg-type]
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    # -- StepHook --------------------------------------------------------------------------

    def on_model_round(self, ctx: RunState, model_round: ModelRound) -> None:
        self.update(state="RUNNING", rounds_used=model_round.index, current_check=None)

    def on_tool_started(self, ctx: RunState, tool: ToolName, scope: str) -> None:
        self.update(state="RUNNING", current_check=f"{tool.value} · {scope}")

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        if invocation.executed():  # the check in flight is done: the status stops naming it
            self.update(checks_done=self.view.checks_done + 1, current_check=None)

    # -- cancel polling ----------------------------------------------------------------------

    def start(self) -> None:
        if self.poll_cancel is not None and self.on_cancel_requested is not None:
            self._task = asyncio.create_task(self._poll(self.poll_cancel, self.on_cancel_requested))

    async def _poll(self, poll: Callable[[], Awaitable[bool]], cancel: Callable[[], None]) -> None:
        while not stopping():
            await asyncio.sleep(self.interval_seconds)
            with contextlib.suppress(Exception):
                if await poll():
                    cancel()
                    return

    async def finish(self, note: str) -> None:
        """Stop polling and record the final state (no Cancel button); the board posts it.

        A cancellation that lands inside the shared state's client can come out as an ordinary
        error, which the poll swallows; it still ends at its next turn (``stopping()``), and
        this waits at most two intervals for it."""
        task, self._task = self._task, None
        await stop_task(task, 2 * self.interval_seconds + 1.0)
        self.update(state="FINISHED", final_note=note, current_check=None)


@dataclass(eq=False)
class _Entry:
    tracker: ProgressTracker
    publish: Publish
    workspace: str
    published: int = -1
    next_at: float = 0.0
    inflight: bool = False

    @property
    def final(self) -> bool:
        return self.tracker.view.state == "FINISHED"

    @property
    def dirty(self) -> bool:
        return not self.inflight and self.published != self.tracker.version


class StatusBoard:
    """Every status message of this process, refreshed under one budget per workspace."""

    def __init__(
        self,
        budget: StatusBudget | None = None,
        *,
        interval_seconds: float = 1.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.budget = budget or StatusBudget()
        self._interval = interval_seconds
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._entries: dict[int, _Entry] = {}
        self._running: deque[_Entry] = deque()
        self._queued: deque[_Entry] = deque()
        self._running_turn = True
        self._wake = asyncio.Event()
        self._settled = asyncio.Condition()
        self._pump: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()

    def add(self, tracker: ProgressTracker, publish: Publish, workspace: str) -> None:
        """Keep ``tracker``'s status message current from now on (until its final state)."""
        entry = _Entry(tracker, publish, workspace, published=tracker.version)
        self._entries[id(tracker)] = entry
        tracker.on_change = self._wake.set
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run(), name="diag-status-board")

    def _bucket(self, workspace: str) -> TokenBucket:
        bucket = self._buckets.get(workspace)
        if bucket is None:
            bucket = self._buckets[workspace] = TokenBucket(self.budget, self._clock)
        return bucket

    # -- choosing the next update ------------------------------------------------------------

    def _candidates(self) -> list[_Entry]:
        """Entries in the order the budget is spent: finals, then running/queued alternately."""
        self._running = deque(e for e in self._running if e.tracker.view.state == "RUNNING")
        self._queued = deque(e for e in self._queued if e.tracker.view.state == "QUEUED")
        known = {id(e) for e in (*self._running, *self._queued)}
        for entry in self._entries.values():
            if id(entry) not in known:
                ring = self._running if entry.tracker.view.state == "RUNNING" else self._queued
                if not entry.final:
                    ring.append(entry)
        finals = [e for e in self._entries.values() if e.final]
        first, second = (
            (self._running, self._queued) if self._running_turn else (self._queued, self._running)
        )
        return [*finals, *first, *second]

    def _due_in(self, entry: _Entry, now: float) -> float | None:
        """None when nothing is to be sent; else seconds until it may be."""
        if not entry.dirty:
            return None
        wait = 0.0 if entry.final else max(0.0, entry.next_at - now)
        return max(wait, self._bucket(entry.workspace).wait_seconds())

    def _choose(self) -> tuple[_Entry | None, float | None]:
        now = self._clock()
        soonest: float | None = None
        for entry in self._candidates():
            due = self._due_in(entry, now)
            if due is None:
                continue
            if due <= 0 and self._bucket(entry.workspace).take():
                return entry, None
            soonest = due if soonest is None else min(soonest, due)
        return None, soonest

    # -- the pump ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while self._entries:
            self._wake.clear()
            entry, wait = self._choose()
            if entry is not None:
                self._send(entry)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)

    def _send(self, entry: _Entry) -> None:
        entry.inflight = True
        version = entry.tracker.version
        if not entry.final:
            ring = self._running if entry.tracker.view.state == "RUNNING" else self._queued
            with contextlib.suppress(ValueError):
                ring.remove(entry)
            ring.append(entry)
            self._running_turn = ring is not self._running
            every = self._interval * (1 if ring is self._running else QUEUED_EVERY_TICKS)
            entry.next_at = self._clock() + every
        task = asyncio.create_task(self._publish(entry, version))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, entry: _Entry, version: int) -> None:
        view = entry.tracker.view
        try:
            await entry.publish(view)
        except Exception as exc:
            log_failure(_log, logging.WARNING, "status update failed: %s", exc=exc)
            pause = _retry_after(exc)
            if pause is not None:  # the tier is shared with others (other replicas, say)
                self._bucket(entry.workspace).hold(pause)
                version = entry.published  # rate limited, not refused: sent again after it
        entry.published = version
        entry.inflight = False
        if view.state == "FINISHED" and version == entry.tracker.version:
            self._entries.pop(id(entry.tracker), None)
        self._wake.set()
        async with self._settled:
            self._settled.notify_all()

    # -- flushing ----------------------------------------------------------------------------

    def _unsettled(self) -> bool:
        return any(e.final for e in self._entries.values())

    async def flush(self, timeout_seconds: float | None = None) -> bool:
        """Wait until every final state is posted; False if ``timeout_seconds`` passed first."""
        try:
            async with asyncio.timeout(timeout_seconds), self._settled:
                await self._settled.wait_for(lambda: not self._unsettled())
        except TimeoutError:
            _log.warning("status board: final states still unposted at shutdown")
            return False
        return True

    async def aclose(self, timeout_seconds: float = 5.0) -> None:
        """Post what is final (bounded), then stop."""
        await self.flush(timeout_seconds)
        self._entries.clear()
        await stop_task(self._pump)
        if self._publishing:
            await asyncio.wait(set(self._publishing), timeout=timeout_seconds)


def _retry_after(exc: Exception) -> float | None:
    """The ``Retry-After`` of a 429 that outlasted the client's retry handler, if it is one."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    if exc.response.status_code != 429:
        return None
    values = [v for k, v in exc.response.headers.items() if str(k).lower() == "retry-after"]
    value = values[0] if values else None
    if isinstance(value, list | tuple):  # some transports give header values as lists
        value = value[0] if value else None
    try:
        return min(max(float(value), 1.0), 600.0) if value is not None else 30.0
    except (TypeError, ValueError):
        return 30.0
