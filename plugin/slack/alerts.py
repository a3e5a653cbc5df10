"""Diagnosing a message (CONTRACTS §10): the Query of a posted message, which message events are
alerts that start a run, and the pattern key of the alert cooldown. Pure functions.

**The Query of a message** is its text as posted, never rewritten, summarised or cut. Slack
shows a message's ``blocks`` instead of its ``text`` (then only the notification fallback), and
its ``attachments`` below either; so the visible text is, one part a line, in this fixed order:

1. the ``blocks`` when there are any (else the ``text``): a header's or section's text, then a
   section's fields one a line; a context's texts; a rich text's runs (links as posted, users
   ``<@U…>``, channels ``<#C…>``, emoji ``:name:``);
2. each attachment in turn: its ``pretext``, ``title``, ``text``, then each field as
   ``name: value`` (one a line), then the attachment's own blocks. When an attachment shows
   none of these, its ``fallback``.

Blank parts are left out; every other character is kept (mentions, links, mrkdwn, bidi
controls: the Query is data, the model is told so, and none of it is ever posted back).

**An alert** is a ``message`` event that is new, top-level and posted by one of the
``DIAG_ALERT_SOURCES``: Slack's ``bot_id`` (or the ``app_id`` it sets beside it) must be
listed. Slack sets ``bot_id`` and no one can forge it; a person's message (no ``bot_id``) never
is an alert, whatever its ``username``, ``bot_profile`` or text say.

**The cooldown key** of an alert is its Query with every line masked as ``patterns`` masks a
log message (``sre_diag.tools.logs.summary.message_pattern``): numbers, durations, hosts, ids and
quoted values become ``<*>``, so alerts that differ only in those match. Kubernetes object
names lose their generated suffixes first (:func:`mask_kubernetes_names`: a Deployment's pod
``api-7d9f8b6c5d-xk2lp``, its ReplicaSet ``api-7d9f8b6c5d``, a DaemonSet's or Job's pod
``agent-q8wzr``, a CronJob's Job ``backup-28930412``, a StatefulSet's ``web-3`` all become
``<name>-<*>``), so the alerts of one workload's pods share a key.

When the first line is an Alertmanager or Grafana notification title (``[FIRING:3] name
group labels (common labels)``, ``[RESOLVED] …``, ``[ALERTING]``, ``[OK]``), the key is the
alert name and grouping labels of that title alone — the status and counts, the common labels
in parentheses and the body (which lists every alert of the group) are left out — so a firing
group, its re-notifications and its resolution share one key. :func:`is_resolved` tells a
resolved / OK notification (it never starts a run).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterator, Mapping
from enum import StrEnum
from typing import Any

from sre_diag.slack.gate import slack_ts
from sre_diag.tools.logs.summary import message_pattern

__all__ = [
    "AlertIgnore",
    "alert_pattern",
    "cooldown_key",
    "gate_alert",
    "is_resolved",
    "mask_kubernetes_names",
    "message_query",
    "source_of",
]

_MAX_DEPTH = 8


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _dicts(value: object) -> Iterator[dict[str, Any]]:
    for item in value if isinstance(value, list) else ():
        if isinstance(item, dict):
            yield item


def _text_object(value: object) -> str | None:
    """A Block Kit text object's text (``plain_text`` or ``mrkdwn``), or a bare string."""
    if isinstance(value, dict):
        return _str(value.get("text"))
    return _str(value)


def _rich_run(element: Mapping[str, Any]) -> str:
    """One rich text element as Slack shows it (as posted: links and mentions in Slack's form)."""
    kind = element.get("type")
    if kind == "text":
        return _str(element.get("text")) or ""
    if kind == "link":
        url, label = _str(element.get("url")) or "", _str(element.get("text"))
        return f"<{url}|{label}>" if label else f"<{url}>"
    if kind == "user":
        return f"<@{_str(element.get('user_id')) or ''}>"
    if kind == "channel":
        return f"<#{_str(element.get('channel_id')) or ''}>"
    if kind == "usergroup":
        return f"<!subteam^{_str(element.get('usergroup_id')) or ''}>"
    if kind == "broadcast":
        return f"<!{_str(element.get('range')) or ''}>"
    if kind == "emoji":
        return f":{_str(element.get('name')) or ''}:"
    return ""


