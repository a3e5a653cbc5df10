"""``python -m sre_diag serve --http`` as a process: a signed mention over HTTP is answered in the
thread through the configured Web API URL, and SIGTERM drains the run before the process exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
from slack_sdk.signature import SignatureVerifier

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import draft_json
from tests.slack.support import ADMIN, BOT_TOKEN, MANIFEST_SCOPES, SIGNING_SECRET

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_listening(port: int) -> None:
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError("serve did not start listening")


async def test_serve_http_answers_and_drains_on_sigterm(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The answer arrives slowly, so SIGTERM lands while the run is in flight.
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=1.0)])
    port = _free_port()
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "DIAG_SLACK_API_URL": slack.base_url,
            "DIAG_ADMIN_CHANNELS": ADMIN,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "k",
            "DIAG_MODEL": "scripted",
            "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
            "DIAG_CACHE_DIR": str(tmp_path / "c"),
        }
        env.pop("SLACK_APP_TOKEN", None)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sre_diag",
            "serve",
            "--http",
            "--port",
            str(port),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        try:
            await _wait_listening(port)
            body = json.dumps(
                {
                    "type": "event_callback",
                    "team_id": "T00000001",
                    "api_app_id": "A00000001",
                    "event_id": "EvSERVE0001",
                    "event_time": 1764300000,
                    "event": {
                        "type": "app_mention",
                        "user": "UHUMAN01",
                        "channel": ADMIN,
                        "ts": "1764300000.000700",
                        "event_ts": "1764300000.000700",
                        "text": "<@UDIAG0001> payment-api 5xx since 10:05",
                    },
                }
            )
            timestamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                "X-Slack-Request-Timestamp": timestamp,
                "X-Slack-Signature": SignatureVerifier(SIGNING_SECRET).generate_signature(
                    timestamp=timestamp, body=body
                )
                or "",
            }
            url = f"http://127.0.0.1:{port}/slack/events"
            async with aiohttp.ClientSession() as session:
                async with session.post(url, data=body, headers=headers) as response:
                    assert response.status == 200
                async with session.post(
                    url, data=body, headers={**headers, "X-Slack-Signature": "v0=bad"}
                ) as forged:
                    assert forged.status == 401
            await model.wait_for_requests(1)
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), timeout=60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        answers = [m for m in slack.messages if m.get("metadata")]
    assert process.returncode == 0
    assert len(answers) == 1 and answers[0]["thread_ts"] == "1764300000.000700"
    assert model.request_count == 1
