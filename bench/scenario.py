"""The shared 3-round scenario: in-process fake adapters, the harness, and a bare FunctionAgent.

Both sides get the same adapters (instant, in-process, answering fixed READY items), the same
model server and the same user message; the bare agent's plain ``FunctionTool``s accept the
same Envelope-shaped arguments, validate the business input with the same input model, call
the same adapter and return the items as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from llama_index.core.agent.workflow import AgentOutput, FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI
from pydantic import BaseModel

from sre_diag.audit import AuditTrail, JsonlAuditSink
from sre_diag.contract.prompts import system_prompt
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.tools.base import AdapterCall, AdapterResult, EvidenceAdapter, Ready, ToolName
from sre_diag.tools.schemas import (
    KnowledgeInput,
    KnowledgeItem,
    LogItem,
    LogsInput,
    MysqlInput,
    MysqlRow,
)

__all__ = [
    "BareAgent",
    "FakeAdapter",
    "bench_settings",
    "build_bench_harness",
    "fake_adapters",
    "is_draft",
    "request_for",
    "user_message",
]

_INPUTS: dict[ToolName, type[BaseModel]] = {
    ToolName.LOOKUP_KNOWLEDGE: KnowledgeInput,
    ToolName.QUERY_LOGS: LogsInput,
    ToolName.QUERY_MYSQL: MysqlInput,
}


def _items(tool: ToolName) -> list[BaseModel]:
    if tool is ToolName.LOOKUP_KNOWLEDGE:
        return [
            KnowledgeItem(title="支付服务排查", heading=f"步骤 {n}", path="payment-api.zh.md",
                          score=1.5, snippet=f"检查数据库连接池 {n}")
            for n in range(3)
        ]  # fmt: skip
    if tool is ToolName.QUERY_LOGS:
        return [
            LogItem(ts=f"2026-11-28T10:0{n}:00Z", service="payment-api", level="ERROR",
                    message="db pool exhausted: timed out after 3000ms waiting for connection")
            for n in range(5)
        ]  # fmt: skip
    return [MysqlRow(cells={"status": "PAYMENT_FAILED", "n": 40 + n}) for n in range(3)]


class FakeAdapter:
    """An instant in-process evidence adapter answering fixed READY items."""

    def __init__(self, tool: ToolName) -> None:
        self._tool = tool
        self._result = Ready(items=_items(tool))
        self.calls = 0

    @property
    def tool(self) -> ToolName:
        return self._tool

    async def invoke(self, call: AdapterCall[Any]) -> AdapterResult:
        self.calls += 1
        return self._result

    async def aclose(self) -> None:
        return None


def fake_adapters() -> dict[ToolName, FakeAdapter]:
    return {tool: FakeAdapter(tool) for tool in ToolName}


def bench_settings(base_url: str, audit_dir: Path, **env: Any) -> Settings:
    values: dict[str, Any] = {
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "bench-key",
        "DIAG_MODEL": "bench-model",
        "DIAG_AUDIT_SINK": f"jsonl:{audit_dir}",
    }
    values.update(env)
    return Settings(_env_file=None, **values)


def build_bench_harness(
    base_url: str, audit_dir: Path, adapters: dict[ToolName, EvidenceAdapter[Any]] | None = None
) -> Harness:
    """The full harness (gate, interceptor, ledger, strict parse, JSONL audit) on fakes."""
    table: dict[ToolName, EvidenceAdapter[Any]] = (
        dict(adapters) if adapters is not None else dict(fake_adapters())
    )
    settings = bench_settings(base_url, audit_dir)
    return Harness(
        settings=settings,
        adapters=table,
        audit=AuditTrail.for_settings(JsonlAuditSink(audit_dir), settings),
    )


def user_message(n: int) -> str:
    """The user message of run ``n`` (as the harness renders it), unique per run."""
    request = {"query": f"payment-api 5xx since 10:05 UTC 2026-11-28 (run {n})",
               "previous_turn": None}  # fmt: skip
    return json.dumps(request, ensure_ascii=False, separators=(",", ":"))


def request_for(n: int) -> DiagnosisRequest:
    return DiagnosisRequest(f"payment-api 5xx since 10:05 UTC 2026-11-28 (run {n})")


def is_draft(result: ExecutionResult) -> bool:
    return result.outcome is Outcome.DRAFT


def _plain_tool(tool: ToolName, adapter: FakeAdapter) -> FunctionTool:
    model = _INPUTS[tool]

    async def run(input: dict[str, Any], previous_observation: dict[str, Any] | None = None) -> str:
        business = model.model_validate_json(json.dumps(input))
        result = await adapter.invoke(AdapterCall(tool_call_id="bare", run_id="bare",
                                                  input=business))  # fmt: skip
        if not isinstance(result, Ready):
            return json.dumps({"error": "failed"})
        return json.dumps([item.model_dump(mode="json") for item in result.items],
                          ensure_ascii=False)  # fmt: skip

    return FunctionTool.from_defaults(async_fn=run, name=tool.value, description=tool.value)


class BareAgent:
    """A plain ``FunctionAgent`` (built once) with the same three tools and model server."""

    def __init__(
        self, base_url: str, http_client: httpx.AsyncClient, adapters: dict[ToolName, FakeAdapter]
    ) -> None:
        llm = OpenAI(
            model="gpt-4o-mini",
            api_base=base_url,
            api_key="bench-key",
            max_retries=0,
            temperature=0.0,
            async_http_client=http_client,
        )
        self.agent = FunctionAgent(
            name="bare_agent",
            description="bare FunctionAgent baseline",
            tools=[_plain_tool(tool, adapters[tool]) for tool in ToolName],
            llm=llm,
            system_prompt=system_prompt(),
            streaming=False,
        )

    async def run(self, n: int) -> str:
        output: Any = await self.agent.run(user_msg=user_message(n), max_iterations=11)
        if not isinstance(output, AgentOutput):
            raise TypeError("bare agent returned no AgentOutput")
        return str(output.response.content)
