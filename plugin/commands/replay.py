"""``python -m sre_diag replay FILE``: a recorded Slack event envelope, through the same listeners.

The envelope (JSON, as Slack delivers it) is signed and dispatched to a Bolt app with this
plugin mounted, whose Web API is a local recording server; the event's channel counts as an
admin channel for the replay. Three kinds are replayed: an ``event_callback`` with an
``app_mention`` (a mention), an ``event_callback`` with a ``message`` event posted by a bot
(an alert: its sender counts as an alert source for the replay, without cooldown), and a
``message_action`` payload of the "Diagnose this" shortcut (as Slack posts it, form-encoded as
``payload=``; the file holds its JSON). It prints what would have been posted (a text reading of the
blocks) — the answer's evidence view too, as a click on its Evidence button would post it —
and, as the last line, the Execution Result JSON.

With ``--cassette FILE`` the model's turns come from a recorded file (the demo's cassette
format), served by the shipped scripted model server: the replay runs offline, and a cassette
that does not fit the run (a turn left over, a request beyond it) is refused
``CASSETTE_MISMATCH``.

A replay touches no production state: its dedupe, thread locks and cancels live in this process
(even with ``DIAG_REDIS_URL`` set), and its runs' session ids (hence audit records) start with
``replay:``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from pydantic import SecretStr
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.commands.errors import ReplayError
from sre_diag.contract.result import ExecutionResult
from sre_diag.doubles.errors import ModelScriptError
from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer, load_cassette
from sre_diag.settings import Settings
from sre_diag.slack import register
from sre_diag.slack.alerts import source_of
from sre_diag.slack.blocks import EVIDENCE_ACTION_ID, blocks_text
from sre_diag.slack.gate import malformed_detail, slack_ts
from sre_diag.slack.messages import DIAGNOSE_CALLBACK_ID

__all__ = ["ReplayError", "ReplayOutput", "replay_envelope"]

_SECRET = "local-replay-signing-secret"


class ReplayOutput:
    """What the replay posted, and the run's result."""

    def __init__(self, posts: list[str], result: ExecutionResult) -> None:
        self.posts = posts
        self.result = result


_EXPECTED = (
    "expected an event_callback with an app_mention or a bot's message, or a message_action "
    "of the diagnose_message shortcut"
)


class _Loaded:
    """What is dispatched: the signed body, its content type, and who and where it came from."""

    def __init__(
        self, body: str, content_type: str, channel: str, user: object, sources: tuple[str, ...]
    ) -> None:
        self.body = body
        self.content_type = content_type
        self.channel = channel
        self.user = user
        self.sources = sources


def _load(path: Path) -> _Loaded:
    try:
        text = path.read_text(encoding="utf-8")
        envelope = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReplayError("INVALID_ENVELOPE", "the file is not a JSON event envelope") from exc
    if not isinstance(envelope, dict):
        raise ReplayError("INVALID_ENVELOPE", _EXPECTED)
    if envelope.get("type") == "message_action":
        return _shortcut(envelope)
    event = envelope.get("event")
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(event, dict) or kind not in {"app_mention", "message"}:
        raise ReplayError("INVALID_ENVELOPE", _EXPECTED)
    if kind == "message":
        return _alert(text, event)
    detail = malformed_detail(event)
    if detail is not None:  # the listener would drop it; say why before dispatching anything
        raise ReplayError("INVALID_ENVELOPE", f"the app_mention cannot be served: {detail}")
    return _Loaded(text, "application/json", event["channel"], event.get("user"), ())


def _alert(text: str, event: dict[str, Any]) -> _Loaded:
    bot_id, app_id = source_of(event)
    channel = event.get("channel")
    if bot_id is None or not isinstance(channel, str) or slack_ts(event.get("ts")) is None:
        raise ReplayError(
            "INVALID_ENVELOPE", "the message cannot be served: no bot_id, channel or ts"
        )
    sources = tuple(s for s in (bot_id, app_id) if s is not None)
    return _Loaded(text, "application/json", channel, "UREPLAY", sources)


def _shortcut(payload: dict[str, Any]) -> _Loaded:
    channel = (
        (payload.get("channel") or {}).get("id")
        if isinstance(payload.get("channel"), dict)
        else None
    )
    if payload.get("callback_id") != DIAGNOSE_CALLBACK_ID or not isinstance(channel, str):
        raise ReplayError("INVALID_ENVELOPE", _EXPECTED)
    user = payload.get("user")
    body = urlencode({"payload": json.dumps(payload)})
    return _Loaded(
        body,
        "application/x-www-form-urlencoded",
        channel,
        user.get("id") if isinstance(user, dict) else None,
        (),
    )


