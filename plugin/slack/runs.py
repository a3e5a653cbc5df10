"""Background diagnosis runs for the Slack edge: queue, concurrency limit, one run per thread,
cancellation, live status, posting the outcome, and a clean shutdown.

Every run is a task the manager keeps a strong reference to. Slack failures are logged and never
crash the process; the audit record is written by the harness before anything is posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from plugin.errors import InputRejected
from plugin.render_text import STOP_EXPLANATIONS
from plugin.request import DiagnosisRequest, PreviousTurn
from plugin.result import ExecutionResult, Outcome
from plugin.settings import Settings
from plugin.slack.progress import ProgressTracker
from plugin.slack.render import SlackMessage, StatusView, render_result, render_status
from plugin.slack.state import MemoryState, SharedState
from plugin.slack.turns import turn_metadata
from plugin.usecase import Harness

__all__ = ["RunManager", "RunRequest"]

_log = logging.getLogger(__name__)

_INPUT_HINTS = {
    "BLANK_QUERY": "Mention me with a question: the service, the time window and the symptom.",
    "QUERY_TOO_LARGE": "That question is longer than I accept; please shorten it.",
    "PREVIOUS_TURN_TOO_LARGE": "This thread's previous answer is too large to build on; "
    "start a new thread.",
    "INPUT_TOO_LARGE": "Question plus previous answer exceed what I accept; shorten the question "
    "or start a new thread.",
}


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


@dataclass(slots=True)
class _Active:
    key: str
    channel: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    tracker: ProgressTracker | None = None


class RunManager:
    """Owns the runs of one process."""

    def __init__(
        self,
        harness: Harness,
        settings: Settings,
        state: SharedState,
        *,
        status_interval_seconds: float = 1.0,
    ) -> None:
        self.harness = harness
        self.settings = settings
        self.state = state
        self.completed: deque[ExecutionResult] = deque(maxlen=200)
        self._semaphore = asyncio.Semaphore(settings.max_concurrent_runs)
        self._interval = status_interval_seconds
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[str, _Active] = {}
        self._queue: list[str] = []
        self._accepting = True
        # A dead replica must not lock a thread forever: the claim expires.
        self._thread_ttl = settings.deadline_seconds * 3 + 120

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    # -- submission ------------------------------------------------------------------------

    async def submit(self, req: RunRequest) -> str | None:
        """Start a run in the background; returns its key, or None if it was not started."""
        if not self._accepting:
            await self._say(req, "I am restarting; please ask again in a minute.")
            return None
        key = uuid.uuid4().hex[:16]
        thread_key = f"{req.channel}:{req.thread_ts}"
        if not await self.state.claim_thread(thread_key, key, self._thread_ttl):
            await self._say(
                req,
                "A diagnosis is already running in this thread; I will answer here when it ends.",
            )
            return None
        active = _Active(key=key, channel=req.channel)
        self._active[key] = active
        self._queue.append(key)
        task = asyncio.create_task(self._run(req, active, thread_key), name=f"diag-{key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return key

    async def request_cancel(self, run_key: str, channel: str) -> bool:
        """Cancel a run of this channel; other replicas learn it through the shared state."""
        active = self._active.get(run_key)
        if active is not None and active.channel != channel:
            return False
        if active is not None:
            active.cancel.set()
        if not isinstance(self.state, MemoryState):
            await self.state.request_cancel(run_key, self._thread_ttl)
        return active is not None

    # -- the run ---------------------------------------------------------------------------

    async def _run(self, req: RunRequest, active: _Active, thread_key: str) -> None:
        """One run in its thread. Whatever happens, the thread gets a final message and the
        status message loses its Cancel button (``_fail_closed`` when the normal end failed).
        """
        answered = False
        try:
            status_ts = await self._post_status(req, active)
            tracker = self._tracker(req, active, status_ts)
            active.tracker = tracker
            self._refresh_queue()
            tracker.start()
            result = await self._diagnose_when_allowed(req, active, tracker)
            if result is not None:
                await self._post_result(req, result)
            answered = True  # the outcome (or the input refusal) is in the thread
            if result is not None:
                await tracker.finish(_final_note(result))
        except Exception as exc:  # the run task must never die silently
            _log.error("slack run %s failed: %s", active.key, type(exc).__name__)
        finally:
            if not answered:
                await _shielded(self._fail_closed(req, active))
            if active.key in self._queue:
                self._queue.remove(active.key)
            self._active.pop(active.key, None)
            with contextlib.suppress(Exception):
                await self.state.release_thread(thread_key, active.key)

    async def _diagnose_when_allowed(
        self, req: RunRequest, active: _Active, tracker: ProgressTracker
    ) -> ExecutionResult | None:
        acquired = await self._wait_for_slot(active)
        try:
            if active.key in self._queue:
                self._queue.remove(active.key)
            self._refresh_queue()
            tracker.update(state="RUNNING", queue_position=None)
            request = DiagnosisRequest(req.query, req.previous_turn)
            result = await self.harness.diagnose(
                request,
                session_id=f"slack:{req.channel}:{req.thread_ts}",
                hooks=[tracker],
                cancel_event=active.cancel,
            )
        except InputRejected as rejected:
            await self._say(req, _INPUT_HINTS.get(rejected.code.value, "I cannot take that input."))
            await tracker.finish("Not started: input refused")
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

    def _tracker(self, req: RunRequest, active: _Active, status_ts: str | None) -> ProgressTracker:
        view = StatusView(
            run_key=active.key,
            state="QUEUED",
            queue_position=self._position(active.key),
            max_rounds=self.settings.max_model_calls,
        )

        async def publish(v: StatusView) -> None:
            if status_ts is not None:
                await self._update(req, status_ts, render_status(v))

        poll = None if isinstance(self.state, MemoryState) else self._poll_cancel(active.key)
        return ProgressTracker(
            view=view,
            publish=publish,
            interval_seconds=self._interval,
            poll_cancel=poll,
            on_cancel_requested=active.cancel.set,
        )

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
                active.tracker.update(queue_position=self._position(key))

    # -- Slack calls (never raise) -----------------------------------------------------------

    async def _post_status(self, req: RunRequest, active: _Active) -> str | None:
        view = StatusView(
            run_key=active.key,
            state="QUEUED",
            queue_position=self._position(active.key),
            max_rounds=self.settings.max_model_calls,
        )
        message = render_status(view)
        try:
            response = await req.client.chat_postMessage(
                channel=req.channel,
                thread_ts=req.thread_ts,
                text=message.text,
                blocks=list(message.blocks),
            )
        except Exception as exc:
            _log.warning("status post failed: %s", type(exc).__name__)
            return None
        ts = response.get("ts")
        return ts if isinstance(ts, str) else None

    async def _update(self, req: RunRequest, ts: str, message: SlackMessage) -> None:
        await req.client.chat_update(
            channel=req.channel, ts=ts, text=message.text, blocks=list(message.blocks)
        )

    async def _post_result(self, req: RunRequest, result: ExecutionResult) -> bool:
        """Post the rendered outcome; True once it is posted.

        If rendering or the rich post fails (Slack refusing the blocks, say), the outcome is
        posted again as one line of plain text; False only when that fails too.
        """
        try:
            message = render_result(result, replay=req.replay)
            await req.client.chat_postMessage(
                channel=req.channel,
                thread_ts=req.thread_ts,
                text=message.text,
                blocks=list(message.blocks),
                metadata=turn_metadata(req.query, req.previous_turn, result),
                unfurl_links=False,
                unfurl_media=False,
            )
            return True
        except Exception as exc:
            _log.error("posting the outcome of %s failed: %s", result.run_id, type(exc).__name__)
        return await self._say(req, _plain_outcome(result))

    async def _fail_closed(self, req: RunRequest, active: _Active) -> None:
        """The run ended without its outcome posted: say so, and end the status message."""
        await self._say(req, _FAILED_CLOSED)
        if active.tracker is not None:
            try:
                await active.tracker.finish("Failed closed: see the message below.")
            except Exception as exc:
                _log.warning("final status update failed: %s", type(exc).__name__)

    async def _say(self, req: RunRequest, text: str) -> bool:
        try:
            await req.client.chat_postMessage(
                channel=req.channel, thread_ts=req.thread_ts, text=text
            )
        except Exception as exc:
            _log.warning("reply failed: %s", type(exc).__name__)
            return False
        return True

    # -- shutdown ----------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait until no run is in flight (runs submitted meanwhile are awaited too)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def drain(self, timeout_seconds: float | None = None) -> None:
        """Stop taking runs and wait for those in flight; past the timeout, cancel them."""
        self._accepting = False
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_seconds)
        if self._tasks:
            await self.cancel_all()

    async def cancel_all(self) -> None:
        """Cancel every run (each still posts its STOPPED CANCELLED outcome) and wait."""
        for active in list(self._active.values()):
            active.cancel.set()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        self._accepting = False
        await self.cancel_all()
        await self.harness.aclose()
        await self.state.aclose()


_FAILED_CLOSED = (
    "The diagnosis failed closed: it ended without an answer I can show. Nothing was "
    "concluded; please ask again."
)


def _plain_outcome(result: ExecutionResult) -> str:
    """The outcome in one line of plain text, for when the rich message cannot be posted."""
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        why = result.stop_reason.value
    elif result.failure is not None:
        why = f"{result.failure.code.value} {result.failure.detail}"
    else:
        why = "a Draft was produced but could not be shown here"
    return f"Diagnosis {result.outcome.value} ({why}); run {result.run_id}."


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
