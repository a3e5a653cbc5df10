"""The gate: which ``app_mention`` events start a diagnosis, and why the others are ignored.

Pure functions of the event and the request headers; dedupe of ``event_id`` (which needs the
shared state) happens in the listener right after.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from typing import Any

__all__ = ["IgnoreReason", "gate_mention", "retry_number", "strip_mentions"]

_MENTION = re.compile(r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>")


class IgnoreReason(StrEnum):
    """Why an event was acknowledged and dropped."""

    NOT_ADMIN_CHANNEL = "NOT_ADMIN_CHANNEL"
    DIRECT_MESSAGE = "DIRECT_MESSAGE"
    FROM_BOT = "FROM_BOT"
    EDITED = "EDITED"
    SLACK_RETRY = "SLACK_RETRY"
    DUPLICATE_EVENT = "DUPLICATE_EVENT"
    MALFORMED = "MALFORMED"


def strip_mentions(text: str) -> str:
    """The mention text without user mentions, trimmed: the query, otherwise verbatim."""
    return _MENTION.sub(" ", text).strip()


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
    channel = event.get("channel")
    if not isinstance(channel, str) or not isinstance(event.get("text"), str):
        return IgnoreReason.MALFORMED
    if event.get("channel_type") == "im" or channel.startswith("D"):
        return IgnoreReason.DIRECT_MESSAGE
    if channel not in admin_channels:
        return IgnoreReason.NOT_ADMIN_CHANNEL
    return None
