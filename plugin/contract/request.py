"""The diagnosis request, the frozen previous turn, and the input rules checked up front.

The model receives exactly one user message: ``{"query": ..., "previous_turn": ...}``. Nothing
else of a conversation ever reaches it. Oversized or blank input is refused, never truncated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sre_diag.errors import InputRejected, InputRejection

__all__ = [
    "ENVELOPE_BYTES",
    "DiagnosisRequest",
    "InputLimits",
    "PreviousTurn",
    "model_input",
    "parse_previous_turn",
]


class PreviousTurn(BaseModel):
    """What a thread remembers of the bot's last answer (CONTRACTS §7): exactly these keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    query: Annotated[str, Field(min_length=1)]
    conclusion: str | None
    missing_info: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "query": self.query,
                "conclusion": self.conclusion,
                "missing_info": list(self.missing_info),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )


def parse_previous_turn(text: str) -> PreviousTurn:
    """Strictly parse a previous-turn JSON document; any deviation is ``INVALID_PREVIOUS_TURN``."""
    try:
        return PreviousTurn.model_validate_json(text)
    except ValidationError as exc:
        raise InputRejected(InputRejection.INVALID_PREVIOUS_TURN) from exc


@dataclass(frozen=True, slots=True)
class DiagnosisRequest:
    """One diagnosis: the current query, verbatim, and an optional frozen previous turn."""

    query: str
    previous_turn: PreviousTurn | None = None
    asked_at: datetime | None = None
    """When the question was asked (the Slack message's ``ts``, ``--asked-at``); the run's
    start when unknown. A property of the question: replay sends the recorded one."""


ENVELOPE_BYTES = 256
"""Room kept in ``max_input_bytes`` for the user message's keys and its other fields."""


@dataclass(frozen=True, slots=True)
class InputLimits:
    """UTF-8 byte limits of the request."""

    max_query_bytes: int
    max_previous_turn_bytes: int
    max_input_bytes: int

    def turn_budget(self) -> int:
        """The UTF-8 bytes a frozen turn may take so that a follow-up with a query of
        ``max_query_bytes`` is still accepted: within ``max_previous_turn_bytes``, and within
        ``max_input_bytes`` next to that query (CONTRACTS §2)."""
        room = self.max_input_bytes - self.max_query_bytes - ENVELOPE_BYTES
        return max(0, min(self.max_previous_turn_bytes, room))


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def format_asked_at(moment: datetime) -> str:
    """RFC 3339 in UTC to the second, as the model sees it: ``2026-11-28T10:20:00Z``."""
    if moment.tzinfo is None:
        raise ValueError("asked_at must carry a time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_asked_at(text: str) -> datetime:
    """An RFC 3339 time with a zone (``Z`` or an offset); raises ``ValueError`` otherwise."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        raise ValueError("asked_at needs a time zone (Z or +hh:mm)")
    try:
        moment.astimezone(UTC)  # out-of-range after conversion fails here, not in a run
    except OverflowError as exc:
        raise ValueError("asked_at is out of range in UTC") from exc
    return moment


def slack_ts_moment(ts: str) -> datetime | None:
    """The moment of a Slack message ``ts`` (``1764324000.000100``), or None if it is odd."""
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        return None


def model_input(request: DiagnosisRequest, limits: InputLimits) -> str:
    """Validate the request and render the one user message; raises ``InputRejected``.

    ``asked_at`` is the request's, or now (the run's start) when the request has none.
    """
    if not request.query.strip():
        raise InputRejected(InputRejection.BLANK_QUERY)
    query_bytes = _utf8_len(request.query)
    if query_bytes > limits.max_query_bytes:
        raise InputRejected(
            InputRejection.QUERY_TOO_LARGE, limit=limits.max_query_bytes, observed=query_bytes
        )
    previous: object = None
    if request.previous_turn is not None:
        previous_text = request.previous_turn.to_json()
        previous_bytes = _utf8_len(previous_text)
        if previous_bytes > limits.max_previous_turn_bytes:
            raise InputRejected(
                InputRejection.PREVIOUS_TURN_TOO_LARGE,
                limit=limits.max_previous_turn_bytes,
                observed=previous_bytes,
            )
        previous = json.loads(previous_text)
    message = json.dumps(
        {
            "query": request.query,
            "previous_turn": previous,
            "asked_at": format_asked_at(request.asked_at or datetime.now(UTC)),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    message_bytes = _utf8_len(message)
    if message_bytes > limits.max_input_bytes:
        raise InputRejected(
            InputRejection.INPUT_TOO_LARGE, limit=limits.max_input_bytes, observed=message_bytes
        )
    return message
