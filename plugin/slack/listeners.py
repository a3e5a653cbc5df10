"""The Bolt listeners: ``app_mention`` (the gate, then a background run), the Cancel button and
the ``replay_diagnosis`` message shortcut.

Everything this plugin chooses to ignore is acknowledged (Bolt would answer 404 otherwise and
Slack would retry) and logged with a reason, malformed payloads included: a listener never
raises on what Slack (or anyone holding the signing secret) sends. The channel is re-checked on
every interaction (a Cancel too, on a replica that does not own the run: by the shared state).

Shared-state keys carry the request's app and workspace (``app_id:team_id``); shared state out
of reach gets a polite reply in the thread instead of silence.

Without a bot id from the host app's authorization, nothing in a thread can be told to be ours:
mentions run without a previous turn and the replay shortcut refuses (see ``turns``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from plugin.metrics import EventResult
from plugin.request import slack_ts_moment
from plugin.settings import Settings
from plugin.slack.gate import (
    IgnoreReason,
    gate_mention,
    malformed_detail,
    slack_ts,
    strip_mentions,
)
from plugin.slack.render import CANCEL_ACTION_ID
from plugin.slack.runs import RunManager, RunRequest
from plugin.slack.turns import find_recorded_input, latest_turn

__all__ = ["REPLAY_CALLBACK_ID", "Listeners"]

_log = logging.getLogger(__name__)

REPLAY_CALLBACK_ID = "replay_diagnosis"
_EVENT_TTL_SECONDS = 3600.0
_MAX_LOGGED_ID = 64
_SCOPE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")

REFUSE_NO_BOT_ID = (
    "I cannot replay here: this app's authorization does not tell me my own bot id, so I "
    "cannot tell my answers from anyone else's. Ask the app's operator to return bot_id "
    "from authorize."
)
REFUSE_NOT_REPLAYABLE = (
    "I cannot replay this message: only my own answers and questions asked to me can be replayed."
)
REFUSE_UNREADABLE = "I cannot replay this message right now: I could not read this thread."


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _scope_part(value: object) -> str:
    return value if isinstance(value, str) and _SCOPE_ID.fullmatch(value) else "-"


def _scope(body: dict[str, Any], context: AsyncBoltContext) -> str:
    """``app_id:team_id`` of a request: shared-state keys never cross apps or workspaces."""
    team = context.team_id or context.enterprise_id or _mapping(body.get("team")).get("id")
    return f"{_scope_part(body.get('api_app_id'))}:{_scope_part(team or body.get('team_id'))}"


EventCounter = Callable[[EventResult, str], None]
"""Told of every event handled: what was done with it and why (``Metrics.slack_event``)."""


def _not_counted(result: EventResult, reason: str) -> None:
    return None


def _loggable(value: object) -> str:
    """An id from a payload, safe to log: a bounded representation."""
    return repr(value)[:_MAX_LOGGED_ID]


class Listeners:
    """The plugin's listeners, bound to one RunManager."""

    def __init__(
        self,
        manager: RunManager,
        settings: Settings,
        *,
        on_event: EventCounter | None = None,
    ) -> None:
        self.manager = manager
        self.count = on_event or _not_counted
        self.admin_channels = frozenset(settings.admin_channels)
        self.ignored: list[IgnoreReason] = []

    def register(self, app: AsyncApp) -> None:
        app.event("app_mention")(self.on_mention)
        app.action(CANCEL_ACTION_ID)(self.on_cancel)
        app.shortcut(REPLAY_CALLBACK_ID)(self.on_replay)

    def _ignore(self, reason: IgnoreReason, event_id: object, detail: str | None = None) -> None:
        self.ignored.append(reason)
        self.count(EventResult.IGNORED, reason.value)
        del self.ignored[:-1000]
        suffix = f" ({detail})" if detail else ""
        level = logging.WARNING if reason is IgnoreReason.MALFORMED else logging.INFO
        _log.log(level, "ignored app_mention %s: %s%s", _loggable(event_id), reason.value, suffix)

    async def on_mention(
        self,
        ack: AsyncAck,
        body: dict[str, Any],
        event: dict[str, Any],
        request: AsyncBoltRequest,
        client: AsyncWebClient,
        context: AsyncBoltContext,
    ) -> None:
        await ack()
        headers: Mapping[str, Sequence[str]] = request.headers
        event = _mapping(event)
        reason = gate_mention(event, headers, self.admin_channels)
        event_id = body.get("event_id")
        if reason is not None:
            detail = malformed_detail(event) if reason is IgnoreReason.MALFORMED else None
            self._ignore(reason, event_id, detail)
            return
        # The gate checked these: channel and text are strings, ts (and thread_ts if given)
        # well-formed Slack timestamps.
        channel: str = event["channel"]
        thread_ts = _str_or_none(event.get("thread_ts"))
        scope = _scope(body, context)
        if isinstance(event_id, str) and not await self._first_delivery(
            client, scope, event_id, channel, thread_ts or event["ts"]
        ):
            return
        previous = None
        if thread_ts is not None:
            previous = await latest_turn(client, channel, thread_ts, context.bot_id)
        started = await self.manager.submit(
            RunRequest(
                client=client,
                channel=channel,
                thread_ts=thread_ts or event["ts"],
                query=strip_mentions(event["text"]),
                previous_turn=previous,
                requested_by=_str_or_none(event.get("user")),
                scope=scope,
                asked_at=slack_ts_moment(event["ts"]),
            )
        )
        self._started(started, "MENTION")

    def _started(self, key: str | None, kind: str) -> None:
        if key is None:  # a busy thread, a draining process, shared state out of reach
            self.count(EventResult.DECLINED, "NOT_STARTED")
        else:
            self.count(EventResult.ACCEPTED, kind)

    async def _first_delivery(
        self, client: AsyncWebClient, scope: str, event_id: str, channel: str, thread_ts: str
    ) -> bool:
        """Dedupe the event; shared state out of reach gets a polite reply, never silence."""
        try:
            fresh = await self.manager.state.claim_event(f"{scope}:{event_id}", _EVENT_TTL_SECONDS)
        except Exception as exc:
            _log.error("shared state unreachable, mention declined: %s", type(exc).__name__)
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self.manager.say_unavailable(client, channel, thread_ts)
            return False
        if not fresh:
            self._ignore(IgnoreReason.DUPLICATE_EVENT, event_id)
        return fresh

    async def on_cancel(
        self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        actions = body.get("actions")
        first = _mapping(actions[0]) if isinstance(actions, list) and actions else {}
        run_key = first.get("value")
        if channel is None or channel not in self.admin_channels:
            _log.info("ignored cancel outside the admin channels")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return
        if not isinstance(run_key, str):
            _log.warning("ignored cancel: malformed (no run key)")
            self.count(EventResult.IGNORED, IgnoreReason.MALFORMED.value)
            return
        try:
            accepted = await self.manager.request_cancel(run_key, channel, _scope(body, context))
        except Exception as exc:  # shared state out of reach: logged, never raised into Bolt
            _log.error("cancel not delivered: %s", type(exc).__name__)
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            return
        result = EventResult.ACCEPTED if accepted else EventResult.IGNORED
        self.count(result, "CANCEL" if accepted else "NO_LIVE_RUN")
        if not accepted:
            _log.info("ignored cancel: no live run %s in this channel", _loggable(run_key))

    async def on_replay(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        if channel is None or channel not in self.admin_channels:
            _log.info("ignored replay shortcut outside the admin channels")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return
        message = _mapping(body.get("message"))
        message_ts = slack_ts(message.get("ts"))
        thread_ts = slack_ts(message.get("thread_ts") or message_ts)
        if message_ts is None or thread_ts is None:
            _log.warning("ignored replay shortcut: malformed (no well-formed message ts)")
            return
        user = _str_or_none(_mapping(body.get("user")).get("id"))
        if not context.bot_id:
            _log.warning(
                "refused replay shortcut in %s: no bot id from the app's authorization", channel
            )
            await self._refuse(client, channel, thread_ts, user, REFUSE_NO_BOT_ID)
            return
        try:
            request = await self._replay_request(
                client, context.bot_id, channel, thread_ts, message_ts, message
            )
        except Exception as exc:  # Slack could not be read: say so, never a 500
            _log.warning("refused replay shortcut: thread unreadable (%s)", type(exc).__name__)
            await self._refuse(client, channel, thread_ts, user, REFUSE_UNREADABLE)
            return
        if request is None:
            _log.info("refused replay shortcut in %s: not a replayable message", channel)
            await self._refuse(client, channel, thread_ts, user, REFUSE_NOT_REPLAYABLE)
            return
        started = await self.manager.submit(replace(request, scope=_scope(body, context)))
        self._started(started, "REPLAY")

    async def _refuse(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        user: str | None,
        text: str,
    ) -> None:
        """Tell the person who clicked why nothing happens (only them: an ephemeral message)."""
        if user is None:
            return
        try:
            await client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=thread_ts, text=text
            )
        except Exception as exc:  # Slack failures are logged, never raised into Bolt
            _log.warning("could not post the replay refusal: %s", type(exc).__name__)

    async def _replay_request(
        self,
        client: AsyncWebClient,
        bot_id: str,
        channel: str,
        thread_ts: str,
        message_ts: str,
        message: dict[str, Any],
    ) -> RunRequest | None:
        """An answer of ours replays its recorded input; a user's mention replays its text."""
        recorded = await find_recorded_input(client, channel, thread_ts, message_ts, bot_id)
        if recorded is not None:
            query, previous = recorded.query, recorded.previous_turn
            asked_at = recorded.asked_at
        elif not message.get("bot_id") and isinstance(message.get("text"), str):
            query = strip_mentions(message["text"])
            previous = await latest_turn(client, channel, thread_ts, bot_id, before=message_ts)
            asked_at = slack_ts_moment(message_ts)
        else:
            return None
        return RunRequest(
            client=client,
            channel=channel,
            thread_ts=thread_ts,
            query=query,
            previous_turn=previous,
            replay=True,
            asked_at=asked_at,
        )
