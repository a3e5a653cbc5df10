"""The Bolt listeners: ``app_mention`` (the gate, then a background run), the Cancel button and
the ``replay_diagnosis`` message shortcut.

Everything this plugin chooses to ignore is acknowledged (Bolt would answer 404 otherwise and
Slack would retry) and logged with a reason. The channel is re-checked on every interaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from plugin.settings import Settings
from plugin.slack.gate import IgnoreReason, gate_mention, strip_mentions
from plugin.slack.render import CANCEL_ACTION_ID
from plugin.slack.runs import RunManager, RunRequest
from plugin.slack.turns import find_recorded_input, latest_turn

__all__ = ["REPLAY_CALLBACK_ID", "Listeners"]

_log = logging.getLogger(__name__)

REPLAY_CALLBACK_ID = "replay_diagnosis"
_EVENT_TTL_SECONDS = 3600.0


class Listeners:
    """The plugin's listeners, bound to one RunManager."""

    def __init__(self, manager: RunManager, settings: Settings) -> None:
        self.manager = manager
        self.admin_channels = frozenset(settings.admin_channels)
        self.ignored: list[IgnoreReason] = []

    def register(self, app: AsyncApp) -> None:
        app.event("app_mention")(self.on_mention)
        app.action(CANCEL_ACTION_ID)(self.on_cancel)
        app.shortcut(REPLAY_CALLBACK_ID)(self.on_replay)

    def _ignore(self, reason: IgnoreReason, event_id: object) -> None:
        self.ignored.append(reason)
        del self.ignored[:-1000]
        _log.info("ignored app_mention %s: %s", event_id, reason.value)

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
        reason = gate_mention(event, headers, self.admin_channels)
        event_id = body.get("event_id")
        if reason is not None:
            self._ignore(reason, event_id)
            return
        if isinstance(event_id, str) and not await self.manager.state.claim_event(
            event_id, _EVENT_TTL_SECONDS
        ):
            self._ignore(IgnoreReason.DUPLICATE_EVENT, event_id)
            return
        channel, thread_ts = event["channel"], event.get("thread_ts")
        previous = None
        if isinstance(thread_ts, str):
            previous = await latest_turn(client, channel, thread_ts, context.bot_id)
        await self.manager.submit(
            RunRequest(
                client=client,
                channel=channel,
                thread_ts=thread_ts if isinstance(thread_ts, str) else event["ts"],
                query=strip_mentions(event["text"]),
                previous_turn=previous,
                requested_by=event.get("user"),
            )
        )

    async def on_cancel(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        channel = (body.get("channel") or {}).get("id")
        actions = body.get("actions") or [{}]
        run_key = actions[0].get("value")
        if channel not in self.admin_channels or not isinstance(run_key, str):
            _log.info("ignored cancel outside the admin channels")
            return
        await self.manager.request_cancel(run_key, channel)

    async def on_replay(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = (body.get("channel") or {}).get("id")
        message = body.get("message") or {}
        if channel not in self.admin_channels or not isinstance(message.get("ts"), str):
            _log.info("ignored replay shortcut outside the admin channels")
            return
        thread_ts = message.get("thread_ts") or message["ts"]
        request = await self._replay_request(client, context, channel, thread_ts, message)
        if request is not None:
            await self.manager.submit(request)

    async def _replay_request(
        self,
        client: AsyncWebClient,
        context: AsyncBoltContext,
        channel: str,
        thread_ts: str,
        message: dict[str, Any],
    ) -> RunRequest | None:
        """An answer of ours replays its recorded input; a user's mention replays its text."""
        recorded = await find_recorded_input(
            client, channel, thread_ts, message["ts"], context.bot_id
        )
        if recorded is not None:
            query, previous = recorded.query, recorded.previous_turn
        elif not message.get("bot_id") and isinstance(message.get("text"), str):
            query = strip_mentions(message["text"])
            previous = await latest_turn(
                client, channel, thread_ts, context.bot_id, before=message["ts"]
            )
        else:
            return None
        return RunRequest(
            client=client,
            channel=channel,
            thread_ts=thread_ts,
            query=query,
            previous_turn=previous,
            replay=True,
        )
