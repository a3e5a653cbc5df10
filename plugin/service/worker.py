"""``sre-diag worker``: runs the diagnoses the Slack front queued (CONTRACTS §1).

A worker takes jobs from the run queue (``sre_diag.slack.jobs``) while it has a free slot
(``DIAG_MAX_CONCURRENT_RUNS``; its model HTTP pool has that many connections), runs each with the
same ``RunManager`` logic as an in-process run (status updates in the message the front posted,
the answer and its plain fallback, thread leases renewed in Redis, Cancel through Redis) and
acknowledges a job once its thread got its answer.

A job is taken with its fencing token (``sre_diag.slack.fence``): the run's progress updates,
answer, fallback and audit record are conditional on it, so a worker that stalled past the claim
time and wakes after another worker claimed its job posts nothing more (its run is cancelled).
Every third of ``DIAG_JOB_CLAIM_SECONDS`` (at most every 10 s) it touches the jobs it still holds
(their heartbeat), drops the acknowledged entries from the stream, and claims the jobs idle
longer than that: their worker vanished (SIGKILL, OOM, a lost machine) or stalled. A lost job is
never run again: the claimer takes its token, its thread gets ``FAILED AGENT_ERROR WORKER_LOST``
and its audit record is written. An entry that is not a job (``jobs.Poison``) is dead-lettered
and answered where its thread can be identified; one entry never harms the others of its batch,
and a missing stream or group (Redis restarted empty) is created again.

SIGTERM or SIGINT: stop taking jobs, let the runs in flight end within their deadlines (past the
deadline plus 5 s they are cancelled and still post their outcome), acknowledge them, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.aio import stop_task, stop_tasks, stopping
from sre_diag.errors import ConfigError
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack import add_retry_handlers
from sre_diag.slack.job_entry import Job, Poison
from sre_diag.slack.jobs import DEFAULT_STREAM, JobQueue, Taken
from sre_diag.slack.runs import DEFAULT_LOCK_TTL_SECONDS, RunManager
from sre_diag.slack.state import RedisState, connect_redis

__all__ = ["Worker", "heartbeat_seconds", "run_worker"]

_log = logging.getLogger(__name__)

EXIT_OK = 0
_READ_BLOCK_SECONDS = 0.5
_MAX_HEARTBEAT_SECONDS = 10.0
_DRAIN_SLACK_SECONDS = 5.0
_RETRY_SECONDS = 1.0
_RETRY_FIRST_SECONDS = 0.1
_ANSWER_PATIENCE_MIN_SECONDS = 60.0
_RETRY_MAX_SECONDS = 2.0


def _check(settings: Settings) -> tuple[str, str]:
    if settings.redis_url is None:
        raise ConfigError("DIAG_REDIS_URL is required: a worker takes its jobs from Redis")
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is required: a worker posts to Slack")
    return settings.redis_url.get_secret_value(), settings.slack_bot_token.get_secret_value()


class Worker:
    """One worker process's loop: take jobs, run them, claim the lost ones."""

    def __init__(
        self,
        settings: Settings,
        *,
        stream: str = DEFAULT_STREAM,
        status_interval_seconds: float = 1.0,
        lock_ttl_seconds: float = DEFAULT_LOCK_TTL_SECONDS,
    ) -> None:
        from sre_diag.wiring import build_harness

        redis_url, token = _check(settings)
        self.settings = settings
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._redis: Redis = connect_redis(redis_url, socket_timeout=_READ_BLOCK_SECONDS + 5.0)
        self.queue = JobQueue(self._redis, stream)
        self.client = (
            AsyncWebClient(token=token, base_url=settings.slack_api_url)
            if settings.slack_api_url
            else AsyncWebClient(token=token)
        )
        add_retry_handlers(self.client)
        harness = build_harness(settings, model_connections=settings.max_concurrent_runs)
        self.manager = RunManager(
            harness,
            settings,
            RedisState(redis_url),
            status_interval_seconds=status_interval_seconds,
            lock_ttl_seconds=lock_ttl_seconds,
        )
        self._running: dict[str, tuple[Job, str]] = {}
        self._freed = asyncio.Event()
        self._abandon = asyncio.Event()
        self._answering: set[asyncio.Task[None]] = set()
        self._claimed: set[str] = set()
        self.claim_seconds = settings.job_claim_after_seconds

    @property
    def free_slots(self) -> int:
        """Slots for more jobs: the jobs taken and not yet answered count (a job leaves
        ``_running`` before ``_freed`` is set, so a freed slot is seen when the taker wakes)."""
        return self.settings.max_concurrent_runs - len(self._running)

    async def run(self, stop: asyncio.Event) -> int:
        """Take jobs until ``stop``; then drain and close. The exit code."""
        heartbeat: asyncio.Task[None] | None = None
        try:
            if not await self._ready(stop) or not await self._warm(stop):
                return EXIT_OK
            _log.info(
                "worker %s ready: up to %d run(s) at a time, lost jobs claimed after %g s",
                self.consumer,
                self.settings.max_concurrent_runs,
                self.claim_seconds,
            )
            heartbeat = asyncio.create_task(self._heartbeat(), name="diag-worker-heartbeat")
            claims = asyncio.create_task(self._claims(stop), name="diag-worker-claims")
            await self._take(stop)
            _log.info("stop signal received: taking no more jobs")
        finally:
            await self._drain(heartbeat, claims)
        _log.info("worker %s stopped", self.consumer)
        return EXIT_OK

    async def _drain(
        self, heartbeat: asyncio.Task[None] | None, claims: asyncio.Task[None] | None
    ) -> None:
        """Runs in flight end within their deadlines (past the deadline plus 5 s they are
        cancelled, and a run still waiting for Redis to take its answer gives it up, its job
        left pending for a claimer); lost jobs being answered finish; then close."""
        bound = self.settings.deadline_seconds + _DRAIN_SLACK_SECONDS
        abandon = asyncio.get_running_loop().call_later(bound, self._abandon.set)
        try:
            in_flight = self.manager.running_jobs
            if in_flight:
                _log.info("draining %d run(s)", in_flight)
            await stop_task(claims)
            await self.manager.drain(bound)
            await self.manager.wait_idle()
            if self._answering:
                await asyncio.wait(set(self._answering), timeout=_DRAIN_SLACK_SECONDS)
        finally:
            abandon.cancel()
            await stop_tasks(set(self._answering))
            await stop_task(heartbeat)
            await self.manager.close()
            await self._redis.aclose()

    async def _ready(self, stop: asyncio.Event) -> bool:
        """Create the consumer group if needed; False when stopped before Redis answered."""
        while not stop.is_set():
            try:
                await self.queue.ensure_group()
                return True
            except Exception as exc:
                log_failure(_log, logging.ERROR, "run queue unreachable: %s; retrying", exc=exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _RETRY_SECONDS)
        return False

    async def _warm(self, stop: asyncio.Event) -> bool:
        """Load the framework's lazy parts and the runbook index before the first job (off the
        loop: a first run would otherwise stall the heartbeats of the others for seconds);
        False when stopped first. A failure here is logged: the runs report it themselves."""
        from sre_diag.wiring import warm_up

        warming = asyncio.create_task(warm_up(self.manager.harness), name="diag-worker-warm-up")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({warming, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not warming.done():
            await stop_task(warming)
            return False
        if (exc := warming.exception()) is not None:
            log_failure(_log, logging.ERROR, "warm-up failed: %s", exc=exc)
        return True

    async def _take(self, stop: asyncio.Event) -> None:
        block_ms = int(_READ_BLOCK_SECONDS * 1000)
        pause = _RETRY_FIRST_SECONDS
        while not stop.is_set():
            free = self.free_slots
            if free <= 0:
                await self._wait_for_slot(stop)
                continue
            try:
                entries = await self.queue.read(self.consumer, free, block_ms)
            except Exception as exc:
                log_failure(_log, logging.ERROR, "reading the run queue failed: %s", exc=exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
                pause = min(pause * 2, _RETRY_MAX_SECONDS)
                continue
            pause = _RETRY_FIRST_SECONDS
            # Entries read are this worker's even if a stop came meanwhile: they are run. Each
            # is handled on its own: one that fails harms none of the others.
            for entry_id, parsed in entries:
                try:
                    await self._accept(entry_id, parsed)
                except Exception as exc:
                    log_failure(_log, logging.ERROR, "job %s not started: %s", entry_id, exc=exc)

    async def _wait_for_slot(self, stop: asyncio.Event) -> None:
        self._freed.clear()
        waits = {asyncio.ensure_future(self._freed.wait()), asyncio.ensure_future(stop.wait())}
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()

    async def _accept(self, entry_id: str, parsed: Job | Poison) -> None:
        if entry_id in self._running:
            return  # delivered again (its group was created anew) while it runs here
        if isinstance(parsed, Poison):
            await self.manager.lost.answer_poison(
                entry_id, parsed, self.client, self.queue, self.consumer
            )
            return
        taken, token = await self.queue.take(self.consumer, entry_id, parsed)
        if taken is Taken.ANSWERED:
            _log.warning("job %s (%s) was answered already: not run again", entry_id, parsed.run_id)
            await self._ack(entry_id)
        elif taken is Taken.NOT_OURS:
            _log.warning("job %s was claimed by another worker before it started here", entry_id)
        else:
            self._start(entry_id, parsed, token)

    def _start(self, entry_id: str, job: Job, token: str) -> None:
        self._running[entry_id] = (job, token)
        fence = self.queue.fence(
            job, token, give_up_seconds=_answer_patience(self.claim_seconds), abandon=self._abandon
        )

        async def done() -> None:
            # A job whose run lost its token is another's now (a claimer answers it, and acks
            # it); one whose answer was given up stays pending for a claimer.
            if fence.gave_up:
                _log.error("job %s left pending for a claimer: its answer was not posted", entry_id)
            elif not fence.lost:
                await self._ack(entry_id)
            self._running.pop(entry_id, None)
            self._freed.set()

        _log.info("job %s taken by %s: run %s", entry_id, self.consumer, job.run_id)
        self.manager.start_job(job, self.client, done, fence)

    async def _ack(self, entry_id: str) -> None:
        try:
            await self.queue.ack(entry_id)
        except Exception as exc:
            log_failure(_log, logging.ERROR, "job %s not acknowledged: %s", entry_id, exc=exc)

    async def _heartbeat(self) -> None:
        """Touch the jobs held here and trim the stream: on its own task, so that nothing a
        claim waits for (a slow Slack) ever delays a touch."""
        interval = heartbeat_seconds(self.claim_seconds)
        while not stopping():
            await asyncio.sleep(interval)
            await self._touch()
            try:
                await self.queue.trim()
            except Exception as exc:
                log_failure(_log, logging.WARNING, "trimming the run queue failed: %s", exc=exc)

    async def _claims(self, stop: asyncio.Event) -> None:
        """Claim the lost jobs every heartbeat interval; each is answered on a task of its own
        (a drain lets those finish)."""
        interval = heartbeat_seconds(self.claim_seconds)
        while not stopping() and not stop.is_set():
            await asyncio.sleep(interval)
            await self._claim_lost()

    async def _touch(self) -> None:
        running = [(e, job.run_id, token) for e, (job, token) in self._running.items()]
        try:
            lost = await self.queue.touch(self.consumer, running)
        except Exception as exc:
            log_failure(_log, logging.WARNING, "job heartbeat failed: %s", exc=exc)
            return
        for index in lost:
            entry_id, run_id, _ = running[index]
            job, _ = self._running.get(entry_id, (None, ""))
            if job is not None:
                _log.error("job %s (%s) was taken over by another worker: cancelled here",
                           entry_id, run_id)  # fmt: skip
                self.manager.fenced(job.run_key)

    async def _claim_lost(self) -> None:
        try:
            lost = await self.queue.claim_lost(self.consumer, self.claim_seconds)
        except Exception as exc:
            log_failure(_log, logging.WARNING, "claiming lost jobs failed: %s", exc=exc)
            return
        for entry_id, parsed in lost:
            if entry_id in self._running or entry_id in self._claimed:
                continue  # our own (a heartbeat that came late), or being answered already
            self._claimed.add(entry_id)
            task = asyncio.create_task(
                self._answer_claimed(entry_id, parsed), name=f"diag-claim-{entry_id}"
            )
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

    async def _answer_claimed(self, entry_id: str, parsed: Job | Poison) -> None:
        try:
            if isinstance(parsed, Poison):
                await self.manager.lost.answer_poison(
                    entry_id, parsed, self.client, self.queue, self.consumer
                )
            elif await self.manager.lost.answer_lost(
                parsed, self.client, self.queue, self.consumer
            ):
                await self._ack(entry_id)
        except Exception as exc:
            log_failure(_log, logging.ERROR, "lost job %s not answered: %s", entry_id, exc=exc)
        finally:
            self._claimed.discard(entry_id)


def _answer_patience(claim_seconds: float) -> float:
    """How long a finished run waits for Redis to take its answer: its token is checked
    atomically, so waiting is always safe; the bound only keeps a worker from waiting forever
    (a claimer answers the job then)."""
    return max(2 * claim_seconds, _ANSWER_PATIENCE_MIN_SECONDS)


def heartbeat_seconds(claim_seconds: float) -> float:
    """How often a worker touches its jobs: a third of the claim time, at most every 10 s."""
    return min(claim_seconds / 3, _MAX_HEARTBEAT_SECONDS)


async def run_worker(settings: Settings, stop: asyncio.Event) -> int:
    """``sre-diag worker``: raises ``ConfigError`` (exit 2) without Redis or a bot token."""
    _check(settings)
    return await Worker(settings).run(stop)