def _rich_text(block: Mapping[str, Any], depth: int = 0) -> list[str]:
    """A rich text block's sections, lists, quotes and preformatted runs, one a line."""
    lines: list[str] = []
    for element in _dicts(block.get("elements")):
        if element.get("type") in {"rich_text_section", "rich_text_preformatted",
                                   "rich_text_quote"}:  # fmt: skip
            lines.append("".join(_rich_run(e) for e in _dicts(element.get("elements"))))
        elif element.get("type") == "rich_text_list" and depth < _MAX_DEPTH:
            lines += _rich_text(element, depth + 1)
    return lines


def _block_lines(block: Mapping[str, Any]) -> list[str]:
    kind = block.get("type")
    if kind in {"header", "section"}:
        lines = [_text_object(block.get("text")) or ""]
        lines += [_text_object(f) or "" for f in _dicts(block.get("fields"))]
        return lines
    if kind == "context":
        return [_text_object(e) or "" for e in _dicts(block.get("elements"))]
    if kind == "rich_text":
        return _rich_text(block)
    return []


def _blocks_lines(blocks: object) -> list[str]:
    return [line for block in _dicts(blocks) for line in _block_lines(block)]


def _field_line(field: Mapping[str, Any]) -> str:
    name, value = _str(field.get("title")) or "", _str(field.get("value")) or ""
    return f"{name}: {value}" if name.strip() else value


def _attachment_lines(attachment: Mapping[str, Any]) -> list[str]:
    lines = [_str(attachment.get(key)) or "" for key in ("pretext", "title", "text")]
    lines += [_field_line(f) for f in _dicts(attachment.get("fields"))]
    lines += _blocks_lines(attachment.get("blocks"))
    if not any(line.strip() for line in lines):
        lines = [_str(attachment.get("fallback")) or ""]
    return lines


def message_query(message: Mapping[str, Any]) -> str:
    """The Query of a posted message: its visible text in the fixed order of the module docs,
    each part as posted, one a line; "" when the message shows no text at all."""
    lines = _blocks_lines(message.get("blocks"))
    if not any(line.strip() for line in lines):
        lines = [_str(message.get("text")) or ""]
    for attachment in _dicts(message.get("attachments")):
        lines += _attachment_lines(attachment)
    return "\n".join(line for line in lines if line.strip())


class AlertIgnore(StrEnum):
    """Why a ``message`` event starts no automatic run (the ``diag_slack_events_total``
    reason)."""

    NO_ALERT_SOURCES = "NO_ALERT_SOURCES"
    NOT_AN_ALERT_SOURCE = "NOT_AN_ALERT_SOURCE"
    EDITED = "EDITED"
    DELETED = "DELETED"
    THREAD_REPLY = "THREAD_REPLY"
    OTHER_SUBTYPE = "OTHER_SUBTYPE"
    OWN_MESSAGE = "OWN_MESSAGE"
    NOT_ADMIN_CHANNEL = "NOT_ADMIN_CHANNEL"
    MALFORMED = "MALFORMED"


_EDIT_SUBTYPES = frozenset({"message_changed"})
_DELETE_SUBTYPES = frozenset({"message_deleted"})
_ALERT_SUBTYPES = frozenset({None, "bot_message"})


