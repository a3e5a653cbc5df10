"""Signed ``message_action`` (the "Diagnose this" shortcut) and ``message`` events (alerts) for
the Slack rig, and what the scripted model was asked."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from slack_bolt.response import BoltResponse

from sre_diag.doubles.scripted_model import ScriptedModelServer
from tests.slack.support import ADMIN, APP_ID, TEAM_ID, SlackRig

__all__ = ["ALERT_APP", "ALERT_BOT", "alert_event", "asked", "diagnose", "new_ts", "queries"]

ALERT_BOT = "B0ALERTS01"
ALERT_APP = "A0ALERTS01"


def new_ts() -> str:
    return f"1764300000.{uuid.uuid4().int % 10**6:06d}"


async def diagnose(
    rig: SlackRig,
    message: dict[str, Any],
    *,
    channel: str = ADMIN,
    user: str = "UHUMAN01",
    trigger_id: str | None = None,
) -> BoltResponse:
    """The ``diagnose_message`` shortcut clicked on ``message`` (as Slack sends it: each click
    has a trigger id of its own)."""
    return await rig.interact(
        {
            "type": "message_action",
            "callback_id": "diagnose_message",
            "trigger_id": trigger_id or f"{uuid.uuid4().int % 10**12}.1.{uuid.uuid4().hex[:8]}",
            "action_ts": "1764300001.000001",
            "user": {"id": user},
            "team": {"id": TEAM_ID},
            "api_app_id": APP_ID,
            "channel": {"id": channel},
            "message_ts": message.get("ts"),
            "message": message,
            "response_url": "https://hooks.slack.example/actions/1",
        }
    )


async def alert_event(
    rig: SlackRig,
    *,
    text: str = "",
    attachments: list[dict[str, Any]] | None = None,
    channel: str = ADMIN,
    ts: str | None = None,
    event_id: str | None = None,
    retry_num: str | None = None,
    **fields: Any,
) -> BoltResponse:
    """A ``message`` event as Slack delivers it (by default: a bot message of ``ALERT_BOT``);
    a field given as None is left out."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": ALERT_BOT,
        "app_id": ALERT_APP,
        "username": "Alertmanager",
        "text": text,
        "ts": ts,
        "channel": channel,
        "channel_type": "group",
        "event_ts": ts,
    }
    if attachments is not None:
        event["attachments"] = attachments
    event.update(fields)
    event = {k: v for k, v in event.items() if v is not None}
    envelope = {
        "token": "legacy",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
    }
    headers = {"x-slack-retry-num": retry_num} if retry_num is not None else {}
    return await rig.dispatch(json.dumps(envelope), "application/json", **headers)


def _user_message(request: dict[str, Any]) -> dict[str, Any]:
    user = next(m for m in request["messages"] if m["role"] == "user")
    return dict(json.loads(user["content"]))


def queries(model: ScriptedModelServer) -> list[str]:
    """The Query of each run, as the model was sent it (first request of each run)."""
    return [
        str(_user_message(r)["query"])
        for r in model.requests
        if not any(m["role"] == "tool" for m in r["messages"])
    ]


def asked(model: ScriptedModelServer) -> list[dict[str, Any]]:
    """The user message of each run's first model request."""
    return [
        _user_message(r)
        for r in model.requests
        if not any(m["role"] == "tool" for m in r["messages"])
    ]
