"""The front's memory of the runs it queued and has not seen answered.

Every :data:`WATCH_SECONDS` (or a third of the lock's lifetime, if shorter) one round trip
(:meth:`JobQueue.watch`) renews the thread locks of the runs still waiting or running — so a
backlog longer than a lock's lifetime never lets a follow-up mention start a second run in a
busy thread — and tells which runs were answered
(forgotten) and which vanished: no stream entry, no answer, and no worker saying it runs them
(Redis restarted empty, the stream deleted). A run still vanished after :func:`confirm_seconds`
(longer than a worker's heartbeat, which re-creates the marks of the runs it holds) is answered
by the front in its thread: ``FAILED AGENT_ERROR QUEUE_LOST``, after it took the run's token
(``sre_diag.slack.fence``), so a worker can never answer it too. Nothing stays "queued" forever.

The memory is the front process's, but the runs are the queue's: a front that starts adopts
every job still in the stream (:meth:`PendingRuns.adopt`, whichever front queued it), so the
thread locks of a backlog outlive the front that queued it — a follow-up in a busy thread after
a restart still meets the lock, never a second run. Several fronts may watch one run: renewing
a lock with its own token is harmless, and answering a vanished run takes its token first, so
only one of them answers it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.aio import stop_task, stop_tasks, stopping
from sre_diag.log import log_failure
from sre_diag.slack.fence import TakeoverVerdict
from sre_diag.slack.job_entry import Job
from sre_diag.slack.jobs import JobQueue, WatchedRun, WatchState
from sre_diag.slack.state import Lease, RedisState, SharedState

__all__ = ["WATCH_SECONDS", "PendingRuns", "confirm_seconds"]

_log = logging.getLogger(__name__)

WATCH_SECONDS = 2.0
_HEARTBEAT_MAX_SECONDS = 10.0

AnswerVanished = Callable[[Job, str, AsyncWebClient], Awaitable[None]]


def confirm_seconds(claim_seconds: float) -> float:
    """How long a run must look vanished before the front answers it: one and a half worker
    heartbeats (a third of the claim time, at most 10 s) plus a second."""
    return min(claim_seconds / 3, _HEARTBEAT_MAX_SECONDS) * 1.5 + 1.0


@dataclass(slots=True)
class _Pending:
    entry_id: str
    job: Job
    lease: Lease
    client: AsyncWebClient
    vanished_since: float | None = None
    taking: bool = False
    """The front is taking this run over (its answer may be this front's already)."""


class PendingRuns:
    """The runs this front queued, watched until answered."""

    def __init__(
        self,
        queue: JobQueue,
        state: SharedState,
        *,
        lock_ttl_seconds: float,
        claim_seconds: float,
        answer_vanished: AnswerVanished,
        grace_seconds: float = 60.0,
    ) -> None:
        self.queue = queue
        self.state = state
        self.lock_ttl_seconds = lock_ttl_seconds
        self.confirm_seconds = confirm_seconds(claim_seconds)
        self._answer_vanished = answer_vanished
        self._grace = grace_seconds
        self._runs: dict[str, _Pending] = {}
        self._task: asyncio.Task[None] | None = None
        self._claimer = f"front-{uuid.uuid4().hex[:8]}"
        self._failing = False
        self._answering: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._runs)

    async def adopt(self, client: AsyncWebClient) -> int:
        """Watch every job still in the stream that this front does not know yet (queued by a
        front that restarted, or by another replica); how many were adopted (0 when the queue
        is out of reach: the workers still answer them)."""
        try:
            backlog = await self.queue.backlog()
        except Exception as exc:
            log_failure(_log, logging.WARNING, "queue backlog not adopted: %s", exc=exc)
            return 0
        adopted = 0
        for entry_id, job in backlog:
            if job.run_id in self._runs:
                continue
            lease = Lease(thread_key=job.thread_key, run_key=job.lease_key, channel=job.channel)
            self.add(entry_id, job, lease, client)
            adopted += 1
        if adopted:
            _log.info("adopted %d queued runs from the stream", adopted)
        return adopted

    def add(self, entry_id: str, job: Job, lease: Lease, client: AsyncWebClient) -> None:
        self._runs[job.run_id] = _Pending(entry_id, job, lease, client)
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="diag-pending-runs")

    async def _watch(self) -> None:
        try:
            while self._runs and not stopping():
                await asyncio.sleep(min(WATCH_SECONDS, self.lock_ttl_seconds / 3))
                await self.watch_once()
        finally:
            self._task = None

    def _watched(self, run: _Pending) -> WatchedRun:
        assert isinstance(self.state, RedisState)
        lock_key, record_key = self.state.lease_keys(run.lease)
        return WatchedRun(
            entry_id=run.entry_id,
            run_id=run.job.run_id,
            lock_key=lock_key,
            record_key=record_key,
            token=run.lease.run_key,
            channel=run.lease.channel,
        )

    async def watch_once(self) -> None:
        """One look at every run: forget the answered, answer the vanished."""
        runs = list(self._runs.values())
        if not runs or not isinstance(self.state, RedisState):
            return
        try:
            states = await self.queue.watch(
                [self._watched(r) for r in runs], self.lock_ttl_seconds, self.confirm_seconds
            )
        except Exception as exc:
            if not self._failing:
                log_failure(_log, logging.WARNING, "queued runs not watched: %s; retrying", exc=exc)
            self._failing = True
            return
        self._failing = False
        now = time.monotonic()
        for run, state in zip(runs, states, strict=True):
            if run.taking:
                self._spawn(run)  # a takeover whose reply was lost: asked again (idempotent)
            elif state is WatchState.DONE:
                self._runs.pop(run.job.run_id, None)
            elif state is WatchState.PENDING:
                run.vanished_since = None
            elif run.vanished_since is None:
                run.vanished_since = now
            elif now - run.vanished_since >= self.confirm_seconds:
                run.taking = True
                self._spawn(run)

    def _spawn(self, run: _Pending) -> None:
        """Answer on a task of its own: a slow Slack never delays the other runs' renewals."""
        if any(t.get_name() == f"diag-vanished-{run.job.run_id}" for t in self._answering):
            return
        task = asyncio.create_task(self._answer(run), name=f"diag-vanished-{run.job.run_id}")
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, run: _Pending) -> None:
        try:
            taken = await self.queue.takeover(run.job.run_id, self._claimer, self._grace)
        except Exception as exc:
            log_failure(
                _log, logging.WARNING, "vanished run %s not taken over: %s", run.job.run_id, exc=exc
            )
            return
        if taken.verdict is TakeoverVerdict.WAIT:
            return
        self._runs.pop(run.job.run_id, None)
        if taken.verdict is TakeoverVerdict.TAKEN:
            try:
                await self._answer_vanished(run.job, taken.token, run.client)
            except Exception as exc:
                log_failure(
                    _log, logging.ERROR, "vanished run %s not answered: %s", run.job.run_id, exc=exc
                )

    async def aclose(self, timeout_seconds: float = 5.0) -> None:
        """Stop watching; answers being posted get a bounded chance to finish."""
        await stop_task(self._task)
        self._task = None
        if self._answering:
            await asyncio.wait(set(self._answering), timeout=timeout_seconds)
            await stop_tasks(set(self._answering))
