"""Fencing for queued runs: at most one final answer per run, whoever ends up holding it.

Each run of the queue has one small Redis hash (``<stream>:fence:<run_id>``):

- ``n``: a counter that only grows; whoever becomes the run's owner increments it,
- ``holder``: the current owner's token, ``<n>|<consumer>`` (unique even when a restarted Redis
  starts counting again),
- ``answer``: who took the run's final answer, ``<token>|posting|<ms>`` and then
  ``<token>|posted``,
- ``alive``: when the owner's worker last said it is running the job (its heartbeat),
- ``audit``: the token of whoever writes the run's one audit record (:meth:`RunFence.claim_audit`,
  set once).

A worker becomes owner when it takes the job (``JobQueue.take``); a claimer, or the front
answering a job the queue lost, takes the token over (:func:`takeover`) BEFORE it posts. Every
side effect of a run is conditional on the token, checked in Redis in one round trip at the
moment it is made: progress updates (:meth:`RunFence.holds`), and the final answer, its plain
fallback and its audit record (:meth:`RunFence.take_answer`, a compare-and-set on ``answer``).
Between taking the answer and posting it a run renders, keeps its evidence, may wait for
Slack's rate limit: right before each post attempt :meth:`RunFence.confirm` checks again, in
one step, that the answer is still this holder's and restarts its ``posting`` moment, so the
window in which a stalled owner and a claimer can both post is the HTTP call itself (a
claimer waits out the grace period from that moment).
An owner that lost the token posts nothing more; a claimer that finds the answer taken by an
owner still posting waits for it (:data:`TakeoverVerdict.WAIT`) and takes over only when that
owner stayed silent longer than the grace period (it died mid-post).

After Redis lost the hash (a restart without persistence) nobody took the run over: its owner
keeps going, re-creates the hash at its next heartbeat, and takes the answer as before.

The audit record follows the answer, not the run's end: the owner claims it once its final post
is confirmed (or known impossible), a claimer before it answers the run as lost; whoever comes
second writes none. So a run never has two records (an owner's DRAFT beside a claimer's
WORKER_LOST), whoever stalls where.

The in-process mode has no queue and no claimer: :data:`NO_FENCE` allows everything.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis

from sre_diag.aio import stopping
from sre_diag.log import log_failure

__all__ = [
    "FENCE_TTL_SECONDS",
    "NO_FENCE",
    "Fence",
    "RunFence",
    "Takeover",
    "TakeoverVerdict",
    "answered",
    "retried",
    "takeover",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")

FENCE_TTL_SECONDS = 2 * 86400.0
"""How long a run's fence outlives its last change (far beyond any run, claim or replay)."""

# KEYS: fence. ARGV: holder. 1 holds, 2 no fence (Redis lost it: nobody took over), 0 lost.
_HOLDS = """
local h = redis.call('hget', KEYS[1], 'holder')
if not h then return 2 end
if h == ARGV[1] then return 1 end
return 0
"""

# KEYS: fence. ARGV: holder, ttl ms. 1: the answer is this holder's; 0: fenced out.
_TAKE_ANSWER = """
local h = redis.call('hget', KEYS[1], 'holder')
if h and h ~= ARGV[1] then return 0 end
local a = redis.call('hget', KEYS[1], 'answer')
if a then
  if string.sub(a, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then return 1 end
  return 0
end
local t = redis.call('time')
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('hset', KEYS[1], 'holder', ARGV[1], 'answer', ARGV[1] .. '|posting|' .. ms)
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
"""

