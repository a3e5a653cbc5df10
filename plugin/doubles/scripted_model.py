"""A scripted OpenAI-compatible chat-completions server on loopback.

The offline demo replays a recorded cassette through it, and the tests drive the real harness
with it. It speaks the real protocol (``POST /v1/chat/completions``), answers each request with
the next scripted step, records every request body, and treats an unexpected extra request or
an unused step as a failure: ``assert_complete`` raises a typed script error (as
openai-agents' testing models do)::

    ModelScriptError(AssertionError)    the run and the script disagree
    ├── UnexpectedModelCall             requests beyond the script (``extra``)
    └── UnconsumedModelSteps            scripted steps never asked for (``steps``, ``requested``)

They are ``AssertionError``s, so a test fails with them and ``demo`` reports them as before.

``max_tokens`` is honoured as a real server does: a value that is not a positive integer, or
one above ``max_output_tokens`` (when set), is refused ``400`` like OpenAI refuses it; a
scripted answer longer than the request's ``max_tokens`` is stopped there — ``finish_reason``
``length``, ``completion_tokens`` equal to ``max_tokens``, and the text and tool arguments cut
in proportion (what a model stopped mid-answer sends). The prompt tokens are reported as
scripted, whatever the limit: an endpoint counting more prompt than expected overruns a budget.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from aiohttp import web

from sre_diag.doubles.errors import ModelScriptError, UnconsumedModelSteps, UnexpectedModelCall
from sre_diag.doubles.loopback import LoopbackServer

__all__ = [
    "ModelScriptError",
    "ModelStep",
    "ScriptedModelServer",
    "ToolCallSpec",
    "UnconsumedModelSteps",
    "UnexpectedModelCall",
    "completion_body",
    "load_cassette",
]


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """One tool call the scripted model emits; ``arguments`` is sent verbatim if a string."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ModelStep:
    """One scripted answer: tool calls, a final text, or an HTTP error; optional delay."""

    content: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    prompt_tokens: int | None = 100
    completion_tokens: int | None = 20
    status: int = 200
    raw_body: str | None = None
    delay_seconds: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        calls = tuple(
            ToolCallSpec(id=c["id"], name=c["name"], arguments=c["arguments"])
            for c in data.get("tool_calls", ())
        )
        usage = data.get("usage", {})
        return cls(
            content=data.get("content"),
            tool_calls=calls,
            prompt_tokens=usage.get("prompt_tokens", 100),
            completion_tokens=usage.get("completion_tokens", 20),
            delay_seconds=float(data.get("delay_seconds", 0.0)),
        )


def load_cassette(path: Path) -> list[ModelStep]:
    """Read a cassette file: ``{"steps": [{"tool_calls": [...]} | {"content": "..."}]}``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [ModelStep.from_json(step) for step in data["steps"]]


@dataclass
class ScriptedModelServer(LoopbackServer):
    """Serve ``steps`` in order; record requests; fail on extras and leftovers."""

    steps: Sequence[ModelStep]
    model: str = "scripted-model"
    requests: list[dict[str, Any]] = field(default_factory=list)
    keep_requests: bool = True
    """False: count the requests but keep no body (a long test's own memory is not a leak)."""
    max_output_tokens: int | None = None
    """The most ``max_tokens`` the endpoint accepts (like a model's output limit); None: any."""
    unexpected: int = 0
    aborted: int = 0
    """Requests whose client went away before the answer (an aborted in-flight round)."""
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _count: int = 0
    _runner: web.AppRunner | None = None
    _port: int = 0
    # Handlers see the client go away, so an aborted in-flight round is counted.
    _handler_cancellation: ClassVar[bool] = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def request_count(self) -> int:
        return self._count

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        return app

    async def wait_for_requests(self, count: int) -> None:
        """Return once ``count`` requests have arrived (for tests that act mid-run)."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: self._count >= count)

    def assert_complete(self) -> None:
        """Every step was used and nothing beyond the script was asked.

        Raises ``UnexpectedModelCall`` or ``UnconsumedModelSteps``.
        """
        if self.unexpected:
            raise UnexpectedModelCall(self.unexpected)
        if self._count != len(self.steps):
            raise UnconsumedModelSteps(len(self.steps), self._count)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        index = self._count
        self._count += 1
        if self.keep_requests:
            self.requests.append(body)
        async with self._arrived:
            self._arrived.notify_all()
        if index >= len(self.steps):
            self.unexpected += 1
            return web.json_response(
                {"error": {"message": "unexpected request", "type": "server_error"}}, status=500
            )
        step = self.steps[index]
        if step.delay_seconds:
            try:
                await asyncio.sleep(step.delay_seconds)
            except asyncio.CancelledError:
                self.aborted += 1
                raise
        if step.raw_body is not None or step.status != 200:
            text = step.raw_body or json.dumps({"error": {"message": "scripted error"}})
            return web.Response(text=text, status=step.status, content_type="application/json")
        limit = body.get("max_tokens")
        refused = self._refused_max_tokens(limit)
        if refused is not None:
            return refused
        return web.json_response(completion_body(step, index, self.model, max_tokens=limit))

    def _refused_max_tokens(self, limit: object) -> web.Response | None:
        """The 400 a real endpoint answers to an unusable ``max_tokens`` (None: accepted)."""
        if limit is None:
            return None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
            if self.max_output_tokens is None or limit <= self.max_output_tokens:
                return None
        error = {
            "message": "max_tokens is out of range for this model",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_value",
        }
        return web.json_response({"error": error}, status=400)


def _cut(text: str, share: float) -> str:
    return text[: int(len(text) * share)]


def completion_body(
    step: ModelStep, index: int, model: str, *, max_tokens: int | None = None
) -> dict[str, Any]:
    """The ``chat.completion`` response body for one scripted step, stopped at ``max_tokens``
    when its scripted completion is longer."""
    completion = step.completion_tokens
    stopped = max_tokens is not None and completion is not None and completion > max_tokens
    share = max_tokens / completion if stopped and max_tokens and completion else 1.0
    content = step.content
    if stopped and content is not None:
        content = _cut(content, share)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if step.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": _cut(call.arguments_text(), share)
                    if stopped
                    else call.arguments_text(),
                },
            }
            for call in step.tool_calls
        ]
    finish = "tool_calls" if step.tool_calls else "stop"
    body: dict[str, Any] = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "length" if stopped else finish,
            }
        ],
    }
    if step.prompt_tokens is not None and completion is not None:
        completion = max_tokens if stopped and max_tokens is not None else completion
        body["usage"] = {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": step.prompt_tokens + completion,
        }
    return body
