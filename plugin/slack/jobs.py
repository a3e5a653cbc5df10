"""The run queue on a Redis Stream (consumer group ``workers``): the Slack front enqueues the
frozen request of a run, ``sre-diag worker`` processes consume it.

The entries are ``sre_diag.slack.job_entry`` (a :class:`Job` as JSON, read strictly; a
:class:`Poison` is acknowledged, dead-lettered with its reason and answered in its thread).

Delivery is at least once; the final answer is exactly one (``sre_diag.slack.fence``): a worker
reads only as many entries as it has free slots and becomes each job's owner with
:meth:`JobQueue.take` (which also refuses a job that was answered already, so a redelivered
entry never runs twice). While a job runs, its worker's heartbeat (:meth:`JobQueue.touch`) resets
the entry's idle time — only while it still holds the job's token — and says the job is alive;
an entry idle longer than ``DIAG_JOB_CLAIM_SECONDS`` belongs to a worker that vanished or
stalled and is claimed (``XAUTOCLAIM``) by a live worker, which takes the token over and answers
it as lost. A job is acknowledged once its thread got its answer.

Recovery: a missing stream or consumer group (Redis restarted without persistence, the key
deleted, the group destroyed) is created again by whoever meets it — the front on enqueue, a
worker on read. The front watches the runs it queued (:meth:`JobQueue.watch`): their thread
locks are renewed while they wait, and a run whose entry vanished with Redis and that no worker
says it runs is answered by the front (``QUEUE_LOST``).

The stream does not grow without end: :meth:`JobQueue.trim` (each worker's heartbeat) drops the
entries older than the oldest one still pending, never one that is waiting or running.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from sre_diag.log import log_failure
from sre_diag.slack.fence import (
    FENCE_TTL_SECONDS,
    RunFence,
    Takeover,
    answered,
    ms,
    takeover,
    text,
)
from sre_diag.slack.job_entry import Job, Poison, parse_entry

__all__ = [
    "DEFAULT_STREAM",
    "GROUP",
    "JobQueue",
    "QueueDepth",
    "Taken",
    "WatchState",
    "WatchedRun",
]

_log = logging.getLogger(__name__)

GROUP = "workers"
DEFAULT_STREAM = "sre-diag:jobs"
"""The stream of the run queue (a deployment sharing a Redis with another uses its own DB)."""
_DEAD_KEEP = 10_000


@dataclass(frozen=True, slots=True)
class QueueDepth:
    waiting: int
    """Entries no worker has taken yet."""
    taken: int
    """Entries taken by a worker and not yet acknowledged (running, or lost and not claimed)."""
    claimed: int
    """Lost jobs claimed by another worker so far (all time, for this stream)."""


class Taken(enum.Enum):
    OWNER = "owner"
    """This worker now holds the job's token: run it."""
    ANSWERED = "answered"
    """The job was answered already (a redelivery): acknowledge it, never run it again."""
    NOT_OURS = "not_ours"
    """Another worker claimed it meanwhile."""


class WatchState(enum.Enum):
    PENDING = "pending"
    """Waiting or running: its thread lock was renewed."""
    DONE = "done"
    """Answered (or being answered) by its owner."""
    VANISHED = "vanished"
    """No entry, no answer, and no worker says it runs it: the queue lost it."""


@dataclass(frozen=True, slots=True)
class WatchedRun:
    """A run the front queued and has not seen answered, with its thread lock's keys."""

    entry_id: str
    run_id: str
    lock_key: str
    record_key: str
    token: str
    channel: str


# KEYS: stream. ARGV: group, job JSON. Creates the stream and the group when missing (a Redis
# restarted empty, a deleted key, a destroyed group), then adds the job.
_ENQUEUE = """
local ok = pcall(redis.call, 'xgroup', 'create', KEYS[1], ARGV[1], '0', 'MKSTREAM')
return redis.call('xadd', KEYS[1], '*', 'job', ARGV[2])
"""

# KEYS: stream, fence. ARGV: group, entry, consumer, ttl ms.
# {1, token} owner, {2, ''} answered already, {0, ''} not this consumer's entry.
_TAKE = """
local p = redis.call('xpending', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] then return {0, ''} end
if redis.call('hexists', KEYS[2], 'answer') == 1 then return {2, ''} end
local n = redis.call('hincrby', KEYS[2], 'n', 1)
local token = n .. '|' .. ARGV[3]
local t = redis.call('time')
redis.call('hset', KEYS[2], 'holder', token, 'alive', t[1] * 1000 + math.floor(t[2] / 1000))
redis.call('pexpire', KEYS[2], ARGV[4])
return {1, token}
"""

