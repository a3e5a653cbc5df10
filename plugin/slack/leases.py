"""This process's thread locks kept alive while their runs live (:class:`ThreadLeases`).

The shared state (:mod:`sre_diag.slack.state`) only claims, renews and releases a
:class:`~sre_diag.slack.state.Lease` when asked; this module is the process-side keeper that asks
on time: one background task renews every held lease each third of the TTL, and a release that
does not reach the state is retried in the background until the lease would have expired anyway.
It lives apart because it owns tasks and timing, while the state module holds only the atomic
operations and their backends.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sre_diag.aio import stop_task, stop_tasks, stopping
from sre_diag.log import log_failure
from sre_diag.slack.state import Lease, SharedState

__all__ = ["ThreadLeases"]

_log = logging.getLogger(__name__)


class ThreadLeases:
    """This process's thread locks, kept alive while their runs live.

    One renewal task extends every held lease each ``ttl_seconds / 3`` (one round trip for all
    of them); it stops when no lease is held. A release is tried at once and, if the state
    cannot be reached, retried in the background with growing pauses until the lease would have
    expired anyway.
    """

    def __init__(self, state: SharedState, ttl_seconds: float) -> None:
        self.state = state
        self.ttl_seconds = ttl_seconds
        self._held: dict[str, Lease] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Task[None]] = set()

    @property
    def held(self) -> int:
        return len(self._held)

    async def claim(self, lease: Lease) -> bool:
        """Take the thread for this run (raises when the state is unreachable)."""
        if not await self.state.claim_thread(lease, self.ttl_seconds):
            return False
        self._held[lease.run_key] = lease
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew(), name="diag-thread-leases")
        return True

    def adopt(self, lease: Lease) -> None:
        """Keep alive a lease another process claimed (a queued job's, now run here)."""
        self._held[lease.run_key] = lease
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew(), name="diag-thread-leases")

    async def release(self, lease: Lease) -> None:
        """Stop renewing and release; a failed release goes on in the background."""
        self._held.pop(lease.run_key, None)
        try:
            await self.state.release_thread(lease)
        except Exception as exc:
            log_failure(_log, logging.WARNING, "thread release failed (%s); retrying", exc=exc)
            task = asyncio.create_task(self._retry_release(lease), name="diag-thread-release")
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _renew(self) -> None:
        try:
            while self._held and not stopping():
                await asyncio.sleep(self.ttl_seconds / 3)
                await self._renew_once()
        finally:
            self._renewer = None

    async def _renew_once(self) -> None:
        leases = list(self._held.values())
        try:
            lost = await self.state.renew_threads(leases, self.ttl_seconds)
        except Exception as exc:  # the next round tries again; the TTL covers two misses
            log_failure(_log, logging.WARNING, "thread lease renewal failed: %s", exc=exc)
            return
        for lease in lost:
            if lease.run_key in self._held:
                _log.error("thread lease of run %s was lost while the run lives", lease.run_key)
        for lease in leases:
            if lease.run_key not in self._held:  # released while this renewal was on its way
                await self.release(lease)

    async def _retry_release(self, lease: Lease) -> None:
        deadline = time.monotonic() + self.ttl_seconds
        pause = 0.25
        while time.monotonic() < deadline and not stopping():
            await asyncio.sleep(pause)
            try:
                await self.state.release_thread(lease)
            except Exception as exc:
                log_failure(_log, logging.WARNING, "thread release retry failed: %s", exc=exc)
                pause = min(pause * 2, 5.0)
                continue
            _log.info("thread released on retry")
            return
        _log.warning("thread release gave up; the lease expires by its TTL")

    async def aclose(self, timeout_seconds: float = 5.0) -> None:
        """Stop renewing; give background releases a bounded chance to finish."""
        self._held.clear()
        await stop_task(self._renewer)
        if self._releases:
            _, pending = await asyncio.wait(set(self._releases), timeout=timeout_seconds)
            await stop_tasks(pending)
