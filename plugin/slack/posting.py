"""Slack calls into a run's thread that never raise, and the one reading of a Slack error.

:func:`slack_error_code` is the only place a Slack Web API error becomes text: Slack's short
error code (``invalid_blocks``, ``ratelimited``, ``channel_not_found``…) when the response
carries one, else None. Nothing else a response holds (a message, a body written by a proxy)
reaches a log line, a status message or a thread; :func:`failure_name` adds the exception's type
for failures that are not Slack's answer (a timeout, a refused connection).
"""

from __future__ import annotations

import logging
import re
from typing import Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.slack.blocks import SlackMessage, StatusView, render_status
from sre_diag.slack.lane import LIMITED_TRIES, Priority, lanes

__all__ = [
    "InThread",
    "failure_name",
    "final_status",
    "post_status",
    "say",
    "slack_error_code",
    "update",
]

_log = logging.getLogger(__name__)

_CODE = re.compile(r"[a-z0-9_.]{1,64}")
"""A Slack error code: short, lower-case snake case (dots allowed); anything else is not one."""


class InThread(Protocol):
    """Where a message goes: a client, a channel and the thread's ``ts`` (a ``RunRequest``)."""

    @property
    def client(self) -> AsyncWebClient: ...

    @property
    def channel(self) -> str: ...

    @property
    def thread_ts(self) -> str: ...


def slack_error_code(exc: BaseException) -> str | None:
    """Slack's error code of a Web API error; None when ``exc`` is not a Slack API error or
    its ``error`` field is missing or not a short code (it is never passed on raw)."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    data = exc.response.data  # bytes or text when the answer was not JSON (a proxy's page)
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, str) and _CODE.fullmatch(error) else None


def failure_name(exc: BaseException) -> str:
    """Why a Slack call failed, in one word: Slack's error code, or the exception's type."""
    return slack_error_code(exc) or type(exc).__name__


async def say(thread: InThread, text: str, *, mrkdwn: bool = True) -> str | None:
    """Post plain text in the thread; None once posted, else why not (``failure_name``)."""
    try:
        await lanes().call(
            thread.client,
            thread.channel,
            Priority.STATUS,
            "chat.postMessage",
            lambda: thread.client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                text=text,
                mrkdwn=mrkdwn,
                unfurl_links=False,
                unfurl_media=False,
            ),
            tries=LIMITED_TRIES,
        )
    except Exception as exc:
        error = failure_name(exc)
        _log.warning("reply failed: %s", error)
        return error
    return None


async def post_status(thread: InThread, message: SlackMessage) -> str | None:
    """Post a run's status message in the thread; its ``ts``, or None if Slack refused it."""
    try:
        response = await lanes().call(
            thread.client,
            thread.channel,
            Priority.STATUS,
            "chat.postMessage",
            lambda: thread.client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                text=message.text,
                blocks=list(message.blocks),
            ),
            tries=LIMITED_TRIES,
        )
    except Exception as exc:
        _log.warning("status post failed: %s", failure_name(exc))
        return None
    ts = response.get("ts")
    return ts if isinstance(ts, str) else None


async def update(thread: InThread, ts: str, message: SlackMessage) -> None:
    """Replace the message ``ts`` of the thread's channel in its turn of the channel's lane,
    behind any answer being delivered there (raises what Slack raises)."""
    await lanes().call(
        thread.client,
        thread.channel,
        Priority.STATUS,
        "chat.update",
        lambda: thread.client.chat_update(
            channel=thread.channel, ts=ts, text=message.text, blocks=list(message.blocks)
        ),
        tries=LIMITED_TRIES,
    )


async def final_status(thread: InThread, status_ts: str, run_key: str, note: str) -> None:
    """End the status message ``status_ts`` with ``note`` (FINISHED, no Cancel button)."""
    view = StatusView(run_key=run_key, state="FINISHED", final_note=note)
    try:
        await update(thread, status_ts, render_status(view))
    except Exception as exc:
        _log.warning("final status update failed: %s", failure_name(exc))
