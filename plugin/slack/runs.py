"""Background diagnosis runs for the Slack edge: queue, concurrency limit, one run per thread,
cancellation, live status, posting the outcome, and a clean shutdown.

Every run is a task the manager keeps a strong reference to. Slack failures are logged and never
crash the process. Promises to the thread:

- every run that started ends with one visible answer: the rendered outcome, or — when Slack
  refuses it (blocks, metadata, length, rate limit after the retries) — a bounded plain-text
  fallback (outcome, conclusion or stop reason / failure code, run id);
- the status message says what actually happened (posted, posted as plain text, or could not
  be posted, with Slack's reason);
- a final answer carries the Evidence button when the observations it cites are kept (for
  ``DIAG_EVIDENCE_TTL_SECONDS``, in the shared state, see ``evidence``), and 👍 / 👎;
- the thread lock lives as long as the run (see ``state.ThreadLeases``) and a mention into a busy
  thread gets one "busy" reply per run; shared state that cannot be reached gets a polite reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from plugin.audit.trigger import Trigger, run_triggered
from plugin.contract.request import DiagnosisRequest, PreviousTurn
from plugin.contract.result import ExecutionResult, Outcome
from plugin.contract.text import STOP_EXPLANATIONS
from plugin.errors import InputRejected
from plugin.harness.context import new_run_id
from plugin.harness.hooks import StepHook
from plugin.harness.run import Harness
from plugin.settings import Settings
from plugin.slack.evidence import (
    EvidenceCollector,
    EvidenceRecord,
    evidence_key,
    evidence_record,
)
from plugin.slack.fence import NO_FENCE, Fence, TakeoverVerdict
from plugin.slack.jobs import Job, JobQueue, Poison
from plugin.slack.links import LinkMaker
from plugin.slack.pending import PendingRuns
from plugin.slack.progress import ProgressTracker, StatusBoard, StatusBudget
from plugin.slack.render import (
    QUEUE_LOST_DETAIL,
    WORKER_LOST_DETAIL,
    AnswerExtras,
    SlackMessage,
    StatusView,
    escape,
    render_result,
    render_status,
)
from plugin.slack.state import Lease, SharedState, ThreadLeases
from plugin.slack.turns import answered_in_thread, turn_metadata

__all__ = [
    "DEFAULT_LOCK_TTL_SECONDS",
    "RunManager",
    "RunRequest",
    "fallback_text",
]

_log = logging.getLogger(__name__)

DEFAULT_LOCK_TTL_SECONDS = 30.0
"""A thread lock's TTL: renewed every third of it while the run lives, so a replica that dies
(or a release that never reaches Redis) frees the thread within this time."""

_INPUT_HINTS = {
    "BLANK_QUERY": "Mention me with a question: the service, the time window and the symptom.",
    "QUERY_TOO_LARGE": "That question is longer than I accept; please shorten it.",
    "PREVIOUS_TURN_TOO_LARGE": "This thread's previous answer is too large to build on; "
    "start a new thread.",
    "INPUT_TOO_LARGE": "Question plus previous answer exceed what I accept; shorten the question "
    "or start a new thread.",
}
BUSY = "A diagnosis is already running in this thread; I will answer here when it ends."
UNAVAILABLE = (
    "I cannot take this request right now: my shared run state is unreachable. "
    "Please ask again in a few minutes."
)
_RESTARTING = "I am restarting; please ask again in a minute."
_LOST_NOTE = "Failed closed: the worker running this diagnosis was lost; see the message below."
_QUEUE_LOST_NOTE = "Failed closed: the run queue lost this request; see the message below."
_POISON = (
    "I could not run this request: it reached the diagnosis worker in a form it cannot read "
    "({reason}). Nothing was run; please ask again."
)
_POISON_NOTE = "Failed closed: the request could not be read by the worker."
_CLAIM_GRACE_MIN_SECONDS = 60.0
_FENCED_NOTE = "Fenced: another worker answers this run."
_NOT_QUEUED = "Not started: the run queue is unreachable."
_FAILED_CLOSED = (
    "The diagnosis failed closed: it ended without an answer I can show. Nothing was "
    "concluded; please ask again."
)
_SLACK_ERROR = re.compile(r"[a-z0-9_]{1,60}")
_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")
_CODE = re.compile(r"[A-Za-z0-9_-]+")
_GIST_MAX = 700
_FALLBACK_MAX = 1200


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One diagnosis asked for in a thread."""

    client: AsyncWebClient
    channel: str
    thread_ts: str
    query: str
    previous_turn: PreviousTurn | None = None
    requested_by: str | None = None
    replay: bool = False
    scope: str = "-:-"
    asked_at: datetime | None = None
    """When the question was asked (the mention's ``ts``, or the recorded one on a replay)."""
    """``app_id:team_id`` of the event: shared-state keys never cross apps or workspaces."""
    run_id: str | None = None
    """The run's id when it was given before the run (a queued job's), else the harness's."""
    trigger: Trigger = Trigger.MENTION
    """What started the run (its audit record and ``diag_runs_total`` say so)."""


