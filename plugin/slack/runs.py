"""Background diagnosis runs for the Slack edge: queue, concurrency limit, one run per thread,
cancellation, live status, and a clean shutdown. Posting the outcome is ``answers``; the words
of the thread are ``wording``; the Slack calls are ``posting``; lost jobs are ``lost``.

Every run is a task the manager keeps a strong reference to. Slack failures are logged and never
crash the process. Promises to the thread:

- every run that started ends with one visible answer: the rendered outcome, or — when Slack
  refuses it (blocks, metadata, length, rate limit after the retries) — a bounded plain-text
  fallback (outcome, conclusion or stop reason / failure code, run id);
- the status message says what actually happened (posted, posted as plain text, or could not
  be posted, with Slack's reason);
- a final answer carries the Evidence button when the observations it cites are kept (for
  ``DIAG_EVIDENCE_TTL_SECONDS``, in the shared state, see ``evidence``), and 👍 / 👎;
- the thread lock lives as long as the run (see ``leases.ThreadLeases``) and a mention into a busy
  thread gets one "busy" reply per run; shared state that cannot be reached gets a polite reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.aio import shielded
from sre_diag.audit.trigger import run_triggered
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult
from sre_diag.errors import InputRejected
from sre_diag.harness.context import new_run_id
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.run import DeferredAudit, Harness
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.answers import AnswerPoster
from sre_diag.slack.blocks import StatusView, render_status
from sre_diag.slack.evidence import EvidenceCollector
from sre_diag.slack.fence import NO_FENCE, Fence
from sre_diag.slack.job_entry import Job
from sre_diag.slack.jobs import JobQueue
from sre_diag.slack.leases import ThreadLeases
from sre_diag.slack.links import LinkMaker
from sre_diag.slack.lost import LostRuns
from sre_diag.slack.pending import PendingRuns
from sre_diag.slack.posting import final_status, post_status, say, update
from sre_diag.slack.progress import ProgressTracker, StatusBoard, StatusBudget
from sre_diag.slack.run_request import RunRequest, job_request, session_id, trigger
from sre_diag.slack.state import Lease, SharedState
from sre_diag.slack.wording import (
    BUSY,
    FAILED_CLOSED,
    FENCED_NOTE,
    INPUT_HINTS,
    NOT_QUEUED,
    RESTARTING,
    UNAVAILABLE,
    status_note,
)

__all__ = [
    "DEFAULT_LOCK_TTL_SECONDS",
    "RunManager",
]

_log = logging.getLogger(__name__)

DEFAULT_LOCK_TTL_SECONDS = 30.0
"""A thread lock's TTL: renewed every third of it while the run lives, so a replica that dies
(or a release that never reaches Redis) frees the thread within this time."""

_CLAIM_GRACE_MIN_SECONDS = 60.0


@dataclass(slots=True)
class _Active:
    key: str
    channel: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    tracker: ProgressTracker | None = None
    fence: Fence = NO_FENCE
    """A queued job's token: every side effect in Slack and the audit record depend on it."""
    audit: DeferredAudit = field(default_factory=DeferredAudit)
    """The run's audit record, written once its final post is settled (:meth:`_audit`)."""


