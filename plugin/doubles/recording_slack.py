"""A local Slack Web API that records every call: used by ``replay`` and by the tests.

It speaks the Web API's wire format on loopback (``POST /api/<method>``, form or JSON bodies,
``{"ok": ...}`` answers), keeps the messages it was sent so that ``conversations.replies`` can
read them back with their metadata, and misbehaves the way Slack does when told to:

- **scopes** (``scopes=``): a method whose scope the token lacks is answered as Slack answers
  it, HTTP 200 ``{"ok": false, "error": "missing_scope", "needed": …, "provided": …}``; the
  scope of a conversation method follows the conversation's type (``channels:history`` for a
  public channel, ``groups:history`` for a private one, …); the tests give it the scopes the
  app manifest grants. ``None`` grants everything.
- **rate limits** (``limits=``, :data:`SLACK_LIMITS`): ``chat.postMessage`` about one message a
  second per channel with short bursts, the other methods by their tier per workspace; past
  it, HTTP 429 ``ratelimited`` with ``Retry-After`` (whole seconds), as Slack answers.
- **failures** (:meth:`fail`): HTTP 429 with ``Retry-After``, 5xx, or ``ok: false`` with an
  error such as ``invalid_auth``, ``invalid_blocks``, ``msg_too_long``; ``after_store=True``
  makes the failure come AFTER the call took effect (a 503 for a message Slack stored).
- **a dropped connection** (:meth:`drop`), before or after the call took effect.
- **latency**: :meth:`latency` before the call takes effect, :meth:`delay` after it (a post
  stored while its poster still waits, past its client's timeout).

Each of them can apply to the calls whose parameters match only (the answer, which carries
metadata, and not the status message before it, say). Every call is recorded with its arrival
time, so rates can be measured; every refusal (429, ``missing_scope``) also in ``refusals``.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sre_diag.doubles.loopback import LoopbackServer

__all__ = [
    "BOT_ID",
    "BOT_USER_ID",
    "METHOD_SCOPES",
    "SLACK_LIMITS",
    "Limit",
    "RateLimits",
    "RecordedCall",
    "RecordingSlackApi",
    "Refusal",
    "blocks_to_text",
    "scope_needed",
]

BOT_ID = "BDIAG0001"
BOT_USER_ID = "UDIAG0001"
TEAM_ID = "T00000001"


@dataclass(frozen=True, slots=True)
class RecordedCall:
    method: str
    params: dict[str, Any]
    at: float = 0.0
    """``time.monotonic()`` when the call arrived."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call Slack refused before it took effect: rate limited, or a scope missing."""

    call: RecordedCall
    status: int
    error: str


Match = Callable[[dict[str, Any]], bool]

_BY_KIND = "{kind}"
METHOD_SCOPES: Mapping[str, str | None] = {
    "auth.test": None,
    "apps.connections.open": None,  # an app-level token's connections:write, not a bot scope
    "chat.getPermalink": None,
    "views.open": None,
    "chat.postMessage": "chat:write",
    "chat.postEphemeral": "chat:write",
    "chat.update": "chat:write",
    "chat.delete": "chat:write",
    "conversations.replies": "{kind}:history",
    "conversations.history": "{kind}:history",
    "conversations.info": "{kind}:read",
    "users.info": "users:read",
    "reactions.add": "reactions:write",
}
"""The bot scope each Web API method needs, from Slack's method pages; ``{kind}`` is the
conversation's type (``channels``, ``groups``, ``im``, ``mpim``). A method not listed here is
refused as Slack refuses a method it does not know (``unknown_method``)."""


def scope_needed(method: str, channel: str, private: Iterable[str] = ()) -> str | None:
    """The scope ``method`` needs on ``channel`` (None: none); KeyError for an unknown one."""
    scope = METHOD_SCOPES[method]
    if scope is None or _BY_KIND not in scope:
        return scope
    if channel.startswith("D"):
        kind = "im"
    elif channel.startswith("G") or channel in set(private):
        kind = "groups"
    else:
        kind = "channels"
    return scope.replace(_BY_KIND, kind)


@dataclass(frozen=True, slots=True)
class Limit:
    """A token bucket: ``per_minute`` sustained, up to ``burst`` at once."""

    per_minute: float
    burst: int


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Slack's limits: ``chat.postMessage`` per channel, every other method by its tier (per
    workspace and app); a method with no tier here is not limited."""

    post_per_channel: Limit
    tiers: Mapping[str, Limit]


_TIER1, _TIER2, _TIER3, _TIER4 = Limit(1, 1), Limit(20, 5), Limit(50, 10), Limit(100, 20)
SLACK_LIMITS = RateLimits(
    post_per_channel=Limit(60, 3),
    tiers={
        "chat.update": _TIER3,
        "chat.delete": _TIER3,
        "conversations.replies": _TIER3,
        "conversations.history": _TIER3,
        "conversations.info": _TIER3,
        "chat.postEphemeral": _TIER4,
        "chat.getPermalink": _TIER4,
        "views.open": _TIER4,
        "users.info": _TIER4,
        "auth.test": _TIER4,
        "apps.connections.open": _TIER1,
    },
)
"""What Slack documents: ``chat.postMessage`` about 1 a second per channel with short bursts;
Tier 1 about 1 a minute, Tier 3 50+, Tier 4 100+ (``chat.getPermalink``: hundreds)."""


@dataclass(slots=True)
class _Bucket:
    limit: Limit
    tokens: float
    stamp: float

    def take(self, now: float) -> int:
        """0 when a call may go now, else the whole seconds to wait (Slack's Retry-After)."""
        rate = self.limit.per_minute / 60.0
        self.tokens = min(float(self.limit.burst), self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - self.tokens) / rate))


