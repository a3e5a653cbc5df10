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

    A mention (``<@U…>`` or ``<@U…|label>``) goes with the whitespace that separated it from the
    text: the whitespace after it, or, when none follows (the end of the text, punctuation),
    the whitespace before it. ``bot_user_id`` None or malformed: nothing is removed.
    """
    if bot_user_id is None or _USER_ID.fullmatch(bot_user_id) is None:
        return text
    mention = re.compile(rf"<@{bot_user_id}(?:\|[^>]*)?>")
    kept: list[str] = []
    position = 0
    for found in mention.finditer(text):
        start, end = found.span()
        after = _whitespace_end(text, end)
        if after == end:  # nothing follows: the whitespace before it goes instead
            start = _whitespace_start(text, start, position)
        kept.append(text[position:start])
        position = after
    kept.append(text[position:])
    return "".join(kept)


def _whitespace_end(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _whitespace_start(text: str, index: int, floor: int) -> int:
    while index > floor and text[index - 1].isspace():
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
) -> IgnoreReason | None:
    """None if the mention may start a diagnosis, else the reason to ignore it."""
    if retry_number(headers) > 0:
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
