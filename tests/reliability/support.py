"""Shared pieces of the reliability suite: builders, a per-conversation model fake, checks.

Every case of this suite ends in a defined outcome (CONTRACTS §6), leaves exactly one audit
record per run in the jsonl sink, and is followed by a healthy diagnosis on the SAME Harness to
prove the process can still serve. Fakes sit only at process boundaries: the OpenAI-compatible
model server (``ScriptedModelServer`` or ``ConversationModelServer`` below), a local Loki, and
in-test evidence adapters speaking the adapter protocol where a real backend is not the point.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from sre_diag.audit import AuditTrail, JsonlAuditSink
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.doubles.loopback import serve_loopback
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer, completion_body
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.tools.base import EvidenceAdapter, ToolName
from tests.harness.support import draft_json, final_step

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC 2026-11-28, order ord_10231")
HEALTHY_QUERY = DiagnosisRequest("healthy follow-up: checkout latency since 11:00 UTC")
LOGS_WINDOW = {"start": "2026-11-28T10:00:00Z", "end": "2026-11-28T10:30:00Z"}


def healthy_step() -> ModelStep:
    """The scripted answer of the follow-up run: a valid no-conclusion Draft, no tool call."""
    return final_step(draft_json(conclusion=False))


OPEN: list[Harness] = []


def settings(base_url: str, tmp_path: Path, **env: Any) -> Settings:
    values: dict[str, Any] = {
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "test-key",
        "DIAG_MODEL": "scripted-proxy-model",
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
    }
    values.update(env)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def build(
    base_url: str,
    tmp_path: Path,
    adapters: Mapping[ToolName, EvidenceAdapter[Any]],
    **env: Any,
) -> Harness:
    """A Harness on the jsonl audit sink under ``tmp_path/audit``; closed by the conftest."""
    built = settings(base_url, tmp_path, **env)
    harness = Harness(
        settings=built,
        adapters=adapters,
        audit=AuditTrail.for_settings(JsonlAuditSink(tmp_path / "audit"), built),
    )
    OPEN.append(harness)
    return harness


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    """Every record in the jsonl sink, once the open harnesses' audit writers are idle (records
    are written after ``diagnose`` returns)."""
    for open_harness in OPEN:
        assert isinstance(open_harness.audit, AuditTrail)
        assert open_harness.audit.wait_idle(10), "audit writer still busy after 10 s"
    records: list[dict[str, Any]] = []
    for path in sorted((tmp_path / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text("utf-8").splitlines())
    return records


def audit_of(tmp_path: Path, result: ExecutionResult) -> dict[str, Any]:
    """The one audit record of ``result``'s run, checked against the result."""
    matching = [r for r in audit_records(tmp_path) if r["run_id"] == result.run_id]
    assert len(matching) == 1, f"expected one audit record for {result.run_id}"
    record = matching[0]
    assert record["outcome"] == result.outcome.value
    assert record["stop_reason"] == (result.stop_reason.value if result.stop_reason else None)
    assert record["failure"] == (result.failure.model_dump(mode="json") if result.failure else None)
    assert record["usage"]["model_calls"] == result.usage.model_calls
    return record


async def assert_still_serves(
    harness: Harness, tmp_path: Path, server: ScriptedModelServer | None = None
) -> ExecutionResult:
    """A healthy diagnosis on the same Harness succeeds and is audited."""
    before = server.request_count if server is not None else 0
    result = await harness.diagnose(HEALTHY_QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    assert result.failure is None and result.draft is not None
    if server is not None:
        assert server.request_count == before + 1
    audit_of(tmp_path, result)
    return result


def observations(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool observations a request body carried, parsed (each must be one JSON object)."""
    out = []
    for message in body["messages"]:
        if message["role"] == "tool":
            parsed = json.loads(message["content"])
            assert isinstance(parsed, dict)
            out.append(parsed)
    return out


def last_observation(server: ScriptedModelServer, request_index: int) -> dict[str, Any]:
    return observations(server.requests[request_index])[-1]


# -- a per-conversation model fake ---------------------------------------------------------


@dataclass
class ConversationModelServer:
    """An OpenAI-compatible loopback server that keeps conversations apart.

    The conversation is the ``query`` of the request's single user message; the step served is
    the number of assistant messages the request already carries. So concurrent runs on one
    server each get their own script, and a request beyond a script is counted as unexpected.
    """

    script: Callable[[str], Sequence[ModelStep]]
    requests: dict[str, int] = field(default_factory=dict)
    bodies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    keep_bodies: bool = False
    unexpected: int = 0
    _runner: web.AppRunner | None = None
    _port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner, self._port = await serve_loopback(app)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        user = next(m for m in messages if m["role"] == "user")
        query = json.loads(user["content"])["query"]
        index = sum(1 for m in messages if m["role"] == "assistant")
        self.requests[query] = self.requests.get(query, 0) + 1
        if self.keep_bodies:
            self.bodies.setdefault(query, []).append(body)
        steps = self.script(query)
        if index >= len(steps):
            self.unexpected += 1
            return web.json_response({"error": {"message": "unexpected"}}, status=500)
        step = steps[index]
        if step.delay_seconds:
            await asyncio.sleep(step.delay_seconds)
        return web.json_response(completion_body(step, index, "conversation-fake"))
