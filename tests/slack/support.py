"""Slack test support: a recording Web API, signed requests through ``app.async_dispatch``."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from redis.asyncio import Redis
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.audit import AuditTrail, JsonlAuditSink
from sre_diag.doubles.recording_slack import RateLimits, RecordingSlackApi
from sre_diag.doubles.scripted_model import ScriptedModelServer
from sre_diag.harness.run import Harness
from sre_diag.slack import PluginHandle, StatusBudget, register
from sre_diag.slack.jobs import JobQueue
from sre_diag.slack.state import DEFAULT_NAMESPACE
from tests.harness.support import adapters, settings_for

SIGNING_SECRET = "test-signing-secret-CANARY-3c1d"
APP_ID = "A00000001"
TEAM_ID = "T00000001"
FAST_STATUS = StatusBudget(rate=10_000, per_seconds=1.0, burst=1_000)
"""A status budget no test notices (tests of the budget pass their own)."""
BOT_TOKEN = "xoxb-test-CANARY-bot-token-77"
ADMIN = "CADMIN0001"
OTHER = "COTHER0002"

REPO = Path(__file__).resolve().parents[2]


def bot_scopes(manifest_text: str) -> frozenset[str]:
    """The bot token scopes an app manifest (YAML) grants."""
    manifest = yaml.safe_load(manifest_text)
    scopes = manifest.get("oauth_config", {}).get("scopes", {}).get("bot", [])
    return frozenset(str(s) for s in scopes)


MANIFEST_SCOPES = bot_scopes((REPO / "manifest.yaml").read_text(encoding="utf-8"))
"""The bot scopes the app manifest grants: the Slack double refuses every other one."""
if MANIFEST_SCOPES != bot_scopes((REPO / "manifest.http.yaml").read_text(encoding="utf-8")):
    raise AssertionError("the two app manifests grant different bot scopes")

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
        app_id: str = APP_ID,
        team_id: str = TEAM_ID,
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
            "team_id": team_id,
            "api_app_id": app_id,
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

    def thread_texts(self, thread_ts: str) -> list[str]:
        """The fallback ``text`` of every chat.postMessage into ``thread_ts``, in order."""
        return [
            str(c.params.get("text", ""))
            for c in self.slack.calls_of("chat.postMessage")
            if c.params.get("thread_ts") == thread_ts
        ]

    def final_status(self) -> str:
        """The text of the last ``chat.update`` (a finished run's status message)."""
        updates = self.slack.calls_of("chat.update")
        return str(updates[-1].params.get("text", "")) if updates else ""


def most_in_any_window(times: list[float], window_seconds: float) -> int:
    """The largest number of ``times`` inside any window of ``window_seconds``."""
    times = sorted(times)
    best, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= window_seconds:
            start += 1
        best = max(best, end - start + 1)
    return best


def cancel_payload(run_key: str, channel: str, app_id: str = APP_ID) -> dict[str, Any]:
    """A click on a status message's Cancel button (``block_actions``)."""
    return {
        "type": "block_actions",
        "user": {"id": "UHUMAN01"},
        "team": {"id": "T00000001"},
        "api_app_id": app_id,
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel},
        "trigger_id": "1.2.3",
        "actions": [
            {
                "type": "button",
                "action_id": "diag_cancel",
                "block_id": "b",
                "value": run_key,
                "action_ts": "1764300001.000001",
            }
        ],
    }


Authorize = Callable[..., Awaitable[AuthorizeResult]]


def build_app(
    slack: RecordingSlackApi,
    *,
    process_before_response: bool = True,
    authorize: Authorize | None = None,
    client_timeout: int = 30,
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
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url, timeout=client_timeout)
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
    lock_ttl: float = 30.0,
    status_budget: StatusBudget = FAST_STATUS,
    admin: str = ADMIN,
    queue: JobQueue | None = None,
    client_timeout: int = 30,
    limits: RateLimits | None = None,
    **env: Any,
) -> AsyncIterator[SlackRig]:
    """``client_timeout``: the Slack client's timeout (Slack's SDK default: 30 s); ``limits``:
    Slack's rate limits in the double (default: none)."""
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES, limits=limits) as slack:
        settings = settings_for(model, tmp_path, DIAG_ADMIN_CHANNELS=admin, **env)
        audit = AuditTrail.for_settings(JsonlAuditSink(tmp_path / "audit"), settings)
        harness = Harness(settings=settings, adapters=adapters(), audit=audit)
        app = build_app(slack, authorize=authorize, client_timeout=client_timeout)
        handle = register(
            app,
            settings,
            harness=harness,
            status_interval_seconds=status_interval,
            lock_ttl_seconds=lock_ttl,
            status_budget=status_budget,
            queue=queue,
        )
        try:
            yield SlackRig(app=app, handle=handle, slack=slack, model=model)
        finally:
            await handle.close()