# KEYS: fence. ARGV: holder, ttl ms. 1: the answer is still this holder's (its posting moment
# restarted now); 2: Redis lost the hash (nobody took over); 0: taken over.
_CONFIRM = """
local h = redis.call('hget', KEYS[1], 'holder')
local a = redis.call('hget', KEYS[1], 'answer')
if not h and not a then return 2 end
if h ~= ARGV[1] then return 0 end
if a == ARGV[1] .. '|posted' then return 1 end
local mine = ARGV[1] .. '|posting|'
if a and string.sub(a, 1, #mine) == mine then
  local t = redis.call('time')
  redis.call('hset', KEYS[1], 'answer', mine .. (t[1] * 1000 + math.floor(t[2] / 1000)))
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: fence. ARGV: holder, ttl ms. The answer this holder took is now in the thread.
_ANSWERED = """
local a = redis.call('hget', KEYS[1], 'answer')
local mine = ARGV[1] .. '|posting|'
if a and string.sub(a, 1, #mine) == mine then
  redis.call('hset', KEYS[1], 'answer', ARGV[1] .. '|posted')
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
"""

# KEYS: fence. ARGV: holder, ttl ms. 1: this holder writes the run's audit record; 0: another
# does (it claimed it first, or took the run over and writes it when it answers).
_CLAIM_AUDIT = """
local w = redis.call('hget', KEYS[1], 'audit')
if w then
  if w == ARGV[1] then return 1 end
  return 0
end
local h = redis.call('hget', KEYS[1], 'holder')
if h and h ~= ARGV[1] then return 0 end
redis.call('hset', KEYS[1], 'audit', ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
"""

# KEYS: fence. ARGV: claimer, ttl ms, grace ms.
# {1, token, stale}: the run and its answer are now the claimer's (stale 1: an earlier owner
# had taken the answer and fell silent — it may have posted it); {2, '', 0}: already answered;
# {3, '', 0}: its owner is posting the answer right now (wait). Asking again after a lost reply
# gives the claimer its own token back.
_TAKEOVER = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local a = redis.call('hget', KEYS[1], 'answer')
local h = redis.call('hget', KEYS[1], 'holder')
if a then
  if string.sub(a, -7) == '|posted' then return {2, '', 0} end
  if h and string.sub(h, -(#ARGV[1] + 1)) == '|' .. ARGV[1] and
     string.sub(a, 1, #h + 1) == h .. '|' then
    return {1, h, tonumber(redis.call('hget', KEYS[1], 'stale') or '0')}
  end
  local since = tonumber(string.match(a, '|posting|(%d+)$'))
  if since and now - since < tonumber(ARGV[3]) then return {3, '', 0} end
end
local stale = 0
if a then stale = 1 end
local n = redis.call('hincrby', KEYS[1], 'n', 1)
local token = n .. '|' .. ARGV[1]
redis.call('hset', KEYS[1], 'holder', token, 'answer', token .. '|posting|' .. now,
           'stale', stale)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token, stale}
"""


def ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Fence(Protocol):
    """What a run asks before each side effect."""

    @property
    def lost(self) -> bool:
        """True once the run is known to have lost its token (it then posts nothing more)."""
        ...

    async def holds(self) -> bool:
        """Whether a progress update may be posted now."""
        ...

    async def take_answer(self) -> bool:
        """Take the run's final answer (idempotent): True when this run may post it and write
        its audit record, False when another owner has it (the run then posts nothing)."""
        ...

    async def confirm(self) -> bool:
        """Right before a post of the answer taken: still ours? (False: post nothing.)"""
        ...

    async def answered(self) -> None:
        """The answer taken is in the thread (or every way of posting it failed)."""
        ...

    async def claim_audit(self) -> bool:
        """Whether this run writes the run's audit record (once; False: another owner does)."""
        ...

    def lose(self) -> None:
        """The heartbeat found the token taken over."""
        ...


class _NoFence:
    """The in-process run: nobody else can answer it."""

    @property
    def lost(self) -> bool:
        return False

    async def holds(self) -> bool:
        return True

    async def take_answer(self) -> bool:
        return True

    async def confirm(self) -> bool:
        return True

    async def answered(self) -> None:
        return None

    async def claim_audit(self) -> bool:
        return True

    def lose(self) -> None:
        return None


NO_FENCE: Fence = _NoFence()


async def retried(
    step: Callable[[], Awaitable[T]],
    *,
    patience_seconds: float,
    abandon: asyncio.Event | None,
    what: str,
) -> T | None:
    """``step`` until Redis answers it: backoff 0.1 s doubling to 0.5 s, for at most
    ``patience_seconds`` (or until ``abandon`` is set, or the task is stopping); None then."""
    deadline = time.monotonic() + patience_seconds
    pause = 0.1
    while True:
        try:
            return await step()
        except Exception as exc:
            left = deadline - time.monotonic()
            if left <= 0 or stopping() or (abandon is not None and abandon.is_set()):
                log_failure(
                    _log, logging.ERROR, "%s: Redis out of reach (%s); given up", what, exc=exc
                )
                return None
            log_failure(_log, logging.DEBUG, "%s: %s; retrying", what, exc=exc)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)


@dataclass(slots=True)
class RunFence:
    """One queued run's token, checked in Redis before each side effect."""

    redis: Redis
    key: str
    holder: str
    give_up_seconds: float
    """How long ``take_answer`` (and marking the answer posted) keeps trying while Redis is
    out of reach: past this the run gives its answer up, and its job stays pending for a
    claimer; waiting is always safe (the answer is a compare-and-set)."""
    abandon: asyncio.Event | None = None
    """Set when the worker's drain deadline passed: give up at once."""
    _lost: bool = False
    _taken: bool = False
    _gave_up: bool = False

    @classmethod
    def holding(cls, redis: Redis, key: str, token: str, give_up_seconds: float) -> RunFence:
        """The fence of a takeover: ``token`` holds the run's answer already."""
        fence = cls(redis, key, token, give_up_seconds)
        fence._taken = True
        return fence

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def gave_up(self) -> bool:
        """True when the answer was given up because Redis stayed out of reach (not taken over):
        the job must then stay pending, so that a claimer answers it."""
        return self._gave_up

    def lose(self) -> None:
        if not self._lost:
            self._lost = True
            _log.error("run fenced: its job was taken over (%s); it posts nothing more", self.key)

    async def holds(self) -> bool:
        if self._lost:
            return False
        if self._taken:
            return True  # the answer is ours: its final status may follow it
        try:
            verdict = await self.redis.eval(_HOLDS, 1, self.key, self.holder)
        except Exception as exc:  # a skipped progress update costs nothing
            log_failure(_log, logging.DEBUG, "fence not read: %s", exc=exc)
            return False
        if int(verdict) == 0:
            self.lose()
            return False
        return True

    async def take_answer(self) -> bool:
        if self._lost:
            return False
        if self._taken:
            return True

        async def take() -> Any:
            return await self.redis.eval(
                _TAKE_ANSWER, 1, self.key, self.holder, ms(FENCE_TTL_SECONDS)
            )

        verdict = await retried(
            take, patience_seconds=self.give_up_seconds, abandon=self.abandon,
            what=f"run answer not taken ({self.key}); left to whoever claims its job",
        )  # fmt: skip
        if verdict is None:
            self._lost = self._gave_up = True
            return False
        if int(verdict) != 1:
            self.lose()
            return False
        self._taken = True
        return True

    async def confirm(self) -> bool:
        if self._lost or not self._taken:
            return False

        async def check() -> Any:
            return await self.redis.eval(_CONFIRM, 1, self.key, self.holder, ms(FENCE_TTL_SECONDS))

        verdict = await retried(
            check, patience_seconds=self.give_up_seconds, abandon=self.abandon,
            what=f"run answer not confirmed ({self.key}); left to whoever claims its job",
        )  # fmt: skip
        if verdict is None:
            self._lost = self._gave_up = True
            return False
        if int(verdict) == 0:
            self.lose()
            return False
        return True

    async def answered(self) -> None:
        """Mark the answer posted, retried while Redis is out of reach (a claimer waiting on
        an unmarked answer would otherwise post a second one after its grace period)."""
        if not self._taken:
            return

        async def mark() -> None:
            await answered(self.redis, self.key, self.holder)

        await retried(
            mark, patience_seconds=self.give_up_seconds, abandon=self.abandon,
            what=f"answer not marked posted ({self.key})",
        )  # fmt: skip

    async def claim_audit(self) -> bool:
        """Claim the run's one audit record (a set-once mark in the fence, one step). With Redis
        out of reach past ``give_up_seconds`` the record is written anyway: an audit trail
        that misses a run is worse than one that might show it twice."""

        async def claim() -> Any:
            return await self.redis.eval(
                _CLAIM_AUDIT, 1, self.key, self.holder, ms(FENCE_TTL_SECONDS)
            )

        verdict = await retried(
            claim, patience_seconds=self.give_up_seconds, abandon=self.abandon,
            what=f"audit record not claimed ({self.key}); written",
        )  # fmt: skip
        if verdict is None:
            return True
        if int(verdict) != 1:
            _log.warning("run %s: its audit record is another owner's; none written", self.key)
            return False
        return True


class TakeoverVerdict(enum.Enum):
    TAKEN = "taken"
    """The run is now the claimer's: it answers it."""
    DONE = "done"
    """The run was answered already."""
    WAIT = "wait"
    """Its owner is posting the answer now; ask again later."""


@dataclass(frozen=True, slots=True)
class Takeover:
    verdict: TakeoverVerdict
    token: str = ""
    stale: bool = False
    """TAKEN from an owner that had taken the answer and fell silent: it may have posted it
    (look in the thread before answering)."""


async def answered(redis: Redis, key: str, token: str) -> None:
    """Mark the answer ``token`` took as posted."""
    await redis.eval(_ANSWERED, 1, key, token, ms(FENCE_TTL_SECONDS))


async def takeover(redis: Redis, key: str, claimer: str, grace_seconds: float) -> Takeover:
    """Take a run's token and its answer from whoever held them (one atomic step)."""
    answer: Any = await redis.eval(
        _TAKEOVER, 1, key, claimer, ms(FENCE_TTL_SECONDS), ms(grace_seconds)
    )
    code, token = int(answer[0]), text(answer[1])
    verdict = {1: TakeoverVerdict.TAKEN, 2: TakeoverVerdict.DONE}.get(code, TakeoverVerdict.WAIT)
    return Takeover(verdict, token, stale=bool(int(answer[2] or 0)))
