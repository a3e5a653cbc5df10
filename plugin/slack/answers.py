"""A run's outcome in its thread: the evidence its Evidence button shows kept in the shared
state, the rendered answer posted (with the turn's metadata), or — when rendering or Slack
refuses it — the bounded plain-text fallback; all of it only while the run's fence lets this
process answer.

Both are posted through :func:`sre_diag.slack.delivery.post_once`: a 429 waits its turn, an
ambiguous failure (timeout, 5xx, lost connection) reads the thread for the run id before
anything is posted again, within ``DIAG_DEADLINE_SECONDS`` from the first attempt (the answer's
own deadline). The fallback is posted only after Slack refused the full answer (nothing
stored), never after an answer whose fate is unknown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sre_diag.contract.result import ExecutionResult
from sre_diag.harness.run import Harness
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.delivery import Delivery, DeliveryOutcome, post_once
from sre_diag.slack.evidence import (
    EvidenceCollector,
    EvidenceRecord,
    evidence_key,
    evidence_record,
)
from sre_diag.slack.fence import Fence
from sre_diag.slack.links import LinkMaker
from sre_diag.slack.posting import failure_name
from sre_diag.slack.render import AnswerExtras, render_result
from sre_diag.slack.run_request import RunRequest
from sre_diag.slack.state import SharedState
from sre_diag.slack.turns import turn_metadata
from sre_diag.slack.wording import Posted, fallback_text, refusal_of

__all__ = ["AnswerPoster"]

_log = logging.getLogger(__name__)


class AnswerPoster:
    """Posts the outcomes of one process's runs, and reads back the evidence they kept."""

    def __init__(
        self, harness: Harness, settings: Settings, state: SharedState, links: LinkMaker
    ) -> None:
        self._harness = harness
        self._settings = settings
        self._state = state
        self._links = links

    async def post_result(
        self,
        req: RunRequest,
        result: ExecutionResult,
        collector: EvidenceCollector,
        fence: Fence,
    ) -> Posted | None:
        """Post the rendered outcome; if rendering or Slack refuses it, the plain fallback.
        None when ``fence`` says another owner answers this run (nothing is posted)."""
        if not await fence.take_answer():
            return None
        try:
            posted = await self._post_answer(req, result, collector, fence)
        finally:
            await fence.answered()
        return None if fence.lost else posted

    async def load_evidence(self, scope: str, run_id: str) -> EvidenceRecord | None:
        """The evidence kept for an answer, or None once expired (raises if out of reach)."""
        text = await self._state.get_evidence(evidence_key(scope, run_id))
        return EvidenceRecord.loads(text) if text is not None else None

    async def _keep_evidence(self, req: RunRequest, record: EvidenceRecord | None) -> bool:
        """Keep what the answer's Evidence button shows; False if there is nothing (or the
        state is out of reach: the answer then has no Evidence button)."""
        if record is None:
            return False
        try:
            await self._state.put_evidence(
                evidence_key(req.scope, record.run_id),
                record.dumps(),
                self._settings.evidence_ttl_seconds,
            )
        except Exception as exc:
            log_failure(
                _log, logging.WARNING, "evidence of %s not kept: %s", record.run_id, exc=exc
            )
            return False
        return True

    async def _post_answer(
        self,
        req: RunRequest,
        result: ExecutionResult,
        collector: EvidenceCollector,
        fence: Fence,
    ) -> Posted:
        # In a thread: the runbook links read and walk each cited page (up to 4 MB of it).
        record = await asyncio.to_thread(
            evidence_record, result, collector, req.channel, req.thread_ts, self._links
        )
        extras = AnswerExtras(
            windows=collector.windows,
            asked_at=req.asked_at,
            evidence=await self._keep_evidence(req, record),
        )
        deadline = time.monotonic() + self._settings.deadline_seconds
        try:
            message = render_result(result, replay=req.replay, extras=extras)
            metadata = turn_metadata(
                req.query,
                req.previous_turn,
                result,
                limits=self._harness.limits,
                asked_at=req.asked_at,
            )
        except Exception as exc:
            _log.error("rendering the outcome of %s failed: %s", result.run_id, failure_name(exc))
            return await self._fallback(req, result, refusal_of(exc), deadline, fence)
        full = await post_once(
            req.client,
            result.run_id,
            _in_thread(req, text=message.text, blocks=list(message.blocks), metadata=metadata),
            deadline=deadline,
            confirm=fence.confirm,
        )
        if full.delivery is Delivery.POSTED:
            return Posted(full=True, plain=False)
        error = full.error or TimeoutError()
        _log.error("posting the outcome of %s failed: %s", result.run_id, failure_name(error))
        if full.delivery in {Delivery.GAVE_UP, Delivery.FENCED}:
            return Posted(
                full=False, plain=False, refusal=refusal_of(error), fallback_error="deadline"
            )
        return await self._fallback(req, result, refusal_of(error), deadline, fence)

    async def _fallback(
        self,
        req: RunRequest,
        result: ExecutionResult,
        refusal: str,
        deadline: float,
        fence: Fence,
    ) -> Posted:
        """The plain fallback, once the full answer is known not to be in the thread."""
        plain = await post_once(
            req.client,
            result.run_id,
            _in_thread(req, text=fallback_text(result, refusal), mrkdwn=False),
            deadline=deadline,
            confirm=fence.confirm,
        )
        fallback_error = _delivery_error(plain)
        if fallback_error is not None:
            _log.error("the plain fallback of %s failed too: %s", result.run_id, fallback_error)
        return Posted(
            full=False, plain=fallback_error is None, refusal=refusal, fallback_error=fallback_error
        )


def _in_thread(req: RunRequest, **message: Any) -> dict[str, Any]:
    return {
        "channel": req.channel,
        "thread_ts": req.thread_ts,
        "unfurl_links": False,
        "unfurl_media": False,
        **message,
    }


def _delivery_error(outcome: DeliveryOutcome) -> str | None:
    if outcome.delivery is Delivery.POSTED:
        return None
    if outcome.delivery is Delivery.GAVE_UP:
        return "deadline"
    if outcome.delivery is Delivery.FENCED:
        return "fenced"
    return failure_name(outcome.error) if outcome.error else "refused"