class RunManager:
    """Owns the runs of one process."""

    def __init__(
        self,
        harness: Harness,
        settings: Settings,
        state: SharedState,
        *,
        status_interval_seconds: float = 1.0,
        lock_ttl_seconds: float = DEFAULT_LOCK_TTL_SECONDS,
        status_budget: StatusBudget | None = None,
        replay: bool = False,
        hooks: Sequence[StepHook] = (),
        queue: JobQueue | None = None,
    ) -> None:
        """``queue``: runs go to workers through this queue (the front of ``serve --workers``);
        without it they run in this process."""
        self.harness = harness
        self.queue = queue
        self.settings = settings
        self.links = LinkMaker(settings)
        self.state = state
        self.leases = ThreadLeases(state, lock_ttl_seconds)
        self.board = StatusBoard(status_budget, interval_seconds=status_interval_seconds)
        self.completed: deque[ExecutionResult] = deque(maxlen=200)
        self._semaphore = asyncio.Semaphore(settings.max_concurrent_runs)
        self._interval = status_interval_seconds
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[str, _Active] = {}
        self._queue: list[str] = []
        self._accepting = True
        self._replay = replay
        self._hooks = tuple(hooks)
        # A cancel flag must outlive the time a replica takes to notice it.
        self._flag_ttl = settings.deadline_seconds * 3 + 120
        self.answers = AnswerPoster(harness, settings, state, self.links)
        grace = max(settings.job_claim_after_seconds, _CLAIM_GRACE_MIN_SECONDS)
        self.lost = LostRuns(
            harness,
            settings,
            state,
            self.answers,
            grace_seconds=grace,
            completed=self.completed,
            hooks=self._hooks,
            replaying=replay,
        )
        """Answers a worker (or the front) gives for jobs lost or unreadable."""
        self.pending: PendingRuns | None = None
        if queue is not None:
            self.pending = PendingRuns(
                queue,
                state,
                lock_ttl_seconds=self._queue_lock_ttl,
                claim_seconds=settings.job_claim_after_seconds,
                answer_vanished=partial(self.lost.answer_vanished, queue),
                grace_seconds=grace,
            )

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def queued(self) -> int:
        """Runs waiting for a concurrency slot (counted in ``in_flight`` too)."""
        return len(self._queue)

    # -- submission ------------------------------------------------------------------------

    async def submit(self, req: RunRequest) -> str | None:
        """Start a run in the background; returns its key, or None if it was not started."""
        if not self._accepting:
            await say(req, RESTARTING)
            return None
        key = uuid.uuid4().hex[:16]
        lease = Lease(
            thread_key=f"{req.scope}:{req.channel}:{req.thread_ts}",
            run_key=f"{req.scope}:{key}",
            channel=req.channel,
        )
        try:
            if self.queue is not None:
                claimed = await self._claim_for_queue(lease)
            else:
                claimed = await self.leases.claim(lease)
        except Exception as exc:
            log_failure(
                _log, logging.ERROR, "shared state unreachable, mention declined: %s", exc=exc
            )
            await say(req, UNAVAILABLE)
            return None
        if not claimed:
            await self._busy(req, lease.thread_key)
            return None
        if self.queue is not None:
            return await self._enqueue(req, key, lease)
        active = _Active(key=key, channel=req.channel)
        self._active[key] = active
        self._queue.append(key)
        task = asyncio.create_task(self._run(req, active, lease), name=f"diag-{key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return key

    @property
    def _queue_lock_ttl(self) -> float:
        """A queued run's thread lock: renewed by the front while the run waits (see
        ``PendingRuns``) and by the worker while it runs."""
        return self.settings.job_claim_after_seconds + self.leases.ttl_seconds

    async def _claim_for_queue(self, lease: Lease) -> bool:
        """The thread's lock, held by the shared state until a worker adopts it (or, if the
        worker vanished, until the job is claimed as lost)."""
        return await self.state.claim_thread(lease, self._queue_lock_ttl)

    async def _enqueue(self, req: RunRequest, key: str, lease: Lease) -> str | None:
        """Post the status message and hand the frozen request to the workers."""
        assert self.queue is not None
        active = _Active(key=key, channel=req.channel)
        status_ts = await post_status(req, render_status(self._view(active)))
        job = Job.freeze(
            run_key=key,
            run_id=new_run_id(),
            scope=req.scope,
            channel=req.channel,
            thread_ts=req.thread_ts,
            query=req.query,
            previous_turn=req.previous_turn,
            asked_at=req.asked_at,
            requested_by=req.requested_by,
            replay=req.replay or self._replay,
            status_ts=status_ts,
            trigger=trigger(req, self._replay),
        )
        try:
            entry_id = await self.queue.enqueue(job)
        except Exception as exc:
            log_failure(_log, logging.ERROR, "run queue unreachable, mention declined: %s", exc=exc)
            await shielded(self.state.release_thread(lease))
            await say(req, UNAVAILABLE)
            if status_ts is not None:
                await final_status(req, status_ts, key, NOT_QUEUED)
            return None
        _log.info("run %s queued (%s)", key, job.run_id)
        if self.pending is not None:
            self.pending.add(entry_id, job, lease, req.client)
        return key

    async def adopt_backlog(self, client: AsyncWebClient) -> int:
        """A queueing front at its start: watch (renew the thread locks of, answer if lost)
        every job still in the queue, whoever queued it."""
        return await self.pending.adopt(client) if self.pending is not None else 0

    # -- queued jobs (a worker; lost and unreadable jobs: ``self.lost``) ----------------------

    def start_job(
        self,
        job: Job,
        client: AsyncWebClient,
        on_done: Callable[[], Coroutine[Any, Any, None]],
        fence: Fence,
    ) -> None:
        """Run a queued job here: the same run as an in-process one, in the status message the
        front posted, each side effect conditional on ``fence``; ``on_done`` (the
        acknowledgement) once its thread got its answer."""
        req = job_request(job, client)
        lease = Lease(thread_key=job.thread_key, run_key=job.lease_key, channel=job.channel)
        active = _Active(key=job.run_key, channel=job.channel, fence=fence)
        self._active[active.key] = active
        self._queue.append(active.key)
        self.leases.adopt(lease)

        async def run() -> None:
            try:
                if await _safely(self.state.cancel_requested(lease.run_key)):
                    active.cancel.set()  # cancelled while it waited in the queue
                await self._run(req, active, lease, status_ts=job.status_ts, status_posted=True)
            finally:
                await shielded(on_done())

        task = asyncio.create_task(run(), name=f"diag-job-{job.run_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def fenced(self, run_key: str) -> None:
        """The heartbeat found this run's job taken over: it posts nothing more and stops."""
        active = self._active.get(run_key)
        if active is not None:
            active.fence.lose()
            active.cancel.set()

    @property
    def running_jobs(self) -> int:
        return len(self._tasks)

    async def _busy(self, req: RunRequest, thread_key: str) -> None:
        """One "busy" reply per run holding the thread, whichever replica hears the mention."""
        try:
            due = await self.state.note_busy(thread_key)
        except Exception as exc:  # better a second notice than silence
            log_failure(_log, logging.WARNING, "busy notice state unreachable: %s", exc=exc)
            due = True
        if due:
            await say(req, BUSY)
        else:
            _log.info("mention into a busy thread: already told for this run")

    async def request_cancel(self, run_key: str, channel: str, scope: str = "-:-") -> bool:
        """Cancel a run of this channel, here or on another replica (the channel is checked by
        whoever owns the run's record: this process or the shared state)."""
        active = self._active.get(run_key)
        if active is not None:
            if active.channel != channel:
                return False
            active.cancel.set()
            return True
        return await self.state.request_cancel(f"{scope}:{run_key}", channel, self._flag_ttl)

    async def say_unavailable(self, client: AsyncWebClient, channel: str, thread_ts: str) -> None:
        """The polite reply when shared state cannot be reached before a run is even asked."""
        await say(RunRequest(client, channel, thread_ts, query=""), UNAVAILABLE)

    # -- the run ---------------------------------------------------------------------------

    async def _run(
        self,
        req: RunRequest,
        active: _Active,
        lease: Lease,
        *,
        status_ts: str | None = None,
        status_posted: bool = False,
    ) -> None:
        """One run in its thread. Whatever happens, the thread gets a final message and the
        status message says what happened (``_fail_closed`` when the normal end failed).
        ``status_posted``: the status message is already there (``status_ts``, a queued job's).
        """
        answered = False
        try:
            if not status_posted:
                status_ts = await post_status(req, render_status(self._view(active)))
            tracker = self._tracker(req, active, lease, status_ts)
            active.tracker = tracker
            self._refresh_queue()
            tracker.start()
            collector = EvidenceCollector()
            result = await self._diagnose_when_allowed(req, active, tracker, collector)
            posted = (
                None
                if result is None
                else await self.answers.post_result(req, result, collector, active.fence)
            )
            answered = True  # the outcome, its fallback or the input refusal was attempted
            if result is not None and posted is not None:
                await tracker.finish(status_note(result, posted))
            elif active.fence.lost:
                await tracker.finish(FENCED_NOTE)
        except Exception as exc:  # the run task must never die silently
            log_failure(_log, logging.ERROR, "slack run %s failed: %s", active.key, exc=exc)
        finally:
            if not answered:
                await shielded(self._fail_closed(req, active))
            await shielded(self._audit(active))
            if active.key in self._queue:
                self._queue.remove(active.key)
            self._active.pop(active.key, None)
            await shielded(self.leases.release(lease))

    async def _audit(self, active: _Active) -> None:
        """The run's audit record, once its final post is confirmed or known impossible: by
        this process unless a claimer took the run over (it writes the record then)."""
        if not active.audit.pending:
            return
        try:
            mine = await active.fence.claim_audit()
        except Exception as exc:  # the fence's own retries gave up in an unexpected way
            log_failure(_log, logging.ERROR, "audit record of %s: %s", active.key, exc=exc)
            mine = True
        if mine:
            active.audit.write()
        else:
            active.audit.drop()

    async def _diagnose_when_allowed(
        self,
        req: RunRequest,
        active: _Active,
        tracker: ProgressTracker,
        collector: EvidenceCollector,
    ) -> ExecutionResult | None:
        acquired = await self._wait_for_slot(active)
        try:
            if active.key in self._queue:
                self._queue.remove(active.key)
            self._refresh_queue()
            tracker.update(state="RUNNING", queue_position=None)
            request = DiagnosisRequest(req.query, req.previous_turn, req.asked_at)
            with run_triggered(trigger(req, self._replay)):
                result = await self.harness.diagnose(
                    request,
                    session_id=session_id(req, self._replay),
                    hooks=[tracker, *self._hooks, collector],
                    cancel_event=active.cancel,
                    run_id=req.run_id,
                    audit_gate=None if active.fence is NO_FENCE else active.fence.take_answer,
                    defer_audit=active.audit,
                )
        except InputRejected as rejected:
            hint = INPUT_HINTS.get(rejected.code.value, "I cannot take that input.")
            if not await active.fence.take_answer():
                await tracker.finish(FENCED_NOTE)
                return None
            error = await say(req, hint)
            await active.fence.answered()
            await tracker.finish(
                "Not started: input refused." if error is None else f"Not started: {hint}"
            )
            return None
        finally:
            if acquired:
                self._semaphore.release()
        self.completed.append(result)
        return result

    async def _wait_for_slot(self, active: _Active) -> bool:
        """Wait for a concurrency slot or a cancel, whichever comes first."""
        if active.cancel.is_set():
            return False
        slot = asyncio.ensure_future(self._semaphore.acquire())
        cancelled = asyncio.ensure_future(active.cancel.wait())
        done, _ = await asyncio.wait({slot, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        cancelled.cancel()
        if slot in done:
            return True
        slot.cancel()
        try:
            await slot
        except asyncio.CancelledError:
            return False
        return True  # acquired just before the cancel took effect

    def _view(self, active: _Active) -> StatusView:
        return StatusView(
            run_key=active.key,
            state="QUEUED",
            queue_position=self._position(active.key),
            max_rounds=self.settings.max_model_calls,
        )

    def _tracker(
        self, req: RunRequest, active: _Active, lease: Lease, status_ts: str | None
    ) -> ProgressTracker:
        poll = self._poll_cancel(lease.run_key) if self.state.shared else None
        tracker = ProgressTracker(
            view=self._view(active),
            interval_seconds=self._interval,
            poll_cancel=poll,
            on_cancel_requested=active.cancel.set,
        )
        if status_ts is not None:

            async def publish(v: StatusView) -> None:
                if await active.fence.holds():
                    await update(req, status_ts, render_status(v))

            self.board.add(tracker, publish, workspace=req.scope)
        return tracker

    def _poll_cancel(self, key: str) -> Any:
        async def poll() -> bool:
            return await self.state.cancel_requested(key)

        return poll

    def _position(self, key: str) -> int | None:
        return self._queue.index(key) + 1 if key in self._queue else None

    def _refresh_queue(self) -> None:
        for key in self._queue:
            active = self._active.get(key)
            if active is not None and active.tracker is not None:
                position = self._position(key)
                if active.tracker.view.queue_position != position:
                    active.tracker.update(queue_position=position)

    async def _fail_closed(self, req: RunRequest, active: _Active) -> None:
        """The run ended without its outcome posted: say so, and end the status message."""
        if not await active.fence.take_answer():
            if active.tracker is not None:
                with contextlib.suppress(Exception):
                    await active.tracker.finish(FENCED_NOTE)
            return
        error = await say(req, FAILED_CLOSED)
        await active.fence.answered()
        if active.tracker is not None:
            note = (
                "Failed closed: see the message below."
                if error is None
                else f"Failed closed, and the message saying so could not be posted ({error})."
            )
            try:
                await active.tracker.finish(note)
            except Exception as exc:
                log_failure(_log, logging.WARNING, "final status update failed: %s", exc=exc)

    # -- shutdown ----------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait until no run is in flight (runs submitted meanwhile are awaited too) and every
        finished run's status message shows its final state."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        await self.board.flush()
        await self.harness.drain_audit()

    async def drain(self, timeout_seconds: float | None = None) -> None:
        """Stop taking runs and wait for those in flight; past the timeout, cancel them."""
        self._accepting = False
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_seconds)
        if self._tasks:
            await self.cancel_all()
        await self.board.flush(timeout_seconds)

    async def cancel_all(self) -> None:
        """Cancel every run (each still posts its STOPPED CANCELLED outcome) and wait."""
        for active in list(self._active.values()):
            active.cancel.set()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        self._accepting = False
        await self.cancel_all()
        await self.board.aclose()
        if self.pending is not None:
            await self.pending.aclose()
        await self.leases.aclose()
        await self.harness.aclose()
        await self.state.aclose()


async def _safely(check: Coroutine[Any, Any, bool]) -> bool:
    try:
        return await check
    except Exception as exc:
        log_failure(_log, logging.WARNING, "shared state unreachable: %s", exc=exc)
        return False
