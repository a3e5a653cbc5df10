"""The frozen previous turn, carried in the answer's message metadata (CONTRACTS §7).

Each answer the bot posts carries ``metadata = {"event_type": "diag_turn", "event_payload":
{"turn": {query, conclusion, missing_info}, "input": {"previous_turn"[, "query"]}, "run_id"}}``.
A follow-up in the same thread reads back the latest such turn posted by this bot — never the
raw thread history, never another thread. ``input`` is what a replay re-runs; its ``query`` is
left out when it is the turn's own.

Any Draft the schema accepts freezes into a turn a follow-up accepts. The turn is bounded when
it is frozen, deterministically and visibly (:func:`bound_turn`): its UTF-8 JSON within
``InputLimits.turn_budget()`` (room left for a maximal follow-up query), and its wire form —
the metadata is sent as JSON with every non-ASCII character ``\\u``-escaped, which makes CJK
text twice and emoji three times as long — within ``TURN_MAX_WIRE_BYTES``, the whole metadata
within ``METADATA_MAX_BYTES``. What does not fit goes first from the end of ``missing_info``
(one item says how many were not kept), then from the end of the conclusion, then of the query
(each cut ends with ``…``).

"Posted by this bot" is decided by the message's ``bot_id``, which Slack sets and no one can
forge. It fails closed: when the host app's authorization names no bot id, no message is ours
(anyone can post a message with our metadata type), so there is no previous turn and nothing to
replay.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.contract.draft import DiagnosisDraft
from sre_diag.contract.request import InputLimits, PreviousTurn, format_asked_at, parse_asked_at
from sre_diag.contract.result import ExecutionResult
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.gate import slack_ts

__all__ = [
    "DEFAULT_LIMITS",
    "EVENT_TYPE",
    "METADATA_MAX_BYTES",
    "TURN_MAX_WIRE_BYTES",
    "RecordedInput",
    "answered_in_thread",
    "bound_turn",
    "find_recorded_input",
    "freeze_turn",
    "latest_turn",
    "turn_metadata",
    "wire_bytes",
]

_log = logging.getLogger(__name__)

EVENT_TYPE = "diag_turn"
_MAX_PAGES = 10

METADATA_MAX_BYTES = 64 * 1024
"""The whole message metadata as sent: a turn, the previous turn it answered, ids. Slack
documents no size for metadata that could be checked here (it answers ``metadata_too_large``);
this is our own bound, kept well inside what one ``chat.postMessage`` body carries. A caller
that meets a smaller limit passes its own to :func:`turn_metadata`."""
_METADATA_KEYS_BYTES = 256  # event type, keys, run id
TURN_MAX_WIRE_BYTES = METADATA_MAX_BYTES // 2 - _METADATA_KEYS_BYTES
"""A frozen turn as sent (``\\u``-escaped JSON): half the metadata, the other half is for the
previous turn it answered. A maximal CJK Draft's turn (with a 4 KB CJK query) is ~29 KB and
is kept whole; an emoji-heavy one loses ``missing_info`` items from the end."""

_DEFAULTS = Settings.model_fields
DEFAULT_LIMITS = InputLimits(
    max_query_bytes=_DEFAULTS["max_query_bytes"].default,
    max_previous_turn_bytes=_DEFAULTS["max_previous_turn_bytes"].default,
    max_input_bytes=_DEFAULTS["max_input_bytes"].default,
)
"""CONTRACTS §2 defaults; pass the settings' own limits where they are at hand."""
_CUT = "…"


def wire_bytes(value: object) -> int:
    """Bytes of ``value`` as JSON the way the Slack client sends it (``json.dumps`` defaults:
    ASCII only, every other character ``\\u``-escaped)."""
    return len(json.dumps(value))


def _dropped(count: int) -> str:
    return f"({count} more missing_info items not kept: the previous turn is size-limited)"


def _sized(max_bytes: int, max_wire: int) -> Callable[[PreviousTurn], bool]:
    def fits(turn: PreviousTurn) -> bool:
        return (
            len(turn.to_json().encode("utf-8")) <= max_bytes
            and wire_bytes(turn.model_dump(mode="json")) <= max_wire
        )

    return fits


def _with(turn: PreviousTurn, **fields: Any) -> PreviousTurn:
    return PreviousTurn.model_validate({**turn.model_dump(), **fields})


def _shorten(turn: PreviousTurn, name: str, fits: Callable[[PreviousTurn], bool]) -> PreviousTurn:
    """``turn`` with field ``name`` cut to its longest prefix (plus ``…``) that fits."""
    text = str(getattr(turn, name))
    lo, hi = 0, len(text)  # the prefix of length lo is the best found so far
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(_with(turn, **{name: text[:mid] + _CUT})):
            lo = mid
        else:
            hi = mid - 1
    return _with(turn, **{name: text[:lo] + _CUT})


