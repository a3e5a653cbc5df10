"""The frozen previous turn, carried in the answer's message metadata (CONTRACTS §7).

Each answer the bot posts carries ``metadata = {"event_type": "diag_turn", "event_payload":
{"turn": {query, conclusion, missing_info}, "input": {"query", "previous_turn"}, "run_id"}}``.
A follow-up in the same thread reads back the latest such turn posted by this bot — never the
raw thread history, never another thread. ``input`` is what a replay re-runs.

"Posted by this bot" is decided by the message's ``bot_id``, which Slack sets and no one can
forge. It fails closed: when the host app's authorization names no bot id, no message is ours
(anyone can post a message with our metadata type), so there is no previous turn and nothing to
replay.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from plugin.request import PreviousTurn
from plugin.result import ExecutionResult
from plugin.slack.gate import slack_ts

__all__ = [
    "EVENT_TYPE",
    "RecordedInput",
    "find_recorded_input",
    "latest_turn",
    "turn_metadata",
]

_log = logging.getLogger(__name__)

EVENT_TYPE = "diag_turn"
_MAX_PAGES = 10


@dataclass(frozen=True, slots=True)
class RecordedInput:
    """The question an answer was given to, and the previous turn it used."""

    query: str
    previous_turn: PreviousTurn | None


def turn_metadata(
    query: str, previous: PreviousTurn | None, result: ExecutionResult
) -> dict[str, Any]:
    """The metadata of an answer message: the turn it freezes and the input it answered."""
    draft = result.draft
    if draft is not None:
        conclusion = draft.conclusion.summary if draft.conclusion else None
        missing = list(draft.limitations.missing_info)
    else:
        conclusion, missing = None, []
    turn = PreviousTurn(query=query, conclusion=conclusion, missing_info=tuple(missing))
    return {
        "event_type": EVENT_TYPE,
        "event_payload": {
            "turn": turn.model_dump(mode="json"),
            "input": {
                "query": query,
                "previous_turn": previous.model_dump(mode="json") if previous else None,
            },
            "run_id": result.run_id,
        },
    }


async def _thread_messages(
    client: AsyncWebClient, channel: str, thread_ts: str
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        response = await client.conversations_replies(
            channel=channel, ts=thread_ts, include_all_metadata=True, limit=200, cursor=cursor
        )
        page = response.get("messages")
        if isinstance(page, list):
            messages.extend(m for m in page if isinstance(m, dict))
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            break
    return messages


def _ours(message: dict[str, Any], bot_id: str | None) -> dict[str, Any] | None:
    """The payload of one of this bot's answers; None for anything else, and for everything
    when the bot id is unknown (fail closed)."""
    if not bot_id or message.get("bot_id") != bot_id:
        return None
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != EVENT_TYPE:
        return None
    payload = metadata.get("event_payload")
    return payload if isinstance(payload, dict) else None


def _ts_key(value: object) -> float | None:
    ts = slack_ts(value)
    return float(ts) if ts is not None else None


def _turn_from(payload: dict[str, Any]) -> PreviousTurn | None:
    try:
        return PreviousTurn.model_validate(payload.get("turn"), strict=False)
    except ValidationError:
        return None


async def latest_turn(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str,
    bot_id: str | None,
    *,
    before: str | None = None,
) -> PreviousTurn | None:
    """The latest frozen turn this bot posted in the thread (optionally before ``before``).

    None without a known bot id (the thread is then not read at all), when Slack cannot be read,
    or when the thread holds no valid turn of ours.
    """
    if not bot_id:
        _log.warning(
            "no bot id from the app's authorization: the previous turn in thread %s is not "
            "trusted, the run goes on without one (return bot_id from authorize)",
            thread_ts,
        )
        return None
    limit = _ts_key(before) if before is not None else float("inf")
    if limit is None:
        return None
    try:
        messages = await _thread_messages(client, channel, thread_ts)
    except Exception as exc:  # Slack down: the run goes on without a previous turn, logged
        _log.warning("could not read thread %s: %s", thread_ts, type(exc).__name__)
        return None
    turns = [
        (ts, payload)
        for m in messages
        if (payload := _ours(m, bot_id)) is not None
        and (ts := _ts_key(m.get("ts"))) is not None
        and ts < limit
    ]
    for _, payload in sorted(turns, key=lambda pair: pair[0], reverse=True):
        turn = _turn_from(payload)
        if turn is not None:
            return turn
    return None


async def find_recorded_input(
    client: AsyncWebClient, channel: str, thread_ts: str, message_ts: str, bot_id: str | None
) -> RecordedInput | None:
    """The recorded input of the answer at ``message_ts`` in the thread, if it is one of ours
    (never without a known bot id). Slack errors propagate: the caller says so."""
    if not bot_id:
        return None
    messages = await _thread_messages(client, channel, thread_ts)
    for message in messages:
        if message.get("ts") != message_ts:
            continue
        payload = _ours(message, bot_id)
        if payload is None:
            return None
        recorded = payload.get("input")
        if not isinstance(recorded, dict):
            return None
        query = recorded.get("query")
        if not isinstance(query, str) or not query.strip():
            return None
        previous = recorded.get("previous_turn")
        try:
            turn = PreviousTurn.model_validate(previous, strict=False) if previous else None
        except ValidationError:
            return None
        return RecordedInput(query=query, previous_turn=turn)
    return None
