"""Socket Mode round trip over a local WebSocket server, and the ``replay`` command."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.audit import AuditTrail, JsonlAuditSink
from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.harness.run import Harness
from sre_diag.slack import register
from tests.conftest import StartServer
from tests.harness.support import adapters, draft_json, final_step, settings_for
from tests.slack.support import ADMIN, BOT_TOKEN

REPO = Path(__file__).resolve().parents[2]


class SocketModeServer:
    """Speaks Slack's Socket Mode: hello, one events_api envelope, then waits for the ack."""

    def __init__(self, envelope: dict[str, Any]) -> None:
        self.envelope = envelope
        self.acks: list[dict[str, Any]] = []
        self.acked = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/link", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = next(iter(site._server.sockets)).getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}/link"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {},
                "connection_info": {"app_id": "A00000001"},
            }
        )
        await ws.send_json(self.envelope)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                self.acks.append(json.loads(message.data))
                self.acked.set()
        return ws


async def test_socket_mode_round_trip(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    event = {
        "type": "app_mention",
        "user": "UHUMAN01",
        "channel": ADMIN,
        "text": "<@UDIAG0001> payment-api 5xx since 10:05",
        "ts": "1764300000.000900",
        "event_ts": "1764300000.000900",
    }
    envelope = {
        "envelope_id": "env-0001",
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": 0,
        "retry_reason": "",
        "payload": {
            "token": "t",
            "team_id": "T00000001",
            "api_app_id": "A00000001",
            "event": event,
            "type": "event_callback",
            "event_id": "EvSOCKET01",
            "event_time": 1764300000,
        },
    }
    ws_server = SocketModeServer(envelope)
    await ws_server.start()
    async with RecordingSlackApi(socket_mode_url=ws_server.url) as slack:
        settings = settings_for(model, tmp_path, DIAG_ADMIN_CHANNELS=ADMIN)
        audit = AuditTrail.for_settings(JsonlAuditSink(tmp_path / "audit"), settings)
        harness = Harness(settings=settings, adapters=adapters(), audit=audit)
        app = AsyncApp(
            client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url),
            request_verification_enabled=False,
        )
        handle = register(app, settings, harness=harness, status_interval_seconds=0.05)
        handler = AsyncSocketModeHandler(app, "xapp-test-token")
        try:
            await handler.connect_async()
            await asyncio.wait_for(ws_server.acked.wait(), timeout=10)
            # status message + the answer
            await asyncio.wait_for(slack.wait_for_calls("chat.postMessage", 2), timeout=20)
            await handle.manager.wait_idle()
        finally:
            await handler.close_async()
            await handle.close()
            await ws_server.stop()
    assert ws_server.acks[0]["envelope_id"] == "env-0001"
    assert model.request_count == 1
    answers = [m for m in slack.messages if m.get("metadata")]
    assert len(answers) == 1 and answers[0]["thread_ts"] == "1764300000.000900"


async def test_replay_command_prints_posts_and_result(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "k",
        "DIAG_MODEL": "scripted",
        "DIAG_CACHE_DIR": str(tmp_path / "c"),
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
    }
    env.pop("DIAG_MYSQL_DSN", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sre_diag",
        "replay",
        str(REPO / "examples/slack/app_mention.json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "[chat.postMessage thread_ts=1795860360.000100]" in text
    assert "No confirmed cause" in text
    result = json.loads(text.strip().splitlines()[-1])
    assert result["outcome"] == "DRAFT"
    user = next(m for m in model.requests[0]["messages"] if m["role"] == "user")
    sent = json.loads(user["content"])
    assert sent["query"].startswith("payment-api 5xx since 10:05 UTC")
    # Asked on the day its text names, when the bundled incident happened (issue 22: a 2025 ts
    # sent the model to look a year before its 2026 data).
    assert sent["asked_at"].startswith("2026-11-28T10:06:00")


def test_sample_envelope_is_dated_like_its_data() -> None:
    """``examples/slack/app_mention.json``: its ``ts`` falls on the day its text names, a day
    the bundled incident logs cover, a few minutes after the "since 10:05" it asks about."""
    envelope = json.loads((REPO / "examples/slack/app_mention.json").read_text(encoding="utf-8"))
    event = envelope["event"]
    asked = datetime.fromtimestamp(float(event["ts"]), UTC)
    assert event["event_ts"] == event["ts"] and envelope["event_time"] == int(float(event["ts"]))
    day = asked.date().isoformat()
    assert f"on {day}" in event["text"]
    log_days = {d.name for d in (REPO / "examples/incident/logs").glob("*/*") if d.is_dir()}
    assert day in log_days
    since = datetime.fromisoformat(f"{day}T10:05:00+00:00")
    assert timedelta(0) < asked - since < timedelta(hours=1)


async def test_replay_command_rejects_a_non_mention(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "event_callback", "event": {"type": "message"}}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sre_diag",
        "replay",
        str(bad),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENAI_API_KEY": "sk-never-used"},
        cwd=tmp_path,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2
    assert json.loads(out.decode())["error"]["code"] == "INVALID_ENVELOPE"
