"""One outbound lane per Slack channel: every call this process makes into a channel takes its
turn here, ordered by what it is worth in an incident.

1. **Final answers** (:attr:`Priority.ANSWER`) first. While an answer of a channel is being
   delivered (:meth:`Lanes.answering`, from its first attempt until it is confirmed, refused or
   given up at its deadline, including every ``Retry-After`` it waits), nothing of lower value
   is sent into that channel.
2. **Status messages and replies** (:attr:`Priority.STATUS`): a run's status message and its
   updates (the status board coalesces them: only the latest state is sent).
3. **Alert pointers** (:attr:`Priority.POINTER`): they wait behind both.

A 429 holds the method for its ``Retry-After``: ``chat.postMessage`` on its channel, any other
method (a rate tier of the workspace) for every channel of the workspace; while it holds, the
calls waiting go in order of value. Slack's limits are learned from its answers (other replicas
spend the same budget): :class:`Lanes` can also pace ``chat.postMessage`` per channel ahead of
Slack (``post_per_second``, with a burst of :data:`POST_BURST`). A waiting call never gives up
for lack of budget unless its caller gave it a deadline (an answer's own deadline): then
:class:`NotSent` says it was not sent (nothing reached Slack).

The lanes live with the event loop that uses them (:func:`lanes`): one set per process loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import itertools
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.slack.errors import NotSent

__all__ = [
    "LIMITED_TRIES",
    "POST_BURST",
    "POST_PER_SECOND",
    "Lanes",
    "NotSent",
    "Priority",
    "lanes",
    "retry_after_of",
    "workspace_of",
]

T = TypeVar("T")

POST_PER_SECOND = 0.9
"""A pace for ``chat.postMessage`` per channel, when one is asked for: Slack allows about one a
second; a little less keeps calls that reach Slack closer together than they left from being
refused."""
POST_BURST = 3
"""``chat.postMessage`` calls a channel may take at once after a quiet spell."""
_POST = "chat.postMessage"
_MAX_HOLD_SECONDS = 600.0
_MIN_HOLD_SECONDS = 1.0
"""Slack's Retry-After is in whole seconds: a 0 (or less) still holds the method a second."""
_HOLD_WITHOUT_HEADER = 1.0
LIMITED_TRIES = 5
"""How often a status message or a pointer is tried when Slack rate-limits it."""


class Priority(enum.IntEnum):
    """What a call is worth; lower goes first."""

    ANSWER = 0
    STATUS = 1
    POINTER = 2