def bound_turn(turn: PreviousTurn, max_bytes: int, max_wire: int) -> PreviousTurn:
    """``turn`` itself if it fits both bounds, else the same turn cut deterministically and
    visibly: ``missing_info`` items from the end (one item counts them), then the conclusion,
    then the query. A budget smaller than the turn's keys alone leaves ``…`` everywhere."""
    fits = _sized(max_bytes, max_wire)
    if fits(turn):
        return turn
    items = turn.missing_info
    for keep in range(len(items) - 1, -1, -1):
        trimmed = _with(turn, missing_info=(*items[:keep], _dropped(len(items) - keep)))
        if fits(trimmed):
            return trimmed
    turn = _with(turn, missing_info=(_dropped(len(items)),) if items else ())
    if turn.conclusion is not None:
        turn = _shorten(turn, "conclusion", fits)
        if fits(turn):
            return turn
    return _shorten(turn, "query", fits)


def freeze_turn(
    query: str,
    draft: DiagnosisDraft | None,
    limits: InputLimits = DEFAULT_LIMITS,
    *,
    max_wire: int = TURN_MAX_WIRE_BYTES,
) -> PreviousTurn:
    """The turn an answer freezes for its thread, bounded so a follow-up accepts it."""
    conclusion = draft.conclusion.summary if draft and draft.conclusion else None
    missing = draft.limitations.missing_info if draft else ()
    turn = PreviousTurn(query=query, conclusion=conclusion, missing_info=missing)
    return bound_turn(turn, limits.turn_budget(), max_wire)


@dataclass(frozen=True, slots=True)
class RecordedInput:
    """The question an answer was given to, and the previous turn it used."""

    query: str
    previous_turn: PreviousTurn | None
    asked_at: datetime | None = None


def turn_metadata(
    query: str,
    previous: PreviousTurn | None,
    result: ExecutionResult,
    *,
    limits: InputLimits = DEFAULT_LIMITS,
    max_bytes: int = METADATA_MAX_BYTES,
    asked_at: datetime | None = None,
) -> dict[str, Any]:
    """The metadata of an answer message: the turn it freezes (within half of ``max_bytes`` as
    sent) and the input it answered. The previous turn it answered, frozen the same way, fits
    in the other half as it is; a larger one (an older version's, or after a lower
    ``max_bytes``) is bounded like a turn. So the metadata stays within ``max_bytes`` unless
    the question alone, when it had to be cut in the turn, takes that room."""
    max_wire = max_bytes // 2 - _METADATA_KEYS_BYTES
    turn = freeze_turn(query, result.draft, limits, max_wire=max_wire)
    recorded: dict[str, Any] = {"previous_turn": None}
    if turn.query != query:
        recorded["query"] = query
    if asked_at is not None:
        recorded["asked_at"] = format_asked_at(asked_at)  # a replay asks "when" the same way
    metadata = {
        "event_type": EVENT_TYPE,
        "event_payload": {
            "turn": turn.model_dump(mode="json"),
            "input": recorded,
            "run_id": result.run_id,
        },
    }
    if previous is not None:
        room = max_bytes - wire_bytes(metadata) + wire_bytes(None)
        bounded = bound_turn(previous, limits.max_previous_turn_bytes, room)
        recorded["previous_turn"] = bounded.model_dump(mode="json")
    return metadata


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


async def answered_in_thread(
    client: AsyncWebClient, channel: str, thread_ts: str, run_id: str
) -> bool:
    """Whether the thread already holds a bot's final answer of run ``run_id``: its metadata
    names the run, or (the plain fallback, posted without metadata) its text does. Asked
    before answering a run for which Redis cannot say (a mark lost with a restart, an owner
    that died while posting); raises when Slack cannot be read."""
    for message in await _thread_messages(client, channel, thread_ts):
        if not message.get("bot_id"):
            continue
        metadata = message.get("metadata")
        payload = metadata.get("event_payload") if isinstance(metadata, dict) else None
        if isinstance(payload, dict) and payload.get("run_id") == run_id:
            return True
        text = message.get("text")
        if isinstance(text, str) and f"Run {run_id}" in text:
            return True
    return False


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


def _turn_query(payload: dict[str, Any]) -> object:
    """The frozen turn's query: the question itself whenever the input leaves it out."""
    turn = payload.get("turn")
    return turn.get("query") if isinstance(turn, dict) else None


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
        log_failure(_log, logging.WARNING, "could not read thread %s: %s", thread_ts, exc=exc)
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
        query = recorded.get("query", _turn_query(payload))
        if not isinstance(query, str) or not query.strip():
            return None
        previous = recorded.get("previous_turn")
        try:
            turn = PreviousTurn.model_validate(previous, strict=False) if previous else None
        except ValidationError:
            return None
        return RecordedInput(
            query=query, previous_turn=turn, asked_at=_recorded_moment(recorded.get("asked_at"))
        )
    return None


def _recorded_moment(value: object) -> datetime | None:
    """The recorded ``asked_at`` of an answer, or None when absent or not a valid time."""
    if not isinstance(value, str):
        return None
    try:
        return parse_asked_at(value)
    except ValueError:
        return None
