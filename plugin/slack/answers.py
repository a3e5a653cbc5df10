"""A run's outcome in its thread: the evidence its Evidence button shows kept in the shared
state, the rendered answer posted (with the turn's metadata), or — when rendering or Slack
refuses it — the bounded plain-text fallback; all of it only while the run's fence lets this
process answer.
"""

from __future__ import annotations

import asyncio
import logging

from sre_diag.contract.result import ExecutionResult
from sre_diag.harness.run import Harness
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.evidence import (
    EvidenceCollector,
    EvidenceRecord,
    evidence_key,
    evidence_record,
)
from sre_diag.slack.fence import Fence
from sre_diag.slack.links import LinkMaker
from sre_diag.slack.posting import failure_name, say
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
            return await self._post_answer(req, result, collector)
        finally:
            await fence.answered()

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
        self, req: RunRequest, result: ExecutionResult, collector: EvidenceCollector
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
                    limits=self._harness.limits,
                    asked_at=req.asked_at,
                ),
                unfurl_links=False,
                unfurl_media=False,
            )
            return Posted(full=True, plain=False)
        except Exception as exc:
            _log.error("posting the outcome of %s failed: %s", result.run_id, failure_name(exc))
            refusal = refusal_of(exc)
        fallback_error = await say(req, fallback_text(result, refusal), mrkdwn=False)
        if fallback_error is not None:
            _log.error("the plain fallback of %s failed too: %s", result.run_id, fallback_error)
        return Posted(
            full=False, plain=fallback_error is None, refusal=refusal, fallback_error=fallback_error
        )