def retry_after_of(exc: BaseException) -> float | None:
    """The hold a Slack 429 asks for, in seconds (1 to 600); None when ``exc`` is not a 429."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    if exc.response.status_code != 429:
        return None
    for name, value in (exc.response.headers or {}).items():
        if str(name).lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) and value else value
            try:
                return min(max(float(str(raw)), _MIN_HOLD_SECONDS), _MAX_HOLD_SECONDS)
            except ValueError:
                break
    return _HOLD_WITHOUT_HEADER


@dataclass(eq=False, slots=True)
class _Waiter:
    priority: Priority
    seq: int
    method: str


@dataclass(slots=True)
class _Lane:
    """One channel: its waiters, its answers in delivery, its post budget and holds."""

    tokens: float
    stamp: float
    waiting: list[_Waiter] = field(default_factory=list)
    answering: int = 0
    held_until: float = 0.0
    """``chat.postMessage`` on this channel is held (a 429) until then."""

    def post_wait(self, now: float, rate: float | None) -> float:
        if rate is None:
            return 0.0
        self.tokens = min(float(POST_BURST), self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / rate

    def outranked(self, waiter: _Waiter) -> bool:
        """Whether something of more value (or an earlier call of the same value and method)
        goes first."""
        if waiter.priority > Priority.ANSWER and self.answering:
            return True
        return any(
            other.priority < waiter.priority
            or (
                other.priority == waiter.priority
                and other.method == waiter.method
                and other.seq < waiter.seq
            )
            for other in self.waiting
        )


class Lanes:
    """The lanes of every channel this event loop posts into."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, post_per_second: float | None = None
    ) -> None:
        """``post_per_second``: pace ``chat.postMessage`` per channel (None: only Slack's
        ``Retry-After`` holds it)."""
        self._clock = clock
        self._rate = post_per_second
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._tier_holds: dict[tuple[str, str], float] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Condition()

    def _lane(self, workspace: str, channel: str) -> _Lane:
        key = (workspace, channel)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(tokens=float(POST_BURST), stamp=self._clock())
        return lane

    def _wait_of(self, workspace: str, lane: _Lane, waiter: _Waiter) -> float | None:
        """0 when ``waiter`` may go now; seconds to wait; None: until something changes."""
        if lane.outranked(waiter):
            return None
        now = self._clock()
        if waiter.method == _POST:
            hold = max(0.0, lane.held_until - now)
            return hold if hold > 0 else lane.post_wait(now, self._rate)
        return max(0.0, self._tier_holds.get((workspace, waiter.method), 0.0) - now)

    async def _turn(
        self, workspace: str, channel: str, priority: Priority, method: str, deadline: float | None
    ) -> None:
        lane = self._lane(workspace, channel)
        waiter = _Waiter(priority, next(self._seq), method)
        lane.waiting.append(waiter)
        try:
            async with self._changed:
                while (wait := self._wait_of(workspace, lane, waiter)) != 0.0:
                    await self._sleep(wait, deadline)
                if method == _POST:
                    lane.tokens -= 1.0
        finally:
            lane.waiting.remove(waiter)
            await self._notify()

    async def _sleep(self, wait: float | None, deadline: float | None) -> None:
        """Wait (the condition held) until notified, ``wait`` passed, or the deadline."""
        if deadline is not None:
            left = deadline - self._clock()
            if left <= 0 or (wait is not None and wait >= left):
                raise NotSent
            wait = left if wait is None else wait
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=wait)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def hold(self, workspace: str, channel: str, method: str, seconds: float) -> None:
        """Slack said "retry after ``seconds``" for ``method``: no such call before then."""
        until = self._clock() + seconds
        if method == _POST:
            lane = self._lane(workspace, channel)
            lane.held_until = max(lane.held_until, until)
            lane.tokens = min(lane.tokens, 0.0)
        else:
            key = (workspace, method)
            self._tier_holds[key] = max(self._tier_holds.get(key, 0.0), until)

    async def call(
        self,
        client: AsyncWebClient,
        channel: str,
        priority: Priority,
        method: str,
        send: Callable[[], Awaitable[T]],
        *,
        deadline: float | None = None,
        tries: int = 1,
    ) -> T:
        """Make one Slack call (``send``, a call of ``method`` into ``channel``) in its turn.
        A 429 holds the method for its ``Retry-After``; the call then takes its turn again, up
        to ``tries`` times in all (Slack acted on nothing it rate-limited), and the last 429 is
        raised. :class:`NotSent` when ``deadline`` (a ``time.monotonic()`` instant) passed
        while it waited."""
        workspace = workspace_of(client)
        for left in range(max(tries, 1) - 1, -1, -1):
            await self._turn(workspace, channel, priority, method, deadline)
            try:
                return await send()
            except Exception as exc:
                seconds = retry_after_of(exc)
                if seconds is None or left == 0:
                    if seconds is not None:
                        self.hold(workspace, channel, method, seconds)
                    raise
                self.hold(workspace, channel, method, seconds)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def answering(self, client: AsyncWebClient, channel: str) -> AsyncIterator[None]:
        """While inside, an answer is being delivered into ``channel``: nothing of lower value
        is sent into it."""
        lane = self._lane(workspace_of(client), channel)
        lane.answering += 1
        try:
            yield
        finally:
            lane.answering -= 1
            await self._notify()


def workspace_of(client: AsyncWebClient) -> str:
    """A key for the workspace a client acts in (a digest of its token, never the token)."""
    token = client.token or ""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


_Loop = asyncio.AbstractEventLoop
_BY_LOOP: weakref.WeakKeyDictionary[_Loop, Lanes] = weakref.WeakKeyDictionary()


def lanes() -> Lanes:
    """The lanes of the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    found = _BY_LOOP.get(loop)
    if found is None:
        found = _BY_LOOP[loop] = Lanes()
    return found
