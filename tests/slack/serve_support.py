"""``serve`` as a process: start it, read its log as it comes, signal it, ask its endpoints.

``ServeProcess.start(..., connect_timeout=N)`` runs ``serve`` through a tiny wrapper that only
shortens the 60 s connection bound (``serve(connect_timeout_seconds=N)``); everything else is
``python -m sre_diag serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import WSMsgType, web
from slack_sdk.signature import SignatureVerifier

from tests.slack.support import ADMIN, BOT_TOKEN, SIGNING_SECRET

REPO = Path(__file__).resolve().parents[2]
APP_TOKEN = "xapp-test-CANARY-app-token-91"

_WRAPPER = """
import asyncio, logging, sys
from sre_diag.commands.exits import load_settings
from sre_diag.service.ops import stop_on_signals
logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format="%(asctime)s %(levelname)s %(name)s %(message)s")
async def main() -> int:
    stop = stop_on_signals()
    from sre_diag.service.serve import serve
    return await serve(load_settings(), http=sys.argv[2] == "http", port=int(sys.argv[3]),
                       stop=stop, connect_timeout_seconds=float(sys.argv[1]))
sys.exit(asyncio.run(main()))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_env(tmp_path: Path, **values: str) -> dict[str, str]:
    """The environment of a ``serve`` process: test Slack credentials, one admin channel, audit
    and cache under ``tmp_path``; ``values`` override (an empty string is kept as given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "SLACK_", "OPENAI_"))}
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "DIAG_ADMIN_CHANNELS": ADMIN,
            "OPENAI_API_KEY": "k",
            "DIAG_MODEL": "scripted",
            "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
            "DIAG_CACHE_DIR": str(tmp_path / "cache"),
        }
    )
    env.update(values)
    return env


class ServeProcess:
    """A running ``serve``; its stderr is collected line by line as it comes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.started = time.monotonic()
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())
        self.stdout = ""

    @classmethod
    async def start(
        cls,
        env: Mapping[str, str],
        cwd: Path,
        *,
        http: bool = False,
        port: int = 0,
        connect_timeout: float | None = None,
        extra: Sequence[str] = (),
        command: Sequence[str] | None = None,
    ) -> ServeProcess:
        """``extra``: more ``serve`` arguments (``--workers 2``); ``command``: another command
        of ``python -m sre_diag`` altogether (``["worker"]``)."""
        if command is not None:
            args = ["-m", "sre_diag", *command]
        elif connect_timeout is None:
            args = ["-m", "sre_diag", "serve", *(["--http"] if http else [])]
            args += ["--port", str(port or free_port()), *extra]
        else:
            args = ["-c", _WRAPPER, str(connect_timeout), "http" if http else "socket"]
            args.append(str(port or free_port()))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # its own process group: aclose reaps its workers too
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            async with self._changed:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._changed.notify_all()

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    async def wait_for_log(self, text: str, count: int = 1, within: float = 60) -> list[str]:
        """The first ``count`` log lines containing ``text``."""

        def found() -> list[str]:
            return [line for line in self.lines if text in line]

        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(found()) >= count or self._reader.done()),
                within,
            )
        lines = found()
        assert len(lines) >= count, f"{text!r} not logged {count}x:\n{self.stderr}"
        return lines[:count]

    async def wait_handling_signals(self, within: float = 30) -> None:
        """Until the process catches SIGTERM (its handler is installed): Linux /proc."""
        for _ in range(int(within / 0.01)):
            if _catches_sigterm(self.process.pid):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("serve never caught SIGTERM")

    def send(self, sig: signal.Signals) -> float:
        """Send a signal; the monotonic time it was sent."""
        self.process.send_signal(sig)
        return time.monotonic()

    async def wait_exit(self, within: float = 60) -> int:
        assert self.process.stdout is not None
        out = await asyncio.wait_for(self.process.stdout.read(), within)
        self.stdout = out.decode("utf-8", "replace")
        code = await asyncio.wait_for(self.process.wait(), within)
        await asyncio.wait_for(self._reader, within)
        return code

    async def aclose(self) -> None:
        """Kill the process and every process it started (``serve --workers`` children hold its
        stderr: left alive, they would keep the reader waiting for ever)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


def _catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def wait_status(url: str, status: int, within: float = 60) -> float:
    """Poll ``url`` until it answers ``status``; the monotonic time it did."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            if (await get(url))[0] == status:
                return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never answered {status}")


def mention_body(
    event_id: str, ts: str, *, channel: str = ADMIN, text: str = "payment-api 5xx since 10:05"
) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T00000001",
        "api_app_id": "A00000001",
        "event_id": event_id,
        "event_time": 1764300000,
        "event": {
            "type": "app_mention",
            "user": "UHUMAN01",
            "channel": channel,
            "ts": ts,
            "event_ts": ts,
            "text": f"<@UDIAG0001> {text}",
        },
    }


async def post_signed(port: int, payload: dict[str, Any], *, form: bool = False) -> int:
    """POST an event to ``/slack/events`` signed with the test signing secret; the status.
    ``form``: an interaction (``payload=…`` form-encoded, as Slack sends button clicks)."""
    body = urlencode({"payload": json.dumps(payload)}) if form else json.dumps(payload)
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=timestamp, body=body)
    headers = {
        "Content-Type": "application/x-www-form-urlencoded" if form else "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature or "",
    }
    url = f"http://127.0.0.1:{port}/slack/events"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status


class SocketModeServer:
    """Slack's Socket Mode on loopback: ``hello``, then the envelopes given, then acks."""

    def __init__(self, *envelopes: dict[str, Any]) -> None:
        self.envelopes = list(envelopes)
        self.acks: list[dict[str, Any]] = []
        self.connections = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> SocketModeServer:
        app = web.Application()
        app.router.add_get("/link", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"ws://127.0.0.1:{port}/link"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        self.connections += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json(
            {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A00000001"}}
        )
        for envelope in self.envelopes:
            await ws.send_json(envelope)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                self.acks.append(json.loads(message.data))
        return ws


def socket_envelope(envelope_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "envelope_id": envelope_id,
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": 0,
        "retry_reason": "",
        "payload": payload,
    }
