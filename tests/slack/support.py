"""Slack test support: a recording Web API, signed requests through ``app.async_dispatch``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from plugin.audit import JsonlAuditSink
from plugin.model_replay import ScriptedModelServer
from plugin.slack import PluginHandle, register
from plugin.slack.recording_api import RecordingSlackApi
from plugin.usecase import Harness
from tests.harness.support import adapters, settings_for

SIGNING_SECRET = "test-signing-secret-CANARY-3c1d"
BOT_TOKEN = "xoxb-test-CANARY-bot-token-77"
ADMIN = "CADMIN0001"
OTHER = "COTHER0002"

ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
"""An event field given as ``ABSENT`` is left out of the event altogether."""


@dataclass
class SlackRig:
    app: AsyncApp
    handle: PluginHandle
    slack: RecordingSlackApi
    model: ScriptedModelServer

    async def dispatch(self, body: str, content_type: str, **headers: str) -> BoltResponse:
        timestamp = str(int(time.time()))
        signature = SignatureVerifier(SIGNING_SECRET).generate_signature(
            timestamp=timestamp, body=body
        )
        all_headers = {
            "content-type": content_type,
            "x-slack-request-timestamp": timestamp,
            "x-slack-signature": signature,
            **headers,
        }
        return await self.app.async_dispatch(AsyncBoltRequest(body=body, headers=all_headers))

    async def mention(
        self,
        text: Any,
        *,
        channel: Any = ADMIN,
        thread_ts: Any = None,
        event_id: str | None = None,
        retry_num: str | None = None,
        **event_fields: Any,
    ) -> BoltResponse:
        if "ts" in event_fields:
            ts = event_fields.pop("ts")
        else:
            ts = f"1764300000.{uuid.uuid4().int % 10**6:06d}"
        event: dict[str, Any] = {
            "type": "app_mention",
            "user": "UHUMAN01",
            "text": text,
            "ts": ts,
            "channel": channel,
            "event_ts": ts,
            **event_fields,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        event = {k: v for k, v in event.items() if v is not ABSENT}
        envelope = {
            "token": "legacy",
            "team_id": "T00000001",
            "api_app_id": "A00000001",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
        }
        headers = {"x-slack-retry-num": retry_num} if retry_num is not None else {}
        return await self.dispatch(json.dumps(envelope), "application/json", **headers)

    async def replay_shortcut(
        self, message: dict[str, Any], *, channel: str = ADMIN, user: str = "UHUMAN01"
    ) -> BoltResponse:
        """The ``replay_diagnosis`` message shortcut, clicked on ``message`` (as stored)."""
        fields = ("type", "ts", "thread_ts", "bot_id", "user", "text")
        return await self.interact(
            {
                "type": "message_action",
                "callback_id": "replay_diagnosis",
                "trigger_id": "1.2.3",
                "user": {"id": user},
                "team": {"id": "T00000001"},
                "api_app_id": "A00000001",
                "channel": {"id": channel},
                "message_ts": message.get("ts"),
                "message": {k: message[k] for k in fields if message.get(k) is not None},
            }
        )

    async def interact(self, payload: dict[str, Any]) -> BoltResponse:
        body = urlencode({"payload": json.dumps(payload)})
        return await self.dispatch(body, "application/x-www-form-urlencoded")

    def posts(self) -> list[dict[str, Any]]:
        return [c.params for c in self.slack.calls_of("chat.postMessage")]

    def answers(self) -> list[dict[str, Any]]:
        """Final answers: the posts that carry our metadata."""
        return [m for m in self.slack.messages if (m.get("metadata") or {}).get("event_type")]


Authorize = Callable[..., Awaitable[AuthorizeResult]]


def build_app(
    slack: RecordingSlackApi,
    *,
    process_before_response: bool = True,
    authorize: Authorize | None = None,
) -> AsyncApp:
    """The host app. Tests run listeners before the response so a dispatch is deterministic;
    the listeners ack first either way (production keeps Bolt's default: ack, then run).

    Without ``authorize`` Bolt authorizes the bot token with ``auth.test`` (which names the bot
    id); a host app may bring its own ``authorize=`` instead, whose result may lack ``bot_id``.
    """
    if authorize is not None:
        return AsyncApp(
            signing_secret=SIGNING_SECRET,
            client=AsyncWebClient(base_url=slack.base_url),
            authorize=authorize,
            process_before_response=process_before_response,
        )
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url)
    return AsyncApp(
        signing_secret=SIGNING_SECRET,
        client=client,
        process_before_response=process_before_response,
    )


@asynccontextmanager
async def slack_rig(
    model: ScriptedModelServer,
    tmp_path: Path,
    *,
    status_interval: float = 0.05,
    authorize: Authorize | None = None,
    **env: Any,
) -> AsyncIterator[SlackRig]:
    async with RecordingSlackApi() as slack:
        settings = settings_for(model, tmp_path, DIAG_ADMIN_CHANNELS=ADMIN, **env)
        harness = Harness(
            settings=settings, adapters=adapters(), audit=JsonlAuditSink(tmp_path / "audit")
        )
        app = build_app(slack, authorize=authorize)
        handle = register(app, settings, harness=harness, status_interval_seconds=status_interval)
        try:
            yield SlackRig(app=app, handle=handle, slack=slack, model=model)
        finally:
            await handle.close()
