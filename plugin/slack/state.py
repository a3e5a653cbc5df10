"""Shared run state: event dedupe, one run per thread, and cross-replica cancel requests.

In-process by default; with ``DIAG_REDIS_URL`` the same operations go to Redis so that several
replicas serving one Slack app agree on which event was seen, which thread is busy and which run
was asked to stop.
"""

from __future__ import annotations

import time
from typing import Protocol

from redis.asyncio import Redis

__all__ = ["MemoryState", "RedisState", "SharedState", "build_state"]

_PREFIX = "sre-diag"


class SharedState(Protocol):
    """The few atomic operations the Slack edge needs."""

    async def claim_event(self, event_id: str, ttl_seconds: float) -> bool:
        """True the first time ``event_id`` is seen within ``ttl_seconds``."""
        ...

    async def claim_thread(self, thread_key: str, owner: str, ttl_seconds: float) -> bool:
        """True if no other run holds the thread."""
        ...

    async def release_thread(self, thread_key: str, owner: str) -> None: ...

    async def request_cancel(self, run_key: str, ttl_seconds: float) -> None: ...

    async def cancel_requested(self, run_key: str) -> bool: ...

    async def aclose(self) -> None: ...


class MemoryState:
    """Single-process state with expiry on a monotonic clock."""

    def __init__(self) -> None:
        self._expiry: dict[str, float] = {}
        self._owners: dict[str, str] = {}

    def _alive(self, key: str) -> bool:
        expires = self._expiry.get(key)
        if expires is None:
            return False
        if expires <= time.monotonic():
            self._expiry.pop(key, None)
            self._owners.pop(key, None)
            return False
        return True

    def _set(self, key: str, ttl_seconds: float, owner: str = "") -> None:
        self._expiry[key] = time.monotonic() + ttl_seconds
        self._owners[key] = owner
        if len(self._expiry) > 10_000:
            for stale in [k for k, t in self._expiry.items() if t <= time.monotonic()]:
                self._expiry.pop(stale, None)
                self._owners.pop(stale, None)

    async def claim_event(self, event_id: str, ttl_seconds: float) -> bool:
        key = f"event:{event_id}"
        if self._alive(key):
            return False
        self._set(key, ttl_seconds)
        return True

    async def claim_thread(self, thread_key: str, owner: str, ttl_seconds: float) -> bool:
        key = f"thread:{thread_key}"
        if self._alive(key):
            return False
        self._set(key, ttl_seconds, owner)
        return True

    async def release_thread(self, thread_key: str, owner: str) -> None:
        key = f"thread:{thread_key}"
        if self._owners.get(key) == owner:
            self._expiry.pop(key, None)
            self._owners.pop(key, None)

    async def request_cancel(self, run_key: str, ttl_seconds: float) -> None:
        self._set(f"cancel:{run_key}", ttl_seconds)

    async def cancel_requested(self, run_key: str) -> bool:
        return self._alive(f"cancel:{run_key}")

    async def aclose(self) -> None:
        return None


# Release the thread only if this run still owns it (compare-and-delete in one step).
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class RedisState:
    """The same operations on Redis (``SET NX PX`` and a compare-and-delete script)."""

    def __init__(self, url: str) -> None:
        self._redis: Redis = Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)

    async def claim_event(self, event_id: str, ttl_seconds: float) -> bool:
        key = f"{_PREFIX}:event:{event_id}"
        return bool(await self._redis.set(key, "1", nx=True, px=int(ttl_seconds * 1000)))

    async def claim_thread(self, thread_key: str, owner: str, ttl_seconds: float) -> bool:
        key = f"{_PREFIX}:thread:{thread_key}"
        return bool(await self._redis.set(key, owner, nx=True, px=int(ttl_seconds * 1000)))

    async def release_thread(self, thread_key: str, owner: str) -> None:
        await self._redis.eval(_RELEASE, 1, f"{_PREFIX}:thread:{thread_key}", owner)

    async def request_cancel(self, run_key: str, ttl_seconds: float) -> None:
        await self._redis.set(f"{_PREFIX}:cancel:{run_key}", "1", px=int(ttl_seconds * 1000))

    async def cancel_requested(self, run_key: str) -> bool:
        return bool(await self._redis.exists(f"{_PREFIX}:cancel:{run_key}"))

    async def aclose(self) -> None:
        await self._redis.aclose()


def build_state(redis_url: str | None) -> SharedState:
    return RedisState(redis_url) if redis_url else MemoryState()