def _cassette_steps(path: Path) -> list[ModelStep]:
    """The recorded model turns of ``path``; ``INVALID_CASSETTE`` when it cannot be read."""
    try:
        steps = load_cassette(path)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise ReplayError(
            "INVALID_CASSETTE", "the cassette is not a readable recorded model file"
        ) from None
    if not steps:
        raise ReplayError("INVALID_CASSETTE", "the cassette holds no model turn")
    return steps


async def _recorded_model(stack: AsyncExitStack, cassette: Path | None) -> dict[str, Any]:
    """Settings that point the run at the cassette's scripted model (none without one)."""
    if cassette is None:
        return {}
    server = ScriptedModelServer(_cassette_steps(cassette), model="recorded-cassette")
    await stack.enter_async_context(server)
    stack.callback(_check_cassette, server)
    return {
        "openai_base_url": server.base_url,
        "openai_api_key": SecretStr("offline-replay"),
        "model": "recorded-cassette",
    }


def _check_cassette(server: ScriptedModelServer) -> None:
    try:
        server.assert_complete()
    except ModelScriptError:
        raise ReplayError(
            "CASSETTE_MISMATCH", "the recorded model turns did not fit this event's run"
        ) from None


async def replay_envelope(
    path: Path, settings: Settings, *, cassette: Path | None = None
) -> ReplayOutput:
    loaded = _load(path)
    async with AsyncExitStack() as stack:
        model = await _recorded_model(stack, cassette)
        output = await _replay(loaded, settings, model)
    return output


async def _replay(loaded: _Loaded, settings: Settings, model: dict[str, Any]) -> ReplayOutput:
    async with RecordingSlackApi() as slack:
        # In-process state whatever DIAG_REDIS_URL says: a replay must never take (or free) a
        # real thread's lock, claim a real event id or raise a real cancel flag.
        replay_settings = settings.model_copy(
            update={
                "admin_channels": (loaded.channel,),
                "alert_sources": loaded.sources,
                "alert_cooldown_seconds": 0.0,
                "slack_api_url": slack.base_url,
                "redis_url": None,
                **model,
            }
        )
        client = AsyncWebClient(token="xoxb-local-replay", base_url=slack.base_url)
        app = AsyncApp(client=client, signing_secret=_SECRET, process_before_response=True)
        handle = register(app, replay_settings, replay=True)
        try:
            await app.async_dispatch(_signed(loaded.body, loaded.content_type))
            await handle.manager.wait_idle()
            ignored = [*handle.listeners.ignored, *handle.messages.ignored]
            if not handle.manager.completed:
                reason = ignored[-1].value if ignored else "NO_RUN"
                raise ReplayError("IGNORED_EVENT", f"the event started no diagnosis ({reason})")
            result = handle.manager.completed[-1]
            await _show_evidence(app, slack, _origin(loaded), loaded)
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
        return blocks_text(blocks)
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


def _origin(loaded: _Loaded) -> dict[str, Any]:
    """The app and workspace ids of what was dispatched (the Evidence click carries them)."""
    if loaded.content_type == "application/json":
        envelope = json.loads(loaded.body)
        return {"team_id": envelope.get("team_id"), "api_app_id": envelope.get("api_app_id")}
    payload = json.loads(parse_qs(loaded.body)["payload"][0])
    team = payload.get("team") if isinstance(payload.get("team"), dict) else {}
    return {"team_id": team.get("id"), "api_app_id": payload.get("api_app_id")}


async def _show_evidence(
    app: AsyncApp, slack: RecordingSlackApi, envelope: dict[str, Any], loaded: _Loaded
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
        "user": {"id": str(loaded.user or "UREPLAY")},
        "team": {"id": envelope.get("team_id")},
        "api_app_id": envelope.get("api_app_id"),
        "channel": {"id": loaded.channel},
        "message": {"ts": call.params.get("thread_ts"), "thread_ts": call.params.get("thread_ts")},
        "trigger_id": "replay",
        "actions": [{"action_id": EVIDENCE_ACTION_ID, "value": buttons[0].get("value")}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    await app.async_dispatch(_signed(body, "application/x-www-form-urlencoded"))