# KEYS: stream, then one fence per job. ARGV: group, consumer, ttl ms, then (entry, token) per
# job. Resets the idle time of the entries this worker still holds and marks them alive; a
# fence Redis lost (restart) is re-created for its holder. Returns the 1-based numbers of the
# jobs taken over by another worker.
_TOUCH = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lost = {}
for i = 2, #KEYS do
  local entry = ARGV[2 * i]
  local token = ARGV[2 * i + 1]
  local h = redis.call('hget', KEYS[i], 'holder')
  if h and h ~= token then
    lost[#lost + 1] = i - 1
  else
    redis.call('hset', KEYS[i], 'holder', token, 'alive', now)
    redis.call('pexpire', KEYS[i], ARGV[3])
    pcall(redis.call, 'xclaim', KEYS[1], ARGV[1], ARGV[2], 0, entry, 'JUSTID')
  end
end
return lost
"""

# KEYS: stream, then (fence, thread lock, run record) per run. ARGV: lock ttl ms, alive ms,
# then (entry, lock token, channel) per run. One state a run: 0 pending (lock renewed, re-taken
# if Redis lost it), 1 answered, 2 vanished.
_WATCH = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local states = {}
local n = 0
for i = 2, #KEYS, 3 do
  n = n + 1
  local entry = ARGV[3 * n]
  local token = ARGV[3 * n + 1]
  local channel = ARGV[3 * n + 2]
  local state = 0
  if redis.call('hexists', KEYS[i], 'answer') == 1 then
    state = 1
  else
    local alive = tonumber(redis.call('hget', KEYS[i], 'alive'))
    local present = #redis.call('xrange', KEYS[1], entry, entry, 'COUNT', 1) > 0
    if not present and not (alive and now - alive < tonumber(ARGV[2])) then state = 2 end
  end
  if state == 0 then
    local owner = redis.call('get', KEYS[i + 1])
    if owner == token or not owner then
      redis.call('set', KEYS[i + 1], token, 'PX', ARGV[1])
      redis.call('set', KEYS[i + 2], channel, 'PX', ARGV[1])
    end
  end
  states[n] = state
end
return states
"""

# KEYS: stream. ARGV: group. Trims the stream below the oldest pending entry (or the group's
# last delivered one when none is pending), in one step.
_TRIM = """
local p = redis.call('xpending', KEYS[1], ARGV[1])
local oldest = p[2]
if not oldest then
  for _, g in ipairs(redis.call('xinfo', 'groups', KEYS[1])) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then oldest = last end
  end
end
if not oldest or oldest == '0-0' then return 0 end
return redis.call('xtrim', KEYS[1], 'MINID', oldest)
"""

# KEYS: stream, dead-letter stream. ARGV: group, entry, reason, raw, keep.
_DEAD_LETTER = """
redis.call('xadd', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'entry', ARGV[2], 'reason', ARGV[3],
           'job', ARGV[4])
pcall(redis.call, 'xack', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


def _is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and (
        "NOGROUP" in str(exc) or "no such key" in str(exc).lower()
    )


BACKLOG_LIMIT = 10_000
"""The most stream entries a front adopts at its start."""


class JobQueue:
    """One stream and its consumer group on one Redis connection pool."""

    def __init__(self, redis: Redis, stream: str) -> None:
        self.redis = redis
        self.stream = stream
        self.dead_stream = f"{stream}:dead"
        self._claims_key = f"{stream}:claimed"

    def fence_key(self, run_id: str) -> str:
        return f"{self.stream}:fence:{run_id}"

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, job: Job) -> str:
        entry = await self.redis.eval(_ENQUEUE, 1, self.stream, GROUP, job.dumps())
        return text(entry)

    async def read(
        self, consumer: str, count: int, block_ms: int
    ) -> list[tuple[str, Job | Poison]]:
        """Up to ``count`` new entries for ``consumer``; a missing stream or group is created
        again (and nothing is returned this time)."""
        try:
            answer: Any = await self.redis.xreadgroup(
                GROUP, consumer, {self.stream: ">"}, count=count, block=block_ms
            )
        except ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            _log.warning("run queue group missing (Redis emptied?): creating it again")
            await self.ensure_group()
            return []
        entries: list[tuple[str, Job | Poison]] = []
        for _stream, items in answer or []:
            entries.extend(_parsed(items))
        return entries

    async def take(self, consumer: str, entry_id: str, job: Job) -> tuple[Taken, str]:
        """Become the owner of a job just read: its token, unless it was answered already or
        another worker claimed it first."""
        answer: Any = await self.redis.eval(
            _TAKE,
            2,
            self.stream,
            self.fence_key(job.run_id),
            GROUP,
            entry_id,
            consumer,
            ms(FENCE_TTL_SECONDS),
        )
        code = int(answer[0])
        verdict = {1: Taken.OWNER, 2: Taken.ANSWERED}.get(code, Taken.NOT_OURS)
        return verdict, text(answer[1])

    def fence(
        self,
        job: Job,
        token: str,
        give_up_seconds: float,
        abandon: asyncio.Event | None = None,
    ) -> RunFence:
        return RunFence(self.redis, self.fence_key(job.run_id), token, give_up_seconds, abandon)

    def answer_fence(self, job: Job, token: str, give_up_seconds: float) -> RunFence:
        """The fence of a claimer's (or the front's) takeover: it holds the answer already."""
        return RunFence.holding(self.redis, self.fence_key(job.run_id), token, give_up_seconds)

    async def touch(self, consumer: str, running: Sequence[tuple[str, str, str]]) -> list[int]:
        """Heartbeat of this worker's jobs, given as (entry id, run id, token): the indexes of
        those another worker took over."""
        if not running:
            return []
        keys = [self.stream, *(self.fence_key(run_id) for _, run_id, _ in running)]
        args: list[Any] = [GROUP, consumer, ms(FENCE_TTL_SECONDS)]
        for entry_id, _, token in running:
            args.extend((entry_id, token))
        lost: Any = await self.redis.eval(_TOUCH, len(keys), *keys, *args)
        return [int(n) - 1 for n in lost or []]

    async def claim_lost(
        self, consumer: str, min_idle_seconds: float, count: int = 10
    ) -> list[tuple[str, Job | Poison]]:
        """Entries idle for ``min_idle_seconds`` (their worker vanished or stalled), now
        ``consumer``'s."""
        try:
            answer: Any = await self.redis.xautoclaim(
                self.stream, GROUP, consumer, ms(min_idle_seconds), "0-0", count=count
            )
        except ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            await self.ensure_group()
            return []
        items: list[Any] = list(answer[1]) if isinstance(answer, list | tuple) else []
        entries = _parsed([i for i in items if i is not None and i[1] is not None])
        if entries:
            await self.redis.incrby(self._claims_key, len(entries))
        return entries

    async def takeover(self, run_id: str, claimer: str, grace_seconds: float) -> Takeover:
        return await takeover(self.redis, self.fence_key(run_id), claimer, grace_seconds)

    async def mark_answered(self, run_id: str, token: str) -> None:
        """The answer ``token`` took (a claimer's, the front's) is in its thread."""
        await answered(self.redis, self.fence_key(run_id), token)

    async def dead_letter(self, entry_id: str, poison: Poison) -> None:
        """Move an entry that is not a runnable job to the dead-letter stream and acknowledge
        it (one atomic step)."""
        await self.redis.eval(
            _DEAD_LETTER,
            2,
            self.stream,
            self.dead_stream,
            GROUP,
            entry_id,
            poison.reason,
            poison.raw,
            _DEAD_KEEP,
        )

    async def watch(
        self, runs: Sequence[WatchedRun], lock_ttl_seconds: float, alive_seconds: float
    ) -> list[WatchState]:
        """One round trip for every run the front queued: renews the thread locks of those
        still waiting or running and says which were answered and which vanished."""
        if not runs:
            return []
        keys: list[str] = [self.stream]
        args: list[Any] = [ms(lock_ttl_seconds), ms(alive_seconds)]
        for run in runs:
            keys.extend((self.fence_key(run.run_id), run.lock_key, run.record_key))
            args.extend((run.entry_id, run.token, run.channel))
        states: Any = await self.redis.eval(_WATCH, len(keys), *keys, *args)
        table = {0: WatchState.PENDING, 1: WatchState.DONE, 2: WatchState.VANISHED}
        return [table[int(s)] for s in states]

    async def ack(self, entry_id: str) -> None:
        await self.redis.xack(self.stream, GROUP, entry_id)

    async def trim(self) -> int:
        """Drop the acknowledged entries: those before the oldest pending entry, or before the
        last delivered one when none is pending — read and trimmed in one atomic script, so no
        delivery can come in between. Entries not yet delivered are never touched (delivery is
        in id order, so every id below the group's last delivered id is either pending or
        acknowledged). The number of entries dropped."""
        try:
            dropped: Any = await self.redis.eval(_TRIM, 1, self.stream, GROUP)
        except ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            await self.ensure_group()
            return 0
        return int(dropped or 0)

    async def backlog(self, limit: int = BACKLOG_LIMIT) -> list[tuple[str, Job]]:
        """The jobs still in the stream (waiting, running, or answered and not trimmed yet),
        oldest first, at most ``limit``; entries that are not jobs are left to the workers."""
        entries = await self.redis.xrange(self.stream, "-", "+", count=limit)
        backlog: list[tuple[str, Job]] = []
        for entry_id, fields in entries or []:
            job = parse_entry(fields)
            if isinstance(job, Job):
                backlog.append((text(entry_id), job))
        return backlog

    async def depth(self) -> QueueDepth:
        waiting = taken = 0
        try:
            groups: Any = await self.redis.xinfo_groups(self.stream)
        except ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            groups = []
        for group in groups:
            name = text(group.get("name"))
            if name != GROUP:
                continue
            taken = int(group.get("pending") or 0)
            lag = group.get("lag")
            waiting = int(lag) if lag is not None else 0
        claimed = await self.redis.get(self._claims_key)
        return QueueDepth(waiting=waiting, taken=taken, claimed=int(claimed or 0))


def _parsed(items: Sequence[Any]) -> list[tuple[str, Job | Poison]]:
    entries: list[tuple[str, Job | Poison]] = []
    for entry_id, fields in items:
        try:
            parsed = parse_entry(fields if isinstance(fields, dict) else None)
        except Exception as exc:  # never: parse_entry classifies; a bug must not kill a batch
            log_failure(_log, logging.ERROR, "job entry not parsed: %s", exc=exc)
            parsed = Poison("INVALID_FIELDS", "")
        entries.append((text(entry_id), parsed))
    return entries
