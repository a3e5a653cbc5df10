"""A loopback OpenAI-compatible chat server that answers per conversation.

Unlike the shipped ``sre_diag.doubles.scripted_model.ScriptedModelServer`` (one script served in
order), this fake can serve any number of interleaved or concurrent runs: the answer is decided by
the number of tool messages already in the request body. It reuses the shipped doubles for the
loopback server (``LoopbackServer``) and the wire format (``ModelStep``, ``completion_body``); only
the per-conversation script and the counters are bench-specific.

* 0 tool messages → round 1: ``query_logs``
* 1 tool message → round 2: ``lookup_knowledge`` carrying ``previous_observation`` for round 1
* 2 or more → the final Draft JSON citing the issued calls whose observation was ``READY``
  (a body that is not a harness observation, as a bare agent's tool returns, counts as READY).

Tool call ids are ``call-<hash of the user message>-<round>``, unique per conversation. Every
answer waits ``delay`` seconds first. ``GET /stats`` reports the request count, the peak number
of requests in flight and the wall-clock arrival time of the first request (for cold start);
``GET /reset`` zeroes them.

Run as a process: ``python -m bench.fake_model --delay 1.0`` prints ``PORT <n>`` and serves until
stdin closes or ``--max-seconds`` elapse.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from aiohttp import web

from sre_diag.doubles.loopback import LoopbackServer
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec, completion_body

_REPO = Path(__file__).resolve().parent.parent

__all__ = ["FakeModelProcess", "FakeModelServer", "answer_for", "draft_text", "step_for"]

LOGS_INPUT = {
    "service": "payment-api",
    "start": "2026-11-28T10:00:00Z",
    "end": "2026-11-28T10:30:00Z",
    "level": "ERROR",
}
KNOWLEDGE_INPUT = {"query": "payment-api db pool exhausted 连接池耗尽", "top_k": 3}


def _call_id(user_text: str, round_no: int) -> str:
    digest = hashlib.sha256(user_text.encode("utf-8")).hexdigest()[:16]
    return f"call-{digest}-{round_no}"


def draft_text(cited: list[str]) -> str:
    """A Draft that satisfies ``sre_diag.contract.draft`` for the given READY ids (none: no
    conclusion)."""
    finding = {
        "kind": "FINDING",
        "statement": "10:05 起大量 db pool exhausted 错误",
        "evidence": {"status": "CITED", "tool_call_ids": cited},
    }
    negative = {
        "kind": "NEGATIVE_OBSERVATION",
        "statement": "未检查到数据",
        "evidence": {"status": "NO_EVIDENCE", "scope": "bounded checks returned nothing"},
    }
    draft: dict[str, Any] = {
        "conclusion": (
            {"summary": "payment-api 连接池耗尽导致 5xx", "confidence": "HIGH",
             "evidence_tool_call_ids": cited}
            if cited else None
        ),
        "analysis": [finding] if cited else [negative],
        "action_plan": ["回滚 payment-api 到 v2.13.4"],
        "recommendations": ["为连接池配置变更加发布检查"],
        "limitations": {
            "checked_scope": ["payment-api ERROR 日志 10:00–10:30"],
            "missing_info": [] if cited else ["需要更多证据"],
        },
    }  # fmt: skip
    return json.dumps(draft, ensure_ascii=False)


def _is_ready(content: Any) -> bool:
    try:
        observation = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        return True
    if not isinstance(observation, dict) or "evidence_status" not in observation:
        return True
    return observation.get("evidence_status") == "READY"


def _user_text(body: dict[str, Any]) -> str:
    messages: list[dict[str, Any]] = body.get("messages", [])
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


def step_for(body: dict[str, Any]) -> ModelStep:
    """The scripted step answering one request body (see the module docs)."""
    messages: list[dict[str, Any]] = body.get("messages", [])
    user = _user_text(body)
    tools = [m for m in messages if m.get("role") == "tool"]
    if len(tools) == 0:
        return _tool_step(_call_id(user, 1), "query_logs", {"input": LOGS_INPUT})
    if len(tools) == 1:
        arguments = {
            "previous_observation": {"tool_call_id": _call_id(user, 1), "evaluation": "GAINED"},
            "input": KNOWLEDGE_INPUT,
        }
        return _tool_step(_call_id(user, 2), "lookup_knowledge", arguments)
    cited = [str(m.get("tool_call_id")) for m in tools if _is_ready(m.get("content"))]
    return ModelStep(content=draft_text(cited))


def answer_for(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for one request body, as the wire carries it."""
    message: dict[str, Any] = completion_body(step_for(body), 0, "bench-model")["choices"][0][
        "message"
    ]
    return message


def _tool_step(call_id: str, name: str, arguments: dict[str, Any]) -> ModelStep:
    return ModelStep(tool_calls=(ToolCallSpec(id=call_id, name=name, arguments=arguments),))


@dataclass
class FakeModelServer(LoopbackServer):
    """The per-conversation fake, in this event loop (``start``/``stop``)."""

    delay: float = 0.0
    requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    first_request_at: float | None = None
    firsts: dict[str, float] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _port: int = 0
    _ids: int = field(default=0)
    _handler_cancellation: ClassVar[bool] = True
    _backlog: ClassVar[int] = 1024

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def port(self) -> int:
        return self._port

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/reset", self._reset)
        app.router.add_get("/firsts", self._firsts)
        return app

    def stats(self) -> dict[str, float | int | None]:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "first_request_at": self.first_request_at,
        }

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.stats())

    async def _reset(self, request: web.Request) -> web.StreamResponse:
        self.requests = self.peak_in_flight = 0
        self.first_request_at = None
        self.firsts.clear()
        return web.json_response(self.stats())

    async def _firsts(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"firsts": self.firsts})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        if self.first_request_at is None:
            self.first_request_at = arrived
        self.requests += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            body = await request.json()
            user = _user_text(body)
            if user not in self.firsts:
                self.firsts[user] = arrived
            if self.delay > 0:
                await asyncio.sleep(self.delay)
            step = step_for(body)
        finally:
            self.in_flight -= 1
        self._ids += 1
        return web.json_response(
            completion_body(step, self._ids, str(body.get("model", "bench-model")))
        )


class FakeModelProcess:
    """The fake in its own process, so its CPU and memory stay out of the measured process."""

    def __init__(self, delay: float = 0.0, max_seconds: float = 900.0) -> None:
        self.delay = delay
        self.max_seconds = max_seconds
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Self:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_model", "--delay", str(self.delay),
             "--max-seconds", str(self.max_seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=_REPO,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(_REPO), os.environ.get("PYTHONPATH")]))},
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError("fake model process did not report its port")
        self.port = int(line[1])
        return self

    async def stats(self, path: str = "/stats") -> dict[str, Any]:
        """The server's counters (``path="/reset"`` zeroes them and returns the zeroes)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), timeout=10)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        _, _, payload = raw.partition(b"\r\n\r\n")
        result: dict[str, Any] = json.loads(payload)
        return result

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _serve(delay: float, max_seconds: float) -> None:
    server = await FakeModelServer(delay=delay).start()
    print(f"PORT {server.port}", flush=True)
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=wait_for_eof, daemon=True).start()
    try:
        await asyncio.wait_for(closed.wait(), timeout=max_seconds)
    except TimeoutError:
        pass
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="per-conversation fake OpenAI chat server")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="stop after this long")
    args = parser.parse_args()
    asyncio.run(_serve(args.delay, args.max_seconds))


if __name__ == "__main__":
    main()