@dataclass(slots=True)
class _Active:
    key: str
    channel: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    tracker: ProgressTracker | None = None
    fence: Fence = NO_FENCE
    """A queued job's token: every side effect in Slack and the audit record depend on it."""


@dataclass(frozen=True, slots=True)
class _Posted:
    """Where the outcome ended up: the full answer, the plain fallback, or nowhere."""

    full: bool
    plain: bool
    refusal: str = ""
    """Why the full answer is not in the thread (see ``_refusal``)."""
    fallback_error: str | None = None


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
        self.pending: PendingRuns | None = None
        if queue is not None:
            self.pending = PendingRuns(
                queue,
                state,
                lock_ttl_seconds=self._queue_lock_ttl,
                claim_seconds=settings.job_claim_after_seconds,
                answer_vanished=self._answer_vanished,
                grace_seconds=self.claim_grace_seconds,
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
            await self._say(req, _RESTARTING)
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
            _log.error("shared state unreachable, mention declined: %s", type(exc).__name__)
            await self._say(req, UNAVAILABLE)
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

    @property
    def claim_grace_seconds(self) -> float:
        """How long a claimer lets an owner that took the answer finish posting it."""
        return max(self.settings.job_claim_after_seconds, _CLAIM_GRACE_MIN_SECONDS)

    async def _claim_for_queue(self, lease: Lease) -> bool:
        """The thread's lock, held by the shared state until a worker adopts it (or, if the
        worker vanished, until the job is claimed as lost)."""
        return await self.state.claim_thread(lease, self._queue_lock_ttl)

    async def _enqueue(self, req: RunRequest, key: str, lease: Lease) -> str | None:
        """Post the status message and hand the frozen request to the workers."""
        assert self.queue is not None
        active = _Active(key=key, channel=req.channel)
        status_ts = await self._post_status(req, active)
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
            trigger=self._trigger(req),
        )
        try:
            entry_id = await self.queue.enqueue(job)
        except Exception as exc:
            _log.error("run queue unreachable, mention declined: %s", type(exc).__name__)
            await _shielded(self.state.release_thread(lease))
            await self._say(req, UNAVAILABLE)
            if status_ts is not None:
                await self._final_status(req, status_ts, key, _NOT_QUEUED)
            return None
        _log.info("run %s queued (%s)", key, job.run_id)
        if self.pending is not None:
            self.pending.add(entry_id, job, lease, req.client)
        return key

    async def _final_status(self, req: RunRequest, status_ts: str, key: str, note: str) -> None:
        view = StatusView(run_key=key, state="FINISHED", final_note=note)
        try:
            await self._update(req, status_ts, render_status(view))
        except Exception as exc:
            _log.warning("final status update failed: %s", _slack_error(exc))

    # -- queued jobs (a worker) ---------------------------------------------------------------

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
        req = _job_request(job, client)
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
                await _shielded(on_done())

        task = asyncio.create_task(run(), name=f"diag-job-{job.run_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def fenced(self, run_key: str) -> None:
        """The heartbeat found this run's job taken over: it posts nothing more and stops."""
        active = self._active.get(run_key)
        if active is not None:
            active.fence.lose()
            active.cancel.set()

    async def answer_lost(
        self, job: Job, client: AsyncWebClient, queue: JobQueue, claimer: str
    ) -> bool:
        """A job whose worker vanished or stalled: never run again. The claimer takes its token
        first (the owner, if it wakes, can then post nothing), then the thread is told it
        failed (``AGENT_ERROR WORKER_LOST``, with the Replay shortcut) and its audit record is
        written. False when its owner is posting the answer right now (ask again later)."""
        taken = await queue.takeover(job.run_id, claimer, self.claim_grace_seconds)
        if taken.verdict is TakeoverVerdict.WAIT:
            _log.warning("run %s: its owner is posting its answer; not claimed", job.run_id)
            return False
        if taken.verdict is TakeoverVerdict.DONE:
            _log.info("run %s was answered already: claimed and acknowledged", job.run_id)
            return True
        fence = queue.answer_fence(job, taken.token, self.claim_grace_seconds)
        if taken.stale and await self._answered_in_thread(job, client):
            _log.warning("run %s: its silent owner had posted its answer; not again", job.run_id)
            await fence.answered()
            return True
        _log.error("run %s (%s): its worker was lost; answered as failed", job.run_key, job.run_id)
        await self._answer_failed(job, client, WORKER_LOST_DETAIL, _LOST_NOTE, fence)
        return True

    async def _answer_vanished(self, job: Job, token: str, client: AsyncWebClient) -> None:
        """The front's answer for a run the queue lost (its token already taken). Redis may
        have lost the run's answer mark with the queue: the thread is read first."""
        assert self.queue is not None
        fence = self.queue.answer_fence(job, token, self.claim_grace_seconds)
        if await self._answered_in_thread(job, client):
            _log.warning("run %s: answered before the queue lost it; not again", job.run_id)
            await fence.answered()
            return
        _log.error(
            "run %s (%s): the run queue lost it; answered as failed", job.run_key, job.run_id
        )
        await self._answer_failed(job, client, QUEUE_LOST_DETAIL, _QUEUE_LOST_NOTE, fence)

    async def _answered_in_thread(self, job: Job, client: AsyncWebClient) -> bool:
        """Whether the run's answer is in its thread already; False when Slack cannot say (an
        answer too many is then better than none)."""
        try:
            return await answered_in_thread(client, job.channel, job.thread_ts, job.run_id)
        except Exception as exc:
            _log.warning("thread of %s not read: %s", job.run_id, _slack_error(exc))
            return False

    async def _answer_failed(
        self, job: Job, client: AsyncWebClient, detail: str, note: str, fence: Fence
    ) -> None:
        """Answer a run that did not run to its end here: its audit record, the answer (marked
        posted right after it is), the status message's last word, the thread released."""
        req = _job_request(job, client)
        with run_triggered(self._trigger(req)):
            result = self.harness.record_lost(
                job.run_id,
                session_id=self._session_id(req),
                asked_at=req.asked_at,
                detail=detail,
                hooks=self._hooks,
            )
        self.completed.append(result)
        await self._post_result(req, result, EvidenceCollector(), fence)
        if job.status_ts is not None:
            await self._final_status(req, job.status_ts, job.run_key, note)
        lease = Lease(thread_key=job.thread_key, run_key=job.lease_key, channel=job.channel)
        await _shielded(self.state.release_thread(lease))

    async def answer_poison(
        self,
        entry_id: str,
        poison: Poison,
        client: AsyncWebClient,
        queue: JobQueue,
        claimer: str,
    ) -> None:
        """An entry that is not a runnable job: dead-lettered with its reason, and answered in
        its thread when the entry names one of our admin channels (once: its token is taken
        first when it names its run)."""
        _log.error("job %s refused (%s): moved to %s", entry_id, poison.reason, queue.dead_stream)
        answer = poison.channel in self.settings.admin_channels and poison.thread_ts is not None
        token = ""
        if answer and poison.run_id is not None:
            taken = await queue.takeover(poison.run_id, claimer, self.claim_grace_seconds)
            answer = taken.verdict is TakeoverVerdict.TAKEN
            token = taken.token
        if answer:
            await self._answer_poison(poison, client)
        await queue.dead_letter(entry_id, poison)
        if token and poison.run_id is not None:
            await queue.mark_answered(poison.run_id, token)

    async def _answer_poison(self, poison: Poison, client: AsyncWebClient) -> None:
        assert poison.channel is not None and poison.thread_ts is not None
        req = RunRequest(client, poison.channel, poison.thread_ts, query="")
        await self._say(req, _POISON.format(reason=poison.reason))
        if poison.status_ts is not None:
            await self._final_status(req, poison.status_ts, poison.run_key or "-", _POISON_NOTE)
        if poison.scope is not None and poison.run_key is not None:
            lease = Lease(
                thread_key=f"{poison.scope}:{poison.channel}:{poison.thread_ts}",
                run_key=f"{poison.scope}:{poison.run_key}",
                channel=poison.channel,
            )
            await _shielded(self.state.release_thread(lease))

    @property
    def running_jobs(self) -> int:
        return len(self._tasks)

    async def _busy(self, req: RunRequest, thread_key: str) -> None:
        """One "busy" reply per run holding the thread, whichever replica hears the mention."""
        try:
            due = await self.state.note_busy(thread_key)
        except Exception as exc:  # better a second notice than silence
            _log.warning("busy notice state unreachable: %s", type(exc).__name__)
            due = True
        if due:
            await self._say(req, BUSY)
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
        await self._say(RunRequest(client, channel, thread_ts, query=""), UNAVAILABLE)

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
                status_ts = await self._post_status(req, active)
            tracker = self._tracker(req, active, lease, status_ts)
            active.tracker = tracker
            self._refresh_queue()
            tracker.start()
            collector = EvidenceCollector()
            result = await self._diagnose_when_allowed(req, active, tracker, collector)
            posted = (
                None
                if result is None
                else await self._post_result(req, result, collector, active.fence)
            )
            answered = True  # the outcome, its fallback or the input refusal was attempted
            if result is not None and posted is not None:
                await tracker.finish(_status_note(result, posted))
            elif active.fence.lost:
                await tracker.finish(_FENCED_NOTE)
        except Exception as exc:  # the run task must never die silently
            _log.error("slack run %s failed: %s", active.key, type(exc).__name__)
        finally:
            if not answered:
                await _shielded(self._fail_closed(req, active))
            if active.key in self._queue:
                self._queue.remove(active.key)
            self._active.pop(active.key, None)
            await _shielded(self.leases.release(lease))

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
            with run_triggered(self._trigger(req)):
                result = await self.harness.diagnose(
                    request,
                    session_id=self._session_id(req),
                    hooks=[tracker, *self._hooks, collector],
                    cancel_event=active.cancel,
                    run_id=req.run_id,
                    audit_gate=None if active.fence is NO_FENCE else active.fence.take_answer,
                )
        except InputRejected as rejected:
            hint = _INPUT_HINTS.get(rejected.code.value, "I cannot take that input.")
            if not await active.fence.take_answer():
                await tracker.finish(_FENCED_NOTE)
                return None
            error = await self._say(req, hint)
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

    def _trigger(self, req: RunRequest) -> Trigger:
        """A replay (the shortcut, or ``python -m plugin replay``) is a replay whatever it
        replays; any other run says what started it."""
        return Trigger.REPLAY if req.replay or self._replay else req.trigger

    def _session_id(self, req: RunRequest) -> str:
        """Replays are marked in the session id, which the audit record carries."""
        kind = "replay" if req.replay or self._replay else "slack"
        return f"{kind}:{req.channel}:{req.thread_ts}"

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
                    await self._update(req, status_ts, render_status(v))

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

    # -- Slack calls (never raise) -----------------------------------------------------------

    async def _post_status(self, req: RunRequest, active: _Active) -> str | None:
        message = render_status(self._view(active))
        try:
            response = await req.client.chat_postMessage(
                channel=req.channel,
                thread_ts=req.thread_ts,
                text=message.text,
                blocks=list(message.blocks),
            )
        except Exception as exc:
            _log.warning("status post failed: %s", _slack_error(exc))
            return None
        ts = response.get("ts")
        return ts if isinstance(ts, str) else None

    async def _update(self, req: RunRequest, ts: str, message: SlackMessage) -> None:
        await req.client.chat_update(
            channel=req.channel, ts=ts, text=message.text, blocks=list(message.blocks)
        )

    async def _keep_evidence(self, req: RunRequest, record: EvidenceRecord | None) -> bool:
        """Keep what the answer's Evidence button shows; False if there is nothing (or the
        state is out of reach: the answer then has no Evidence button)."""
        if record is None:
            return False
        try:
            await self.state.put_evidence(
                evidence_key(req.scope, record.run_id),
                record.dumps(),
                self.settings.evidence_ttl_seconds,
            )
        except Exception as exc:
            _log.warning("evidence of %s not kept: %s", record.run_id, type(exc).__name__)
            return False
        return True

    async def load_evidence(self, scope: str, run_id: str) -> EvidenceRecord | None:
        """The evidence kept for an answer, or None once expired (raises if out of reach)."""
        text = await self.state.get_evidence(evidence_key(scope, run_id))
        return EvidenceRecord.loads(text) if text is not None else None

    async def _post_result(
        self,
        req: RunRequest,
        result: ExecutionResult,
        collector: EvidenceCollector,
        fence: Fence,
    ) -> _Posted | None:
        """Post the rendered outcome; if rendering or Slack refuses it, the plain fallback.
        None when ``fence`` says another owner answers this run (nothing is posted)."""
        if not await fence.take_answer():
            return None
        try:
            return await self._post_answer(req, result, collector)
        finally:
            await fence.answered()

    async def _post_answer(
        self, req: RunRequest, result: ExecutionResult, collector: EvidenceCollector
    ) -> _Posted:
        record = evidence_record(result, collector, req.channel, req.thread_ts, self.links)
        extras = AnswerExtras(
            windows=collector.windows,
            asked_at=req.asked_at,
            evidence=await self._keep_evidence(req, record),
        )
        try:
            message = render_result(result, replay=req.replay, extras=extras)
            await req.client.chat_postMessage(
                channel=req.channel,
                thread_ts=req.thread_ts,
                text=message.text,
                blocks=list(message.blocks),
                metadata=turn_metadata(
                    req.query,
                    req.previous_turn,
                    result,
                    limits=self.harness.limits,
                    asked_at=req.asked_at,
                ),
                unfurl_links=False,
                unfurl_media=False,
            )
            return _Posted(full=True, plain=False)
        except Exception as exc:
            _log.error("posting the outcome of %s failed: %s", result.run_id, _slack_error(exc))
            refusal = _refusal(exc)
        fallback_error = await self._say(req, fallback_text(result, refusal), mrkdwn=False)
        if fallback_error is not None:
            _log.error("the plain fallback of %s failed too: %s", result.run_id, fallback_error)
        return _Posted(
            full=False, plain=fallback_error is None, refusal=refusal, fallback_error=fallback_error
        )

    async def _fail_closed(self, req: RunRequest, active: _Active) -> None:
        """The run ended without its outcome posted: say so, and end the status message."""
        if not await active.fence.take_answer():
            if active.tracker is not None:
                with contextlib.suppress(Exception):
                    await active.tracker.finish(_FENCED_NOTE)
            return
        error = await self._say(req, _FAILED_CLOSED)
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
                _log.warning("final status update failed: %s", type(exc).__name__)

    async def say(self, req: RunRequest, text: str) -> str | None:
        """One line of ours in the request's thread (a refusal, a pointer); never raises."""
        return await self._say(req, text)

    async def _say(self, req: RunRequest, text: str, *, mrkdwn: bool = True) -> str | None:
        """Post plain text in the thread; None once posted, else Slack's reason."""
        try:
            await req.client.chat_postMessage(
                channel=req.channel,
                thread_ts=req.thread_ts,
                text=text,
                mrkdwn=mrkdwn,
                unfurl_links=False,
                unfurl_media=False,
            )
        except Exception as exc:
            error = _slack_error(exc)
            _log.warning("reply failed: %s", error)
            return error
        return None

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


def _job_request(job: Job, client: AsyncWebClient) -> RunRequest:
    return RunRequest(
        client=client,
        channel=job.channel,
        thread_ts=job.thread_ts,
        query=job.query,
        previous_turn=job.turn(),
        requested_by=job.requested_by,
        replay=job.replay,
        scope=job.scope,
        asked_at=job.asked(),
        run_id=job.run_id,
        trigger=job.started_by(),
    )


async def _safely(check: Coroutine[Any, Any, bool]) -> bool:
    try:
        return await check
    except Exception as exc:
        _log.warning("shared state unreachable: %s", type(exc).__name__)
        return False


def _slack_error(exc: BaseException) -> str:
    """Slack's error code (``invalid_blocks``, ``ratelimited``…) or the exception's type."""
    if isinstance(exc, SlackApiError):
        error = exc.response.get("error") if exc.response is not None else None
        if isinstance(error, str) and _SLACK_ERROR.fullmatch(error):
            return error
    return type(exc).__name__


def _refusal(exc: BaseException) -> str:
    """Why the full answer could not be posted, in words (Slack's code, or our own failure)."""
    if isinstance(exc, SlackApiError):
        return f"Slack refused the full answer ({_slack_error(exc)})"
    return f"The full answer could not be rendered or posted ({_slack_error(exc)})"


def _bounded(text: str, limit: int) -> str:
    """Untrusted text escaped onto one inert line, cut to ``limit`` without splitting an entity.

    A code (``HTTP_500``, a run id) stays as it is: the fallback is posted with mrkdwn off, so
    its underscores format nothing and there is nothing else in it to neutralise.
    """
    if _CODE.fullmatch(text) and len(text) <= limit:
        return text
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    return _PARTIAL_ENTITY.sub("", escaped[: limit - 1]) + "…"


def _cut(text: str, limit: int) -> str:
    """Raw text cut to ``limit`` (for the status note, which the renderer escapes itself)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _gist(result: ExecutionResult, clean: Callable[[str, int], str] = _bounded) -> str:
    """The outcome in a phrase: the conclusion, the stop reason or the failure code."""
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        return f"{result.stop_reason.value}. {STOP_EXPLANATIONS[result.stop_reason]}"
    if result.failure is not None:
        return f"{result.failure.code.value} {clean(result.failure.detail, 80)}."
    draft = result.draft
    if draft is None:
        return "no answer was produced."
    if draft.conclusion is not None:
        confidence = draft.conclusion.confidence.value
        return f"conclusion ({confidence}): {clean(draft.conclusion.summary, _GIST_MAX)}"
    missing = draft.limitations.missing_info
    first = f" Missing: {clean(missing[0], 300)}" if missing else ""
    return f"no conclusion: the evidence did not support one.{first}"


def fallback_text(result: ExecutionResult, refusal: str) -> str:
    """The plain-text answer for when Slack refuses the rendered one: no blocks, no metadata,
    every model-written part escaped and the whole bounded (``refusal`` is ours, see
    ``_refusal``)."""
    text = (
        f"Diagnosis {result.outcome.value} — {_gist(result)}\n"
        f"{refusal}; this is a plain-text summary. Run {_bounded(result.run_id, 100)}."
    )
    if len(text) <= _FALLBACK_MAX:
        return text
    return _PARTIAL_ENTITY.sub("", text[: _FALLBACK_MAX - 1]) + "…"


def _verdict(result: ExecutionResult) -> str:
    return {Outcome.DRAFT: "Done", Outcome.STOPPED: "Stopped"}.get(result.outcome, "Failed closed")


def _status_note(result: ExecutionResult, posted: _Posted) -> str:
    """The status message's last word: what actually reached the thread."""
    if posted.full:
        return _final_note(result)
    # The renderer shows Slack's codes (``invalid_blocks``) as they are, inert.
    refusal = posted.refusal
    if posted.plain:
        return f"{_verdict(result)}: {refusal}; a plain-text summary is posted below."
    fallback = posted.fallback_error or "unknown"
    return (
        f"Could not post the answer: {refusal}, and the plain-text summary too ({fallback}). "
        f"Outcome {result.outcome.value} — {_gist(result, _cut)} Run {result.run_id}."
    )


async def _shielded(work: Coroutine[Any, Any, None]) -> None:
    """Finish ``work`` even if this task is being cancelled (shutdown): the thread is told."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except BaseException:
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())


def _final_note(result: ExecutionResult) -> str:
    if result.outcome is Outcome.DRAFT:
        return "Done: the diagnosis is posted below."
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        return STOP_EXPLANATIONS[result.stop_reason]
    return "Failed closed: see the message below."
