"""A local Slack Web API that records every call: used by ``replay`` and by the tests.

It speaks the Web API's wire format on loopback (``POST /api/<method>``, form or JSON bodies,
``{"ok": ...}`` answers), keeps the messages it was sent so that ``conversations.replies`` can
read them back with their metadata, and can be told to fail a method (HTTP 429 with
``Retry-After``, 5xx, or ``ok: false`` with an error such as ``invalid_auth``, ``invalid_blocks``,
``msg_too_long`` or ``metadata_too_large``), optionally only the calls whose parameters match
(the answer, which carries metadata, and not the status message before it, say). Every call is
recorded with its arrival time, so rates (``chat.update`` per minute) can be measured.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sre_diag.doubles.loopback import LoopbackServer

__all__ = ["BOT_ID", "BOT_USER_ID", "RecordedCall", "RecordingSlackApi", "blocks_to_text"]

BOT_ID = "BDIAG0001"
BOT_USER_ID = "UDIAG0001"
TEAM_ID = "T00000001"


@dataclass(frozen=True, slots=True)
class RecordedCall:
    method: str
    params: dict[str, Any]
    at: float = 0.0
    """``time.monotonic()`` when the call arrived."""


Match = Callable[[dict[str, Any]], bool]


@dataclass(slots=True)
class _Failure:
    status: int
    error: str
    retry_after: int | None
    times: int
    match: Match | None


@dataclass
class RecordingSlackApi(LoopbackServer):
    """Loopback Slack Web API; ``base_url`` is what ``AsyncWebClient(base_url=...)`` takes."""

    calls: list[RecordedCall] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    socket_mode_url: str | None = None
    """What ``apps.connections.open`` answers (a local WebSocket server in tests)."""
    _failures: dict[str, list[_Failure]] = field(default_factory=dict)
    _delays: dict[str, list[tuple[float, Match | None]]] = field(default_factory=dict)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _ts: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None
    _port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/api/"

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._handle)
        app.router.add_get("/api/{method}", self._handle)
        return app

    # -- scripting ---------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        *,
        status: int = 200,
        error: str = "internal_error",
        retry_after: int | None = None,
        times: int = 1,
        match: Match | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (those ``match`` accepts) fail."""
        failure = _Failure(status, error, retry_after, times, match)
        self._failures.setdefault(method, []).append(failure)

    def delay(self, method: str, seconds: float, *, match: Match | None = None) -> None:
        """Answer every call of ``method`` (those ``match`` accepts) ``seconds`` late, AFTER
        it took effect: a message is in the channel while its poster still waits (a slow
        Slack, a 429's Retry-After, a timeout on the way back)."""
        self._delays.setdefault(method, []).append((seconds, match))

    def seed_message(self, channel: str, **message: Any) -> dict[str, Any]:
        """Put a message into a channel, e.g. a user's mention or an older bot answer."""
        stored = {"type": "message", "channel": channel, **message}
        stored.setdefault("ts", self._next_ts())
        self.messages.append(stored)
        return stored

    async def wait_for_calls(self, method: str, count: int) -> None:
        """Return once ``method`` was called ``count`` times."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.calls_of(method)) >= count)

    def calls_of(self, method: str) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method]

    # -- handling ----------------------------------------------------------------------------

    def _next_ts(self) -> str:
        return f"1764400000.{next(iter(self._ts)):06d}"

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        self.calls.append(RecordedCall(method, params, time.monotonic()))
        async with self._changed:
            self._changed.notify_all()
        failure = self._take_failure(method, params)
        if failure is not None:
            return _failure_response(failure)
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "conversations.replies": self._replies,
            "apps.connections.open": self._connections_open,
        }.get(method)
        body = handler(params) if handler else {"ok": True}
        for seconds, match in self._delays.get(method, ()):
            if match is None or match(params):
                await asyncio.sleep(seconds)
        return web.json_response(body)

    def _take_failure(self, method: str, params: dict[str, Any]) -> _Failure | None:
        queue = self._failures.get(method) or []
        for failure in queue:
            if failure.match is None or failure.match(params):
                failure.times -= 1
                if failure.times <= 0:
                    queue.remove(failure)
                return failure
        return None

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://example.slack.com/",
            "team": "Example",
            "user": "diag",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.socket_mode_url is None:
            return {"ok": False, "error": "not_allowed_token_type"}
        return {"ok": True, "url": self.socket_mode_url}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self.seed_message(
            str(params.get("channel")),
            text=params.get("text", ""),
            blocks=_json_field(params.get("blocks")) or [],
            thread_ts=params.get("thread_ts"),
            metadata=_json_field(params.get("metadata")),
            bot_id=BOT_ID,
            user=BOT_USER_ID,
        )
        return {"ok": True, "channel": message["channel"], "ts": message["ts"], "message": message}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        for message in self.messages:
            if message["ts"] == params.get("ts") and message["channel"] == params.get("channel"):
                message["text"] = params.get("text", message.get("text"))
                message["blocks"] = _json_field(params.get("blocks")) or message.get("blocks")
                return {"ok": True, "channel": message["channel"], "ts": message["ts"]}
        return {"ok": False, "error": "message_not_found"}

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), params.get("ts")
        with_metadata = str(params.get("include_all_metadata", "")).lower() in {"1", "true"}
        thread = [
            {k: v for k, v in m.items() if with_metadata or k != "metadata"}
            for m in self.messages
            if m["channel"] == channel and (m["ts"] == ts or m.get("thread_ts") == ts)
        ]
        thread.sort(key=lambda m: float(m["ts"]))
        return {"ok": True, "messages": thread, "has_more": False}


async def _params(request: web.Request) -> dict[str, Any]:
    if request.method == "GET":
        return dict(request.query)
    if request.content_type == "application/json":
        data = await request.json()
        return dict(data) if isinstance(data, dict) else {}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _json_field(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _failure_response(failure: _Failure) -> web.Response:
    headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
    return web.json_response(
        {"ok": False, "error": failure.error}, status=failure.status, headers=headers
    )


def blocks_to_text(blocks: Iterable[dict[str, Any]]) -> str:
    """A plain-text reading of Block Kit blocks (what a person would see, roughly)."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind in {"header", "section"}:
            text = block.get("text") or {}
            if text.get("text"):
                lines.append(str(text["text"]))
            lines += [str(f.get("text", "")) for f in block.get("fields") or []]
        elif kind == "context":
            lines.append("  ".join(str(e.get("text", "")) for e in block.get("elements") or []))
        elif kind == "actions":
            labels = [
                str((e.get("text") or {}).get("text", "")) for e in block.get("elements") or []
            ]
            lines.append("[" + "] [".join(labels) + "]")
        elif kind == "divider":
            lines.append("---")
    return "\n".join(lines)
