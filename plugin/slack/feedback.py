"""Feedback on answers: 👍 / 👎 per user (one vote, changeable), a 👎 with an optional reason.

Each vote cast or changed is one audit record of kind ``feedback`` (run id, user id, vote,
reason, time), handed to the harness's :class:`~sre_diag.audit.AuditWriter` (bounded, written off
the answer path), and counted in ``diag_feedback_total{vote}``. The vote itself lives in the
shared state (scoped like every key), so a second click on the same vote, on any replica, writes
nothing. The reason comes from a modal (``views.open`` with the click's ``trigger_id``); it is
folded onto one line and cut to ``MAX_FEEDBACK_REASON_CHARS``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sre_diag.audit.record import MAX_FEEDBACK_REASON_CHARS, feedback_record
from sre_diag.contract.text import one_line
from sre_diag.harness.audit_port import RunAudit
from sre_diag.slack.state import SharedState

__all__ = [
    "FEEDBACK_VIEW_ID",
    "FeedbackDesk",
    "ReasonRequest",
    "reason_modal",
    "submitted_reason",
]

_log = logging.getLogger(__name__)

FEEDBACK_VIEW_ID = "diag_feedback_reason"
REASON_BLOCK_ID = "reason"
REASON_ACTION_ID = "reason_text"
VOTE_TTL_SECONDS = 30 * 86400.0
_METADATA_MAX = 3000  # Slack's private_metadata limit


@dataclass(frozen=True, slots=True)
class ReasonRequest:
    """Which answer a 👎 reason is about (the modal's ``private_metadata``)."""

    run_id: str
    channel: str
    thread_ts: str

    def dumps(self) -> str:
        return json.dumps({"r": self.run_id, "c": self.channel, "t": self.thread_ts})

    @classmethod
    def loads(cls, text: object) -> ReasonRequest | None:
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        values = [data.get(k) for k in ("r", "c", "t")]
        if not all(isinstance(v, str) and v for v in values):
            return None
        return cls(str(values[0]), str(values[1]), str(values[2]))

    @property
    def session_id(self) -> str:
        return f"slack:{self.channel}:{self.thread_ts}"


def reason_modal(request: ReasonRequest) -> dict[str, Any] | None:
    """The 👎 reason modal (None if the answer's ids do not fit its metadata)."""
    metadata = request.dumps()
    if len(metadata) > _METADATA_MAX:
        return None
    return {
        "type": "modal",
        "callback_id": FEEDBACK_VIEW_ID,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": "What was wrong?"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Skip"},
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK_ID,
                "optional": True,
                "label": {"type": "plain_text", "text": "Reason (optional)"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_ACTION_ID,
                    "multiline": True,
                    "max_length": MAX_FEEDBACK_REASON_CHARS,
                    "placeholder": {
                        "type": "plain_text",
                        "text": "e.g. wrong service, missed the deploy at 10:02",
                    },
                },
            }
        ],
    }


def submitted_reason(view: object) -> str | None:
    """The reason typed in the modal: one line, bounded; None when blank or absent."""
    if not isinstance(view, dict):
        return None
    values = ((view.get("state") or {}).get("values") or {}).get(REASON_BLOCK_ID) or {}
    field = values.get(REASON_ACTION_ID) if isinstance(values, dict) else None
    raw = field.get("value") if isinstance(field, dict) else None
    if not isinstance(raw, str):
        return None
    text = one_line(raw[: MAX_FEEDBACK_REASON_CHARS * 4])[:MAX_FEEDBACK_REASON_CHARS]
    return text or None


class FeedbackDesk:
    """Records votes and reasons: shared state for "one vote per user", audit, metrics."""

    def __init__(
        self, state: SharedState, writer: RunAudit, on_vote: Callable[[str], None]
    ) -> None:
        self.state = state
        self.writer = writer
        self.on_vote = on_vote

    async def vote(self, scope: str, request: ReasonRequest, user_id: str, vote: str) -> str | None:
        """Record ``vote``; returns the vote it replaced, or ``vote`` itself when it was already
        this user's vote (nothing written). Raises when the shared state is out of reach."""
        key = f"{scope}:{request.run_id}:{user_id}"
        previous = await self.state.set_vote(key, vote, VOTE_TTL_SECONDS)
        if previous == vote:
            return vote
        self.writer.submit(
            feedback_record(request.run_id, user_id, vote, session_id=request.session_id)
        )
        self.on_vote(vote)
        _log.info("feedback %s on run %s (was %s)", vote, request.run_id[:64], previous)
        return previous

    def reason(self, request: ReasonRequest, user_id: str, reason: str) -> None:
        """A 👎's reason, as its own feedback record (the vote was counted when cast)."""
        self.writer.submit(
            feedback_record(
                request.run_id, user_id, "down", reason=reason, session_id=request.session_id
            )
        )
