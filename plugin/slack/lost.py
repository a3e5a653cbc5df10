"""Answers for queued runs that did not run to their end where they were taken: a worker that
vanished or stalled (``WORKER_LOST``), a job the run queue lost (``QUEUE_LOST``), and an entry no
worker can read (poison). Each is answered once — its answer token is taken first — with its
audit record, the status message's last word and the thread released; none is ever run again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Final

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.aio import shielded
from sre_diag.audit.trigger import run_triggered
from sre_diag.contract.result import ExecutionResult
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.slack.answers import AnswerPoster
from sre_diag.slack.evidence import EvidenceCollector
from sre_diag.slack.fence import Fence, TakeoverVerdict
from sre_diag.slack.job_entry import Job, Poison
from sre_diag.slack.jobs import JobQueue
from sre_diag.slack.posting import failure_name, final_status, say
from sre_diag.slack.render import QUEUE_LOST_DETAIL, WORKER_LOST_DETAIL
from sre_diag.slack.run_request import RunRequest, job_request, session_id, trigger
from sre_diag.slack.state import Lease, SharedState
from sre_diag.slack.turns import answered_in_thread
from sre_diag.slack.wording import LOST_NOTE, POISON, POISON_NOTE, QUEUE_LOST_NOTE

__all__ = ["LostRuns"]

_log = logging.getLogger(__name__)


class LostRuns:
    """Answers the lost and unreadable jobs one process claims or finds."""

    def __init__(
        self,
        harness: Harness,
        settings: Settings,
        state: SharedState,
        answers: AnswerPoster,
        *,
        grace_seconds: float,
        completed: deque[ExecutionResult],
        hooks: Sequence[StepHook] = (),
        replaying: bool = False,
    ) -> None:
        """``grace_seconds``: how long a claimer lets an owner that took the answer finish
        posting it; ``completed``: where each answered run's result is appended."""
        self._harness = harness
        self._settings = settings
        self._state = state
        self._answers = answers
        self.grace_seconds: Final = grace_seconds
        self._completed = completed
        self._hooks = tuple(hooks)
        self._replaying = replaying

    async def answer_lost(
        self, job: Job, client: AsyncWebClient, queue: JobQueue, claimer: str
    ) -> bool:
        """A job whose worker vanished or stalled: never run again. The claimer takes its token
        first (the owner, if it wakes, can then post nothing), then the thread is told it
        failed (``AGENT_ERROR WORKER_LOST``, with the Replay shortcut) and its audit record is
        written. False when its owner is posting the answer right now (ask again later)."""
        taken = await queue.takeover(job.run_id, claimer, self.grace_seconds)
        if taken.verdict is TakeoverVerdict.WAIT:
            _log.warning("run %s: its owner is posting its answer; not claimed", job.run_id)
            return False
        if taken.verdict is TakeoverVerdict.DONE:
            _log.info("run %s was answered already: claimed and acknowledged", job.run_id)
            return True
        fence = queue.answer_fence(job, taken.token, self.grace_seconds)
        if taken.stale and await self._answered_in_thread(job, client):
            _log.warning("run %s: its silent owner had posted its answer; not again", job.run_id)
            if await fence.claim_audit():  # the owner fell silent before it wrote its record
                self._record(job, client, WORKER_LOST_DETAIL, audit=True)
            await fence.answered()
            return True
        _log.error("run %s (%s): its worker was lost; answered as failed", job.run_key, job.run_id)
        await self._answer_failed(job, client, WORKER_LOST_DETAIL, LOST_NOTE, fence)
        return True

    async def answer_vanished(
        self, queue: JobQueue, job: Job, token: str, client: AsyncWebClient
    ) -> None:
        """The front's answer for a run the queue lost (its token already taken). Redis may
        have lost the run's answer mark with the queue: the thread is read first."""
        fence = queue.answer_fence(job, token, self.grace_seconds)
        if await self._answered_in_thread(job, client):
            _log.warning("run %s: answered before the queue lost it; not again", job.run_id)
            await fence.answered()
            return
        _log.error(
            "run %s (%s): the run queue lost it; answered as failed", job.run_key, job.run_id
        )
        await self._answer_failed(job, client, QUEUE_LOST_DETAIL, QUEUE_LOST_NOTE, fence)

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
        answer = poison.channel in self._settings.admin_channels and poison.thread_ts is not None
        token = ""
        if answer and poison.run_id is not None:
            taken = await queue.takeover(poison.run_id, claimer, self.grace_seconds)
            answer = taken.verdict is TakeoverVerdict.TAKEN
            token = taken.token
        if answer:
            await self._answer_poison(poison, client)
        await queue.dead_letter(entry_id, poison)
        if token and poison.run_id is not None:
            await queue.mark_answered(poison.run_id, token)

    async def _answered_in_thread(self, job: Job, client: AsyncWebClient) -> bool:
        """Whether the run's answer is in its thread already; False when Slack cannot say (an
        answer too many is then better than none)."""
        try:
            return await answered_in_thread(client, job.channel, job.thread_ts, job.run_id)
        except Exception as exc:
            _log.warning("thread of %s not read: %s", job.run_id, failure_name(exc))
            return False

    async def _answer_failed(
        self, job: Job, client: AsyncWebClient, detail: str, note: str, fence: Fence
    ) -> None:
        """Answer a run that did not run to its end here: its audit record, the answer (marked
        posted right after it is), the status message's last word, the thread released."""
        req = job_request(job, client)
        # One audit record per run: none when its owner claimed it first (it is writing it).
        result = self._record(job, client, detail, audit=await fence.claim_audit())
        self._completed.append(result)
        await self._answers.post_result(req, result, EvidenceCollector(), fence)
        if job.status_ts is not None:
            await final_status(req, job.status_ts, job.run_key, note)
        lease = Lease(thread_key=job.thread_key, run_key=job.lease_key, channel=job.channel)
        await shielded(self._state.release_thread(lease))

    def _record(
        self, job: Job, client: AsyncWebClient, detail: str, *, audit: bool
    ) -> ExecutionResult:
        """The lost run's result, with its audit record when ``audit``."""
        req = job_request(job, client)
        with run_triggered(trigger(req, self._replaying)):
            return self._harness.record_lost(
                job.run_id,
                session_id=session_id(req, self._replaying),
                asked_at=req.asked_at,
                detail=detail,
                hooks=self._hooks,
                audit=audit,
            )

    async def _answer_poison(self, poison: Poison, client: AsyncWebClient) -> None:
        assert poison.channel is not None and poison.thread_ts is not None
        req = RunRequest(client, poison.channel, poison.thread_ts, query="")
        await say(req, POISON.format(reason=poison.reason))
        if poison.status_ts is not None:
            await final_status(req, poison.status_ts, poison.run_key or "-", POISON_NOTE)
        if poison.scope is not None and poison.run_key is not None:
            lease = Lease(
                thread_key=f"{poison.scope}:{poison.channel}:{poison.thread_ts}",
                run_key=f"{poison.scope}:{poison.run_key}",
                channel=poison.channel,
            )
            await shielded(self._state.release_thread(lease))
