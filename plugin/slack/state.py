"""Shared run state: event dedupe, one run per thread, busy notices and cross-replica cancels.

In-process by default; with ``DIAG_REDIS_URL`` the same operations go to Redis so that several
replicas serving one Slack app agree on which event was seen, which thread is busy and which run
was asked to stop.

Keys are built by the caller from a *scope* (the Slack app id and the workspace id of the event),
so two apps (or two workspaces of one app) sharing a Redis never see each other's threads.

The Slack edge also keeps, per answer, the evidence its Evidence button shows (for
``DIAG_EVIDENCE_TTL_SECONDS``) and each user's feedback vote, and per alert pattern and channel
the thread of the run it started (for ``DIAG_ALERT_COOLDOWN_SECONDS``, ``claim_alert``), the
pattern's one pointer message and how many alerts it stands for (``note_pointer``), and per
channel the automatic runs of the last hour (``admit_alert_run``), under the same scoped keys.

A thread lock is a :class:`Lease`: its value is the run's key, it carries the run's channel (for
Cancel, checked on every replica) and it lives as long as its run, not for a fixed time:
:class:`~sre_diag.slack.leases.ThreadLeases` renews every lease of this process every third of a
short TTL while the run is queued or running, and releases it token-checked when the run ends. A
release that does not reach Redis (a pause, a failover) is retried in the background, and the
short TTL bounds what is left if every retry fails.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import BlockingConnectionPool, Redis

__all__ = [
    "DEFAULT_NAMESPACE",
    "Lease",
    "MemoryState",
    "PointerNote",
    "RedisState",
    "SharedState",
    "build_state",
    "connect_redis",
]

DEFAULT_NAMESPACE = "sre-diag"


@dataclass(frozen=True, slots=True)
class Lease:
    """One run's hold on its thread: the lock key, the owner token (the run key), the channel."""

    thread_key: str
    run_key: str
    channel: str


@dataclass(frozen=True, slots=True)
class PointerNote:
    """An alert pattern's pointer: how many alerts it stands for, since which alert's ``ts``,
    and its own message ``ts`` once posted ("" before)."""

    count: int
    since_ts: str
    pointer_ts: str


class SharedState(Protocol):
    """The few atomic operations the Slack edge needs."""

    @property
    def shared(self) -> bool:
        """True when other processes see this state (cancels must then be polled)."""
        ...

    async def claim_event(self, event_key: str, ttl_seconds: float) -> bool:
        """True the first time ``event_key`` is seen within ``ttl_seconds``."""
        ...

    async def claim_thread(self, lease: Lease, ttl_seconds: float) -> bool:
        """True if no other run holds the thread; then the lease is held for ``ttl_seconds``."""
        ...

    async def renew_threads(self, leases: Sequence[Lease], ttl_seconds: float) -> list[Lease]:
        """Extend the leases still held by their run (taking again those that expired or were
        lost with the state); returns those another run holds now."""
        ...

    async def release_thread(self, lease: Lease) -> None:
        """Drop the lease if its run still holds it (and the run's busy notice)."""
        ...

    async def note_busy(self, thread_key: str) -> bool:
        """True once per run holding the thread: whether a "busy" reply is due now."""
        ...

    async def request_cancel(self, run_key: str, channel: str, ttl_seconds: float) -> bool:
        """Flag the run for cancellation if it is alive and belongs to ``channel``."""
        ...

    async def cancel_requested(self, run_key: str) -> bool: ...

    async def put_evidence(self, key: str, value: str, ttl_seconds: float) -> None:
        """Keep a run's evidence (``value``, JSON) for ``ttl_seconds``."""
        ...

    async def get_evidence(self, key: str) -> str | None:
        """The evidence kept under ``key``, or None once it expired (or was never kept)."""
        ...

    async def set_vote(self, key: str, vote: str, ttl_seconds: float) -> str | None:
        """Record one user's vote on one answer; returns the vote it replaced, if any."""
        ...

    async def claim_alert(self, key: str, thread_ts: str, ttl_seconds: float) -> str | None:
        """Start the cooldown of an alert pattern (``key``) with the thread of the run it
        starts: None when it was free (the caller runs), else the thread that holds it ("" if
        it expired meanwhile)."""
        ...

    async def forget_alert(self, key: str, thread_ts: str) -> None:
        """End a cooldown this thread holds (its run did not start after all)."""
        ...

    async def alert_holder(self, key: str) -> str | None:
        """The thread holding the cooldown ``key`` now, if any (nothing is claimed)."""
        ...

    async def note_pointer(
        self, key: str, alert_ts: str, ttl_seconds: float, *, add: int = 1, create: bool = True
    ) -> PointerNote | None:
        """Count ``add`` more alerts on the pointer ``key`` (created with ``create``, for
        ``ttl_seconds``, the first alert's ts its ``since``); None when it does not exist and
        is not created."""
        ...

    async def set_pointer(self, key: str, pointer_ts: str, ttl_seconds: float) -> None:
        """The pointer ``key``'s message is ``pointer_ts``."""
        ...

    async def admit_alert_run(self, key: str, run: str, limit: int, window_seconds: float) -> bool:
        """Count an automatic run ``run`` for ``key`` (a channel) unless ``limit`` runs were
        counted within the last ``window_seconds``: True when it may start."""
        ...

    async def aclose(self) -> None: ...