class _Kind(enum.Enum):
    ANSWER = "answer"
    DROP = "drop"


@dataclass(slots=True)
class _Failure:
    status: int
    error: str
    retry_after: int | None
    times: int
    match: Match | None
    after_store: bool = False
    kind: _Kind = _Kind.ANSWER


@dataclass
class RecordingSlackApi(LoopbackServer):
    """Loopback Slack Web API; ``base_url`` is what ``AsyncWebClient(base_url=...)`` takes."""

    calls: list[RecordedCall] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    socket_mode_url: str | None = None
    """What ``apps.connections.open`` answers (a local WebSocket server in tests)."""
    scopes: frozenset[str] | None = None
    """The bot token's scopes (the tests read the manifest's); None grants every method."""
    limits: RateLimits | None = None
    """Slack's rate limits (:data:`SLACK_LIMITS`); None: never rate limited."""
    private_channels: frozenset[str] = frozenset()
    """Channels (beside ``G…`` ones) that are private: their methods need ``groups:*``."""
    refusals: list[Refusal] = field(default_factory=list)
    _failures: dict[str, list[_Failure]] = field(default_factory=dict)
    _delays: dict[str, list[tuple[float, Match | None]]] = field(default_factory=dict)
    _latency: dict[str, list[tuple[float, Match | None]]] = field(default_factory=dict)
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
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
        after_store: bool = False,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (those ``match`` accepts) fail; with
        ``after_store`` the call takes effect first (a 503 for a message Slack stored)."""
        failure = _Failure(status, error, retry_after, times, match, after_store)
        self._failures.setdefault(method, []).append(failure)

    def drop(
        self,
        method: str,
        *,
        times: int = 1,
        match: Match | None = None,
        after_store: bool = True,
    ) -> None:
        """Close the connection instead of answering the next ``times`` calls of ``method``
        (those ``match`` accepts); by default after the call took effect."""
        failure = _Failure(0, "", None, times, match, after_store, _Kind.DROP)
        self._failures.setdefault(method, []).append(failure)

    def latency(self, method: str, seconds: float, *, match: Match | None = None) -> None:
        """Hold every call of ``method`` (those ``match`` accepts) ``seconds`` BEFORE it takes
        effect (a slow Slack: nothing is stored yet)."""
        self._latency.setdefault(method, []).append((seconds, match))

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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await _params(request)
        call = RecordedCall(method, params, time.monotonic())
        self.calls.append(call)
        async with self._changed:
            self._changed.notify_all()
        refused = self._refusal(call)
        if refused is not None:
            return refused
        await _wait(self._latency.get(method, ()), params)
        failure = self._take_failure(method, params)
        if failure is not None and not failure.after_store:
            return _failure_response(request, failure)
        body = self._effect(method, params)
        await _wait(self._delays.get(method, ()), params)
        if failure is not None:
            return _failure_response(request, failure)
        return web.json_response(body)

    def _effect(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.getPermalink": self._permalink,
            "conversations.replies": self._replies,
            "conversations.info": self._info,
            "apps.connections.open": self._connections_open,
        }.get(method)
        return handler(params) if handler else {"ok": True}

    def _refusal(self, call: RecordedCall) -> web.Response | None:
        """Slack's answer to a call it refuses before acting: scope, then rate limit."""
        channel = str(call.params.get("channel") or "")
        if self.scopes is not None:
            if call.method not in METHOD_SCOPES:
                return self._refuse(call, 200, {"ok": False, "error": "unknown_method"})
            needed = scope_needed(call.method, channel, self.private_channels)
            if needed is not None and needed not in self.scopes:
                body = {
                    "ok": False,
                    "error": "missing_scope",
                    "needed": needed,
                    "provided": ",".join(sorted(self.scopes)),
                }
                return self._refuse(call, 200, body)
        wait = self._rate(call.method, channel, call.at)
        if wait:
            body = {"ok": False, "error": "ratelimited"}
            return self._refuse(call, 429, body, {"Retry-After": str(wait)})
        return None

    def _refuse(
        self,
        call: RecordedCall,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        self.refusals.append(Refusal(call, status, str(body["error"])))
        return web.json_response(body, status=status, headers=headers)

    def _rate(self, method: str, channel: str, now: float) -> int:
        """0 when ``method`` may run now, else Slack's Retry-After in seconds."""
        if self.limits is None:
            return 0
        if method == "chat.postMessage":
            limit: Limit | None = self.limits.post_per_channel
            key = (method, channel)
        else:
            limit, key = self.limits.tiers.get(method), (method, "")
        if limit is None:
            return 0
        bucket = self._buckets.setdefault(key, _Bucket(limit, float(limit.burst), now))
        return bucket.take(now)

    def refused(self, method: str, error: str = "ratelimited") -> list[Refusal]:
        return [r for r in self.refusals if r.call.method == method and r.error == error]

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

    def _info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel"))
        private = scope_needed("conversations.info", channel, self.private_channels)
        is_private = private == "groups:read"
        return {"ok": True, "channel": {"id": channel, "is_member": True, "is_private": is_private}}

    def _permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        # Events (a mention, an alert) reach the bot without passing through this double: any
        # message is taken to exist.
        channel, ts = str(params.get("channel")), str(params.get("message_ts"))
        link = f"https://example.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return {"ok": True, "channel": channel, "permalink": link}

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


async def _wait(delays: Iterable[tuple[float, Match | None]], params: dict[str, Any]) -> None:
    for seconds, match in delays:
        if match is None or match(params):
            await asyncio.sleep(seconds)


def _failure_response(request: web.Request, failure: _Failure) -> web.StreamResponse:
    if failure.kind is _Kind.DROP:
        if request.transport is not None:
            request.transport.abort()  # no status line, no body: the caller's read fails
        return web.Response()
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