def source_of(event: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(bot id, app id) Slack set on a message; (None, None) for a person's message. The app
    id counts only beside a bot id: a person's message has none of Slack's own."""
    bot_id = _str(event.get("bot_id")) or None
    if bot_id is None:
        return None, None
    profile = event.get("bot_profile")
    app_id = _str(event.get("app_id")) or (
        _str(profile.get("app_id")) if isinstance(profile, dict) else None
    )
    return bot_id, app_id or None


def _subtype_reason(event: Mapping[str, Any]) -> AlertIgnore | None:
    subtype = event.get("subtype")
    if subtype in _EDIT_SUBTYPES or event.get("edited"):
        return AlertIgnore.EDITED
    if subtype in _DELETE_SUBTYPES:
        return AlertIgnore.DELETED
    if subtype not in _ALERT_SUBTYPES:
        return AlertIgnore.OTHER_SUBTYPE
    return None


def gate_alert(
    event: Mapping[str, Any],
    sources: Collection[str],
    admin_channels: Collection[str],
    own_bot_id: str | None,
) -> AlertIgnore | None:
    """None if the ``message`` event is a new top-level alert from a source in an admin
    channel, else why not. The sender is decided by Slack's ``bot_id`` / ``app_id`` only."""
    if not sources:
        return AlertIgnore.NO_ALERT_SOURCES
    reason = _subtype_reason(event)
    if reason is not None:
        return reason
    thread_ts = event.get("thread_ts")
    if thread_ts is not None and thread_ts != event.get("ts"):
        return AlertIgnore.THREAD_REPLY
    bot_id, app_id = source_of(event)
    if bot_id is not None and bot_id == own_bot_id:
        return AlertIgnore.OWN_MESSAGE
    if bot_id is None or not ({bot_id, app_id} & set(sources)):
        return AlertIgnore.NOT_AN_ALERT_SOURCE
    channel = event.get("channel")
    if not isinstance(channel, str) or slack_ts(event.get("ts")) is None:
        return AlertIgnore.MALFORMED
    if channel not in admin_channels:
        return AlertIgnore.NOT_ADMIN_CHANNEL
    return None


# Kubernetes' generated name suffixes use its "safe" alphabet (no vowels, no 0, 1, 3):
# a ReplicaSet's pod-template hash (6-10 characters) and a pod's random 5; a CronJob's Job
# takes its scheduled minute (8+ digits); a StatefulSet's pod its ordinal.
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_K8S_SUFFIX = re.compile(
    rf"(?<=[a-z0-9])-(?:(?:{_SAFE}{{6,10}}|[0-9]{{8,12}})-)?{_SAFE}{{5}}(?![A-Za-z0-9_-])"
    rf"|(?<=[a-z0-9])-(?:{_SAFE}{{6,10}}|[0-9]{{1,12}})(?![A-Za-z0-9_-])"
)
_TITLE = re.compile(
    r"\A\s*\[(?P<status>FIRING|RESOLVED|ALERTING|OK|PENDING|NO ?DATA)(?::\s*\d+)?\]\s*"
    r"(?P<group>[^\n(]*)",
    re.IGNORECASE,
)
_RESOLVED = frozenset({"RESOLVED", "OK"})


def mask_kubernetes_names(text: str) -> str:
    """``text`` with the generated suffixes of Kubernetes object names masked as ``-<*>``."""
    return _K8S_SUFFIX.sub("-<*>", text)


def _title(query: str) -> re.Match[str] | None:
    return _TITLE.match(query)


def is_resolved(query: str) -> bool:
    """Whether the Query is a resolved / OK notification (Alertmanager, Grafana)."""
    title = _title(query)
    return title is not None and title["status"].upper().replace(" ", "") in _RESOLVED


def _masked(line: str) -> str:
    return message_pattern(mask_kubernetes_names(line))


def alert_pattern(query: str) -> str:
    """The alert's pattern: the alert name and grouping labels of a notification title, else
    each line masked as ``patterns`` masks a log message, Kubernetes suffixes first."""
    title = _title(query)
    if title is not None and title["group"].strip():
        return "alert: " + _masked(title["group"].strip())
    return "\n".join(_masked(line) for line in query.splitlines() if line.strip())


def cooldown_key(scope: str, channel: str, query: str) -> str:
    """The shared-state key of an alert pattern in one channel of one app and workspace."""
    digest = hashlib.sha256(alert_pattern(query).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{scope}:{channel}:{digest[:32]}"
