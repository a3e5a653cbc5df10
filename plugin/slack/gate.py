"""The gate: which ``app_mention`` events start a diagnosis, and why the others are ignored.

Pure functions of the event and the request headers; dedupe of ``event_id`` (which needs the
shared state) happens in the listener right after.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from typing import Any

__all__ = [
    "IgnoreReason",
    "gate_mention",
    "is_slack_ts",
    "malformed_detail",
    "own_mention_removed",
    "retry_number",
    "slack_ts",
]

_USER_ID = re.compile(r"[UW][A-Z0-9]{1,40}")
# A Slack message timestamp: seconds, a dot, a sequence (``1764300000.000100``); ASCII, bounded.
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")


class IgnoreReason(StrEnum):
    """Why an event was acknowledged and dropped."""

    NOT_ADMIN_CHANNEL = "NOT_ADMIN_CHANNEL"
    DIRECT_MESSAGE = "DIRECT_MESSAGE"
    FROM_BOT = "FROM_BOT"
    EDITED = "EDITED"
    SLACK_RETRY = "SLACK_RETRY"
    DUPLICATE_EVENT = "DUPLICATE_EVENT"
    MALFORMED = "MALFORMED"


def own_mention_removed(text: str, bot_user_id: str | None) -> str:
    """The Query of a message mentioning the bot: ``text`` with the bot's own mentions removed
    and every other character kept as posted (CONTRACTS §1) — other people's mentions, links,
    spaces and line breaks included.

    A mention (``<@U…>`` or ``<@U…|label>``) goes with the one whitespace run that separated it
    from the text, so the words around it join as if it had not been written: at the end of the
    text, the whitespace before (and after) it; at the start of a line, the whitespace after
    it; elsewhere the spaces before it (a line break before it stays). Glued to a word or a mark
    (``a,<@U…> b``) it goes alone. ``bot_user_id`` None or malformed: nothing is removed.
    """
    if bot_user_id is None or _USER_ID.fullmatch(bot_user_id) is None:
        return text
    mention = re.compile(rf"<@{bot_user_id}(?:\|[^>]*)?>")
    kept: list[str] = []
    position, line_start = 0, True  # what is kept so far is empty or ends a line
    for found in mention.finditer(text):
        before = text[position : found.start()]
        at_line_start = before.endswith("\n") or (not before and line_start)
        start, end = _separated(text, found.start(), found.end(), position, at_line_start)
        kept.append(text[position:start])
        if kept[-1]:
            line_start = kept[-1].endswith("\n")
        position = end
    kept.append(text[position:])
    return "".join(kept)


def _separated(text: str, start: int, end: int, floor: int, at_line_start: bool) -> tuple[int, int]:
    """The span to remove: the mention at ``start:end`` and the whitespace that separated it."""
    if text[end:].isspace() or end == len(text):
        return _spaces_before(text, start, floor, newlines=True), len(text)
    if at_line_start:
        while end < len(text) and text[end].isspace():
            end += 1
        return start, end
    return _spaces_before(text, start, floor, newlines=False), end


def _spaces_before(text: str, index: int, floor: int, *, newlines: bool) -> int:
    while index > floor and text[index - 1].isspace() and (newlines or text[index - 1] != "\n"):
        index -= 1
    return index


def slack_ts(value: object) -> str | None:
    """``value`` if it is a well-formed Slack message timestamp (a string such as
    ``"1764300000.000100"``; never a number, never padded), else None."""
    return value if isinstance(value, str) and _TS.fullmatch(value) is not None else None


def is_slack_ts(value: object) -> bool:
    return slack_ts(value) is not None


def malformed_detail(event: Mapping[str, Any]) -> str | None:
    """Why a mention cannot be served as it stands (a fixed phrase naming the field, never the
    event's content), or None when its fields are usable."""
    channel = event.get("channel")
    if not isinstance(channel, str) or not channel:
        return "no channel"
    if not isinstance(event.get("text"), str):
        return "no text"
    if not is_slack_ts(event.get("ts")):
        return "no well-formed ts" if "ts" in event else "no ts"
    if "thread_ts" in event and not is_slack_ts(event["thread_ts"]):
        return "malformed thread_ts"
    return None


def retry_number(headers: Mapping[str, Sequence[str]]) -> int:
    """``x-slack-retry-num`` as a number (Socket Mode sends ``0`` on the first delivery)."""
    values = headers.get("x-slack-retry-num") or ()
    try:
        return int(values[0]) if values else 0
    except (TypeError, ValueError):
        return 0


def gate_mention(
    event: Mapping[str, Any],
    headers: Mapping[str, Sequence[str]],
    admin_channels: Collection[str],
    *,
    event_id_known: bool = False,
) -> IgnoreReason | None:
    """None if the mention may start a diagnosis, else the reason to ignore it. Slack's retry
    is ignored only when the event has no id to deduplicate it by (``event_id_known``): a
    retry whose first delivery never reached us (a restart) must still be answered, once."""
    if retry_number(headers) > 0 and not event_id_known:
        return IgnoreReason.SLACK_RETRY
    if event.get("bot_id") or event.get("subtype") == "bot_message":
        return IgnoreReason.FROM_BOT
    if event.get("edited") or event.get("subtype") == "message_changed":
        return IgnoreReason.EDITED
    if malformed_detail(event) is not None:
        return IgnoreReason.MALFORMED
    channel = str(event["channel"])
    if event.get("channel_type") == "im" or channel.startswith("D"):
        return IgnoreReason.DIRECT_MESSAGE
    if channel not in admin_channels:
        return IgnoreReason.NOT_ADMIN_CHANNEL
    return None
