"""``python -m plugin replay FILE``: a recorded Slack event envelope, through the same listeners.

The envelope (JSON, as Slack delivers it) is signed and dispatched to a Bolt app with this
plugin mounted, whose Web API is a local recording server; the event's channel counts as an
admin channel for the replay. It prints what would have been posted (a text reading of the
blocks) — the answer's evidence view too, as a click on its Evidence button would post it —
and, as the last line, the Execution Result JSON.

A replay touches no production state: its dedupe, thread locks and cancels live in this process
(even with ``DIAG_REDIS_URL`` set), and its runs' session ids (hence audit records) start with
``replay:``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from plugin.commands.errors import ReplayError
from plugin.contract.result import ExecutionResult
from plugin.doubles.recording_slack import RecordingSlackApi, blocks_to_text
from plugin.settings import Settings
from plugin.slack import register
from plugin.slack.gate import malformed_detail
from plugin.slack.render import EVIDENCE_ACTION_ID

__all__ = ["ReplayError", "ReplayOutput", "replay_envelope"]

_SECRET = "local-replay-signing-secret"


class ReplayOutput:
    """What the replay posted, and the run's result."""

    def __init__(self, posts: list[str], result: ExecutionResult) -> None:
        self.posts = posts
        self.result = result


def _load(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        envelope = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReplayError("INVALID_ENVELOPE", "the file is not a JSON event envelope") from exc
    event = envelope.get("event") if isinstance(envelope, dict) else None
    if not isinstance(event, dict) or event.get("type") != "app_mention":
        raise ReplayError("INVALID_ENVELOPE", "expected an event_callback with an app_mention")
    detail = malformed_detail(event)
    if detail is not None:  # the listener would drop it; say why before dispatching anything
        raise ReplayError("INVALID_ENVELOPE", f"the app_mention cannot be served: {detail}")
    return text, event


async def replay_envelope(path: Path, settings: Settings) -> ReplayOutput:
    body, event = _load(path)
    async with RecordingSlackApi() as slack:
        # In-process state whatever DIAG_REDIS_URL says: a replay must never take (or free) a
        # real thread's lock, claim a real event id or raise a real cancel flag.
        replay_settings = settings.model_copy(
            update={
                "admin_channels": (event["channel"],),
                "slack_api_url": slack.base_url,
                "redis_url": None,
            }
        )
        client = AsyncWebClient(token="xoxb-local-replay", base_url=slack.base_url)
        app = AsyncApp(client=client, signing_secret=_SECRET, process_before_response=True)
        handle = register(app, replay_settings, replay=True)
        try:
            await app.async_dispatch(_signed(body, "application/json"))
            await handle.manager.wait_idle()
            ignored = handle.listeners.ignored
            if not handle.manager.completed:
                reason = ignored[-1].value if ignored else "NO_RUN"
                raise ReplayError("IGNORED_EVENT", f"the event started no diagnosis ({reason})")
            result = handle.manager.completed[-1]
            await _show_evidence(app, slack, json.loads(body), event)
        finally:
            await handle.close()
        posts = [
            f"[{call.method} thread_ts={call.params.get('thread_ts') or call.params.get('ts')}]\n"
            + _reading(call.params)
            for call in slack.calls
            if call.method in {"chat.postMessage", "chat.update"}
        ]
    return ReplayOutput(posts, result)


def _reading(params: dict[str, Any]) -> str:
    blocks = params.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if isinstance(blocks, list) and blocks:
        return blocks_to_text(blocks)
    return str(params.get("text", ""))


def _signed(body: str, content_type: str) -> AsyncBoltRequest:
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(_SECRET).generate_signature(timestamp=timestamp, body=body)
    headers: dict[str, str | Sequence[str]] = {
        "content-type": content_type,
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": signature or "",
    }
    return AsyncBoltRequest(body=body, headers=headers)


async def _show_evidence(
    app: AsyncApp, slack: RecordingSlackApi, envelope: dict[str, Any], event: dict[str, Any]
) -> None:
    """Click the answer's Evidence button (if it has one), as its asker would."""
    for call in reversed(slack.calls_of("chat.postMessage")):
        blocks = call.params.get("blocks")
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks or []
        buttons = [
            e
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "actions"
            for e in b.get("elements") or []
            if e.get("action_id") == EVIDENCE_ACTION_ID
        ]
        if buttons:
            break
    else:
        return
    payload = {
        "type": "block_actions",
        "user": {"id": str(event.get("user") or "UREPLAY")},
        "team": {"id": envelope.get("team_id")},
        "api_app_id": envelope.get("api_app_id"),
        "channel": {"id": event["channel"]},
        "message": {"ts": call.params.get("thread_ts"), "thread_ts": call.params.get("thread_ts")},
        "trigger_id": "replay",
        "actions": [{"action_id": EVIDENCE_ACTION_ID, "value": buttons[0].get("value")}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    await app.async_dispatch(_signed(body, "application/x-www-form-urlencoded"))
