"""``serve`` start-up and shutdown as processes (CONTRACTS §8), against a local fake Slack.

Exit 2 and one line for settings it cannot run with and for a bot token ``auth.test`` refuses;
one log line per failed connection attempt (never a traceback) and exit 1 when Slack is not
reached in time; SIGTERM/SIGINT at any moment — while importing, connecting, connected, with a
run in flight — drains and exits 0.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import draft_json
from tests.slack.serve_support import (
    APP_TOKEN,
    ServeProcess,
    SocketModeServer,
    free_port,
    get,
    mention_body,
    serve_env,
    socket_envelope,
    wait_status,
)
from tests.slack.support import BOT_TOKEN, MANIFEST_SCOPES, closed_port


def _one_error_line(process: ServeProcess) -> dict[str, str]:
    lines = process.stdout.strip().splitlines()
    assert len(lines) == 1, process.stdout
    error: dict[str, str] = json.loads(lines[0])["error"]
    assert error["code"] == "INVALID_SETTINGS"
    return error


def _no_traceback(process: ServeProcess) -> None:
    assert "Traceback" not in process.stderr + process.stdout, process.stderr
    assert BOT_TOKEN not in process.stderr + process.stdout
    assert APP_TOKEN not in process.stderr + process.stdout


@pytest.mark.parametrize(
    ("channels", "named"),
    [("", "DIAG_ADMIN_CHANNELS is empty"), ("general,C0123ABC", "'general'")],
)
async def test_admin_channels_empty_or_malformed_exit_2(
    tmp_path: Path, channels: str, named: str
) -> None:
    process = await ServeProcess.start(serve_env(tmp_path, DIAG_ADMIN_CHANNELS=channels), tmp_path)
    try:
        assert await process.wait_exit() == 2
    finally:
        await process.aclose()
    error = _one_error_line(process)
    assert "DIAG_ADMIN_CHANNELS" in error["message"] and named in error["message"]
    _no_traceback(process)


async def test_invalid_setting_exit_2(tmp_path: Path) -> None:
    process = await ServeProcess.start(serve_env(tmp_path, DIAG_MAX_MODEL_CALLS="abc"), tmp_path)
    try:
        assert await process.wait_exit() == 2
    finally:
        await process.aclose()
    assert "DIAG_MAX_MODEL_CALLS" in _one_error_line(process)["message"]
    _no_traceback(process)


@pytest.mark.parametrize("http", [True, False], ids=["http", "socket-mode"])
async def test_bot_token_refused_by_auth_test_exit_2(tmp_path: Path, http: bool) -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.fail("auth.test", error="invalid_auth", times=100)
        env = serve_env(tmp_path, DIAG_SLACK_API_URL=slack.base_url, SLACK_APP_TOKEN=APP_TOKEN)
        process = await ServeProcess.start(env, tmp_path, http=http)
        try:
            assert await process.wait_exit() == 2
        finally:
            await process.aclose()
        assert not slack.calls_of("apps.connections.open")
    message = _one_error_line(process)["message"]
    assert "SLACK_BOT_TOKEN" in message and "auth.test" in message and "invalid_auth" in message
    _no_traceback(process)


async def test_app_token_refused_one_line_per_attempt_then_exit_1(tmp_path: Path) -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.fail("apps.connections.open", error="invalid_auth", times=1000)
        env = serve_env(tmp_path, DIAG_SLACK_API_URL=slack.base_url, SLACK_APP_TOKEN=APP_TOKEN)
        process = await ServeProcess.start(env, tmp_path, connect_timeout=3)
        try:
            assert await process.wait_exit() == 1
        finally:
            await process.aclose()
        opened = len(slack.calls_of("apps.connections.open"))
    attempts = [line for line in process.lines if "Slack connection attempt" in line]
    assert len(attempts) == opened >= 2, process.stderr
    assert all("apps.connections.open" in a and "invalid_auth" in a for a in attempts)
    assert "not connected to Slack within 3 s" in process.stderr
    _no_traceback(process)


async def test_slack_unreachable_one_line_per_attempt_then_exit_1(tmp_path: Path) -> None:
    env = serve_env(tmp_path, DIAG_SLACK_API_URL=f"http://127.0.0.1:{closed_port()}/api/")
    port = free_port()
    process = await ServeProcess.start(env, tmp_path, http=True, port=port, connect_timeout=4)
    try:
        # While it tries, the process is alive but not ready.
        await process.wait_for_log("Slack connection attempt 1 failed at auth.test")
        assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
        assert (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 503
        assert await process.wait_exit() == 1
    finally:
        await process.aclose()
    elapsed = time.monotonic() - process.started
    attempts = [line for line in process.lines if "Slack connection attempt" in line]
    assert len(attempts) >= 2 and all("auth.test" in a for a in attempts), process.stderr
    assert elapsed < 4 + 10
    _no_traceback(process)


async def test_sigterm_while_connecting_exits_0(tmp_path: Path) -> None:
    env = serve_env(tmp_path, DIAG_SLACK_API_URL=f"http://127.0.0.1:{closed_port()}/api/")
    process = await ServeProcess.start(env, tmp_path, http=True)
    try:
        await process.wait_for_log("Slack connection attempt 1 failed")
        sent = process.send(signal.SIGTERM)
        assert await process.wait_exit(within=20) == 0
    finally:
        await process.aclose()
    assert time.monotonic() - sent < 5
    _no_traceback(process)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_while_starting_exits_0(tmp_path: Path, sig: signal.Signals) -> None:
    """The handler is installed before the Slack app is even imported."""
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        env = serve_env(tmp_path, DIAG_SLACK_API_URL=slack.base_url)
        process = await ServeProcess.start(env, tmp_path, http=True)
        try:
            await process.wait_handling_signals()
            process.send(sig)
            assert await process.wait_exit(within=30) == 0
        finally:
            await process.aclose()
    _no_traceback(process)


async def test_socket_mode_signal_drains_run_in_flight_and_exits_0(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=1.5)])
    mention = socket_envelope("env-1", mention_body("EvLIFE0001", "1764300000.000300"))
    ops_port = free_port()
    async with (
        SocketModeServer(mention) as ws,
        RecordingSlackApi(scopes=MANIFEST_SCOPES, socket_mode_url=ws.url) as slack,
    ):
        env = serve_env(
            tmp_path,
            DIAG_SLACK_API_URL=slack.base_url,
            SLACK_APP_TOKEN=APP_TOKEN,
            OPENAI_BASE_URL=model.base_url,
            DIAG_OPS_PORT=str(ops_port),
        )
        process = await ServeProcess.start(env, tmp_path)
        try:
            ready = await wait_status(f"http://127.0.0.1:{ops_port}/readyz", 200)
            await model.wait_for_requests(1)
            sent = process.send(signal.SIGINT)
            # Draining: not ready, still answering health.
            await wait_status(f"http://127.0.0.1:{ops_port}/readyz", 503, within=5)
            assert (await get(f"http://127.0.0.1:{ops_port}/healthz"))[0] == 200
            assert await process.wait_exit(within=60) == 0
            stopped = time.monotonic()
        finally:
            await process.aclose()
        answers = [m for m in slack.messages if m.get("metadata")]
    assert ws.acks and ws.acks[0]["envelope_id"] == "env-1"
    assert len(answers) == 1 and answers[0]["thread_ts"] == "1764300000.000300"
    assert ready - process.started < 30
    assert stopped - sent < 10
    assert "shutting down: draining 1 run(s)" in process.stderr
    _no_traceback(process)