# -- Redis ---------------------------------------------------------------------------------

REDIS_HOST = "127.0.0.1"
_private_redis: list[tuple[subprocess.Popen[bytes], int]] = []


def redis_port() -> int:
    """The port of this pytest process's own redis-server, started on first use and stopped
    when the process exits: tests that FLUSHDB or scan a db never meet another checkout's
    run (or another xdist worker) on the machine's Redis."""
    if _private_redis:
        return _private_redis[0][1]
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed", pytrace=False)
    workdir = tempfile.mkdtemp(prefix="sre-diag-redis-")
    with socket.socket() as sock:
        sock.bind((REDIS_HOST, 0))
        port = int(sock.getsockname()[1])
    args = [binary, "--port", str(port), "--bind", REDIS_HOST, "--save", "", "--appendonly"]
    args += ["no", "--dir", workdir, "--databases", "16"]
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
    )
    atexit.register(_stop_private_redis, process, workdir)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((REDIS_HOST, port), 1) as s:
            s.sendall(b"INFO server\r\n")
            # ours, not a server that took the port first
            if f"process_id:{process.pid}\r".encode() in s.recv(65536):
                _private_redis.append((process, port))
                return port
        time.sleep(0.05)
    pytest.fail("this test process's redis-server did not start", pytrace=False)


def _die_with_parent() -> None:
    """In the redis-server child: SIGTERM when the pytest process dies, however it dies (no
    atexit after a SIGKILL or a crashed xdist worker)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop_private_redis(process: subprocess.Popen[bytes], workdir: str) -> None:
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    shutil.rmtree(workdir, ignore_errors=True)


def redis_url(db: int = 0, port: int | None = None) -> str:
    return f"redis://{REDIS_HOST}:{redis_port() if port is None else port}/{db}"


async def require_redis(db: int = 0) -> Redis:
    """An admin connection to the machine's Redis; a missing one fails the test, never skips."""
    client: Redis = Redis.from_url(redis_url(db), socket_connect_timeout=2, decode_responses=True)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        pytest.fail(f"Redis not reachable at {redis_url(db)}: {type(exc).__name__}", pytrace=False)
    return client


def unique_app_id() -> str:
    """A Slack-shaped app id no other test uses: every key a test writes carries it."""
    return f"A{uuid.uuid4().hex[:10].upper()}"


async def scoped_keys(admin: Redis, app_id: str) -> dict[str, str | None]:
    """Every key carrying ``app_id`` in its scope, with its string value."""
    keys = [k async for k in admin.scan_iter(match=f"{DEFAULT_NAMESPACE}:*:{app_id}:*")]
    values = await admin.mget(keys) if keys else []
    return dict(zip(keys, values, strict=True))


async def scrub(admin: Redis, app_id: str) -> None:
    keys = list(await scoped_keys(admin, app_id))
    if keys:
        await admin.delete(*keys)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind((REDIS_HOST, 0))
        return int(sock.getsockname()[1])


class TcpProxy:
    """A loopback TCP proxy in front of Redis that can be cut (a network partition) and
    restored: ``cut()`` drops every connection and refuses new ones."""

    def __init__(self, port: int | None = None) -> None:
        self._target = redis_port() if port is None else port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    def url(self, db: int = 0) -> str:
        return redis_url(db, self.port)

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, REDIS_HOST, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(REDIS_HOST, self._target)
        self._writers |= {writer, up_writer}
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        self._tasks.update(pipes)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for task in pipes:
            task.cancel()
            self._tasks.discard(task)
        for w in (writer, up_writer):
            w.transport.abort()
            self._writers.discard(w)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


# -- answer buttons ------------------------------------------------------------------------


def blocks_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def answer_button(rig: SlackRig, action_id: str) -> dict[str, Any]:
    """The button ``action_id`` of the last final answer (the post carrying our metadata)."""
    answer = rig.answers()[-1]
    for block in answer.get("blocks") or []:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return dict(element)
    raise AssertionError(f"the answer has no {action_id} button")


def button_payload(
    action_id: str,
    value: str,
    *,
    channel: str = ADMIN,
    thread_ts: str = "1764300000.000100",
    user: str = "UHUMAN01",
    app_id: str = APP_ID,
) -> dict[str, Any]:
    """A click on one of an answer's buttons (``block_actions``), in ``thread_ts``."""
    return {
        "type": "block_actions",
        "user": {"id": user},
        "team": {"id": TEAM_ID},
        "api_app_id": app_id,
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel, "thread_ts": thread_ts},
        "message": {"ts": "1764400000.000009", "thread_ts": thread_ts},
        "trigger_id": "1.2.3",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "b",
                "value": value,
                "action_ts": "1764300001.000001",
            }
        ],
    }