class MemoryState:
    """Single-process state with expiry on a monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._values: dict[str, str] = {}

    @property
    def shared(self) -> bool:
        return False

    def _get(self, key: str) -> str | None:
        expires = self._expiry.get(key)
        if expires is None:
            return None
        if expires <= self._clock():
            self._drop(key)
            return None
        return self._values.get(key)

    def _set(self, key: str, value: str, ttl_seconds: float) -> None:
        self._expiry[key] = self._clock() + ttl_seconds
        self._values[key] = value
        if len(self._expiry) > 10_000:
            now = self._clock()
            for stale in [k for k, t in self._expiry.items() if t <= now]:
                self._drop(stale)

    def _drop(self, key: str) -> None:
        self._expiry.pop(key, None)
        self._values.pop(key, None)

    async def claim_event(self, event_key: str, ttl_seconds: float) -> bool:
        key = f"event:{event_key}"
        if self._get(key) is not None:
            return False
        self._set(key, "1", ttl_seconds)
        return True

    async def claim_thread(self, lease: Lease, ttl_seconds: float) -> bool:
        key = f"thread:{lease.thread_key}"
        if self._get(key) is not None:
            return False
        self._set(key, lease.run_key, ttl_seconds)
        self._set(f"run:{lease.run_key}", lease.channel, ttl_seconds)
        return True

    async def renew_threads(self, leases: Sequence[Lease], ttl_seconds: float) -> list[Lease]:
        lost = []
        for lease in leases:
            if self._get(f"thread:{lease.thread_key}") not in (lease.run_key, None):
                lost.append(lease)
                continue
            self._set(f"thread:{lease.thread_key}", lease.run_key, ttl_seconds)
            self._set(f"run:{lease.run_key}", lease.channel, ttl_seconds)
            if self._get(f"busy:{lease.thread_key}") == lease.run_key:
                self._set(f"busy:{lease.thread_key}", lease.run_key, ttl_seconds)
        return lost

    async def release_thread(self, lease: Lease) -> None:
        self._drop(f"run:{lease.run_key}")
        for kind in ("thread", "busy"):
            key = f"{kind}:{lease.thread_key}"
            if self._get(key) == lease.run_key:
                self._drop(key)

    async def note_busy(self, thread_key: str) -> bool:
        owner_key = f"thread:{thread_key}"
        owner = self._get(owner_key)
        if owner is None:
            return True
        if self._get(f"busy:{thread_key}") == owner:
            return False
        self._set(f"busy:{thread_key}", owner, self._expiry[owner_key] - self._clock())
        return True

    async def request_cancel(self, run_key: str, channel: str, ttl_seconds: float) -> bool:
        if self._get(f"run:{run_key}") != channel:
            return False
        self._set(f"cancel:{run_key}", "1", ttl_seconds)
        return True

    async def cancel_requested(self, run_key: str) -> bool:
        return self._get(f"cancel:{run_key}") is not None

    async def put_evidence(self, key: str, value: str, ttl_seconds: float) -> None:
        self._set(f"evidence:{key}", value, ttl_seconds)

    async def get_evidence(self, key: str) -> str | None:
        return self._get(f"evidence:{key}")

    async def set_vote(self, key: str, vote: str, ttl_seconds: float) -> str | None:
        previous = self._get(f"vote:{key}")
        self._set(f"vote:{key}", vote, ttl_seconds)
        return previous

    async def claim_alert(self, key: str, thread_ts: str, ttl_seconds: float) -> str | None:
        holder = self._get(f"alert:{key}")
        if holder is not None:
            return holder
        self._set(f"alert:{key}", thread_ts, ttl_seconds)
        return None

    async def forget_alert(self, key: str, thread_ts: str) -> None:
        if self._get(f"alert:{key}") == thread_ts:
            self._drop(f"alert:{key}")

    async def alert_holder(self, key: str) -> str | None:
        return self._get(f"alert:{key}")

    async def note_pointer(
        self, key: str, alert_ts: str, ttl_seconds: float, *, add: int = 1, create: bool = True
    ) -> PointerNote | None:
        stored = self._get(f"pointer:{key}")
        if stored is None and not create:
            return None
        count, since, ts = json.loads(stored) if stored is not None else (0, alert_ts, "")
        count += add
        self._set(f"pointer:{key}", json.dumps([count, since, ts]), ttl_seconds)
        return PointerNote(count, since, ts)

    async def set_pointer(self, key: str, pointer_ts: str, ttl_seconds: float) -> None:
        stored = self._get(f"pointer:{key}")
        count, since, _ = json.loads(stored) if stored is not None else (1, pointer_ts, "")
        self._set(f"pointer:{key}", json.dumps([count, since, pointer_ts]), ttl_seconds)

    async def admit_alert_run(self, key: str, run: str, limit: int, window_seconds: float) -> bool:
        now = self._clock()
        stored = self._get(f"alertruns:{key}")
        recent = [t for t in json.loads(stored) if t > now - window_seconds] if stored else []
        if len(recent) >= limit:
            return False
        self._set(f"alertruns:{key}", json.dumps([*recent, now]), window_seconds)
        return True

    async def aclose(self) -> None:
        return None


# KEYS: thread lock, run record. ARGV: run key, channel, ttl ms.
_CLAIM = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""

# KEYS: (thread lock, run record, busy notice) per lease. ARGV: ttl ms, then (run key,
# channel) a lease. Returns the 1-based numbers of the leases another run holds now. A lock
# that is gone (expired through a Redis pause longer than its TTL, or lost with a restart) is
# taken again: the run still lives. (One released a moment ago is released again by the
# caller, see ``leases.ThreadLeases``.)
_RENEW = """
local lost = {}
local n = 0
for i = 1, #KEYS, 3 do
  n = n + 1
  local token = ARGV[2 * n]
  local owner = redis.call('get', KEYS[i])
  if owner == token or not owner then
    redis.call('set', KEYS[i], token, 'PX', ARGV[1])
    redis.call('set', KEYS[i + 1], ARGV[2 * n + 1], 'PX', ARGV[1])
    if redis.call('get', KEYS[i + 2]) == token then redis.call('pexpire', KEYS[i + 2], ARGV[1]) end
  else
    lost[#lost + 1] = n
  end
end
return lost
"""

# KEYS: thread lock, run record, busy notice. ARGV: run key. Compare-and-delete in one step.
_RELEASE = """
redis.call('del', KEYS[2])
if redis.call('get', KEYS[3]) == ARGV[1] then redis.call('del', KEYS[3]) end
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

# KEYS: thread lock, busy notice. One notice per run holding the thread; it lives as the lock.
_NOTE_BUSY = """
local owner = redis.call('get', KEYS[1])
if not owner then return 1 end
if redis.call('get', KEYS[2]) == owner then return 0 end
local ttl = redis.call('pttl', KEYS[1])
if ttl <= 0 then ttl = 60000 end
redis.call('set', KEYS[2], owner, 'PX', ttl)
return 1
"""

# KEYS: run record, cancel flag. ARGV: channel, ttl ms. Only a live run of that channel.
_CANCEL = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
  return 1
end
return 0
"""


# KEYS: alert cooldown. ARGV: thread ts, ttl ms. {1, ''} claimed, {0, holder} held already.
_CLAIM_ALERT = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, ''} end
return {0, redis.call('get', KEYS[1]) or ''}
"""

# KEYS: alert cooldown. ARGV: thread ts. Compare-and-delete.
_FORGET_ALERT = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


# KEYS: pointer hash. ARGV: alert ts, ttl ms, add, create (1/0). {count, since, ts} or {}.
_NOTE_POINTER = """
if redis.call('exists', KEYS[1]) == 0 then
  if ARGV[4] ~= '1' then return {} end
  redis.call('hset', KEYS[1], 'since', ARGV[1], 'ts', '')
end
local n = redis.call('hincrby', KEYS[1], 'n', tonumber(ARGV[3]))
redis.call('pexpire', KEYS[1], ARGV[2])
return {n, redis.call('hget', KEYS[1], 'since'), redis.call('hget', KEYS[1], 'ts')}
"""

# KEYS: runs of the window (sorted set). ARGV: run, limit, window ms. 1 admitted, 0 not.
_ADMIT_RUN = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('zadd', KEYS[1], now, ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1
"""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


REDIS_MAX_CONNECTIONS = 256
"""Connections one client opens at most; past that a command waits for a free one."""


def connect_redis(url: str, *, socket_timeout: float = 2.0) -> Redis:
    """A Redis client whose pool waits (up to ``socket_timeout``) for a free connection instead
    of failing: redis-py's default pool refuses the 101st concurrent command at once
    (``MaxConnectionsError``), which turned a burst of mentions into "state unreachable"
    declines."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=REDIS_MAX_CONNECTIONS,
        timeout=socket_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
    )
    return Redis.from_pool(pool)


class RedisState:
    """The same operations on Redis (``SET NX PX`` and small compare-and-set scripts)."""

    def __init__(self, url: str, *, namespace: str = DEFAULT_NAMESPACE) -> None:
        self._redis: Redis = connect_redis(url)
        self._ns = namespace

    @property
    def shared(self) -> bool:
        return True

    def _key(self, kind: str, name: str) -> str:
        return f"{self._ns}:{kind}:{name}"

    def _lease_keys(self, lease: Lease) -> list[str]:
        return [
            self._key("thread", lease.thread_key),
            self._key("run", lease.run_key),
            self._key("busy", lease.thread_key),
        ]

    def lease_keys(self, lease: Lease) -> tuple[str, str]:
        """The thread lock's key and the run record's (the front renews queued runs' locks in
        the same script that watches the queue)."""
        keys = self._lease_keys(lease)
        return keys[0], keys[1]

    async def _eval(self, script: str, keys: Sequence[str], *args: Any) -> Any:
        return await self._redis.eval(script, len(keys), *keys, *args)

    async def claim_event(self, event_key: str, ttl_seconds: float) -> bool:
        key = self._key("event", event_key)
        return bool(await self._redis.set(key, "1", nx=True, px=_ms(ttl_seconds)))

    async def claim_thread(self, lease: Lease, ttl_seconds: float) -> bool:
        keys = self._lease_keys(lease)[:2]
        claimed = await self._eval(_CLAIM, keys, lease.run_key, lease.channel, _ms(ttl_seconds))
        return bool(claimed)

    async def renew_threads(self, leases: Sequence[Lease], ttl_seconds: float) -> list[Lease]:
        if not leases:
            return []
        keys = [k for lease in leases for k in self._lease_keys(lease)]
        pairs = [v for lease in leases for v in (lease.run_key, lease.channel)]
        lost = await self._eval(_RENEW, keys, _ms(ttl_seconds), *pairs)
        return [leases[int(n) - 1] for n in lost or []]

    async def release_thread(self, lease: Lease) -> None:
        await self._eval(_RELEASE, self._lease_keys(lease), lease.run_key)

    async def note_busy(self, thread_key: str) -> bool:
        keys = [self._key("thread", thread_key), self._key("busy", thread_key)]
        return bool(await self._eval(_NOTE_BUSY, keys))

    async def request_cancel(self, run_key: str, channel: str, ttl_seconds: float) -> bool:
        keys = [self._key("run", run_key), self._key("cancel", run_key)]
        return bool(await self._eval(_CANCEL, keys, channel, _ms(ttl_seconds)))

    async def cancel_requested(self, run_key: str) -> bool:
        return bool(await self._redis.exists(self._key("cancel", run_key)))

    async def put_evidence(self, key: str, value: str, ttl_seconds: float) -> None:
        await self._redis.set(self._key("evidence", key), value, px=_ms(ttl_seconds))

    async def get_evidence(self, key: str) -> str | None:
        return _text(await self._redis.get(self._key("evidence", key)))

    async def set_vote(self, key: str, vote: str, ttl_seconds: float) -> str | None:
        # SET … GET: the new vote and the one it replaces in one atomic step.
        previous = await self._redis.set(
            self._key("vote", key), vote, px=_ms(ttl_seconds), get=True
        )
        return _text(previous)

    async def claim_alert(self, key: str, thread_ts: str, ttl_seconds: float) -> str | None:
        keys = [self._key("alert", key)]
        answer: Any = await self._eval(_CLAIM_ALERT, keys, thread_ts, _ms(ttl_seconds))
        if int(answer[0]) == 1:
            return None
        return _text(answer[1]) or ""

    async def forget_alert(self, key: str, thread_ts: str) -> None:
        await self._eval(_FORGET_ALERT, [self._key("alert", key)], thread_ts)

    async def alert_holder(self, key: str) -> str | None:
        return _text(await self._redis.get(self._key("alert", key)))

    async def note_pointer(
        self, key: str, alert_ts: str, ttl_seconds: float, *, add: int = 1, create: bool = True
    ) -> PointerNote | None:
        keys = [self._key("pointer", key)]
        answer: Any = await self._eval(
            _NOTE_POINTER, keys, alert_ts, _ms(ttl_seconds), add, "1" if create else "0"
        )
        if not answer:
            return None
        return PointerNote(int(answer[0]), _text(answer[1]) or "", _text(answer[2]) or "")

    async def set_pointer(self, key: str, pointer_ts: str, ttl_seconds: float) -> None:
        pointer = self._key("pointer", key)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(pointer, "ts", pointer_ts)
            pipe.pexpire(pointer, _ms(ttl_seconds))
            await pipe.execute()

    async def admit_alert_run(self, key: str, run: str, limit: int, window_seconds: float) -> bool:
        keys = [self._key("alertruns", key)]
        return bool(await self._eval(_ADMIT_RUN, keys, run, limit, _ms(window_seconds)))

    async def aclose(self) -> None:
        await self._redis.aclose()


def build_state(redis_url: str | None) -> SharedState:
    return RedisState(redis_url) if redis_url else MemoryState()
