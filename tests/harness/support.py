"""Test support for the harness: in-test adapters speaking the adapter protocol, builders."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sre_diag.audit import AuditSink, AuditTrail, JsonlAuditSink
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer, ToolCallSpec
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.tools.base import AdapterCall, AdapterResult, EvidenceAdapter, Ready, ToolName
from sre_diag.tools.schemas import KnowledgeItem, LogItem, MysqlRow


class ScriptedAdapter:
    """An evidence adapter whose answers are given by the test; it records every call."""

    def __init__(
        self, tool: ToolName, answer: Callable[[AdapterCall[Any]], AdapterResult] | None = None
    ) -> None:
        self._tool = tool
        self._answer = answer or (lambda call: default_ready(tool))
        self.calls: list[AdapterCall[Any]] = []
        self.closed = False

    @property
    def tool(self) -> ToolName:
        return self._tool

    async def invoke(self, call: AdapterCall[Any]) -> AdapterResult:
        self.calls.append(call)
        return self._answer(call)

    async def aclose(self) -> None:
        self.closed = True


def default_ready(tool: ToolName, count: int = 2) -> Ready:
    items: list[Any]
    if tool is ToolName.LOOKUP_KNOWLEDGE:
        items = [
            KnowledgeItem(
                title="支付服务排查",
                heading=f"步骤 {n}",
                path="payment-api.zh.md",
                score=1.5,
                snippet=f"检查数据库连接池 {n}",
            )
            for n in range(count)
        ]
    elif tool is ToolName.QUERY_LOGS:
        items = [
            LogItem(
                ts=f"2026-11-28T10:0{n}:00Z",
                service="payment-api",
                level="ERROR",
                message="db pool exhausted",
            )
            for n in range(count)
        ]
    else:
        items = [MysqlRow(cells={"status": "FAILED", "n": 40 + n}) for n in range(count)]
    return Ready(items=items)


def adapters(**overrides: ScriptedAdapter) -> dict[ToolName, ScriptedAdapter]:
    table = {tool: ScriptedAdapter(tool) for tool in ToolName}
    for name, adapter in overrides.items():
        table[ToolName(name)] = adapter
    return table


def settings_for(server: ScriptedModelServer, tmp_path: Path, **env: Any) -> Settings:
    values: dict[str, Any] = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "DIAG_MODEL": "scripted-proxy-model",
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
    }
    values.update(env)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


OPEN_HARNESSES: list[Harness] = []


def harness(
    server: ScriptedModelServer,
    tmp_path: Path,
    adapter_table: dict[ToolName, ScriptedAdapter] | None = None,
    **env: Any,
) -> Harness:
    settings = settings_for(server, tmp_path, **env)
    built = Harness(
        settings=settings,
        adapters=adapter_table if adapter_table is not None else adapters(),
        audit=AuditTrail.for_settings(JsonlAuditSink(tmp_path / "audit"), settings),
    )
    OPEN_HARNESSES.append(built)
    return built


def on_sink(
    settings: Settings, adapter_table: Mapping[ToolName, EvidenceAdapter[Any]], sink: AuditSink
) -> Harness:
    """A Harness writing its audit to ``sink`` through the audit trail, as ``wiring`` builds it."""
    return Harness(
        settings=settings, adapters=adapter_table, audit=AuditTrail.for_settings(sink, settings)
    )


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    """Every record in the jsonl sink, once the open harnesses' audit writers are idle (records
    are written after ``diagnose`` returns)."""
    for open_harness in OPEN_HARNESSES:
        assert isinstance(open_harness.audit, AuditTrail)
        assert open_harness.audit.wait_idle(10), "audit writer still busy after 10 s"
    records: list[dict[str, Any]] = []
    for path in sorted((tmp_path / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text("utf-8").splitlines())
    return records


# -- script builders ---------------------------------------------------------------------

LOGS_INPUT = {
    "service": "payment-api",
    "start": "2026-11-28T10:00:00Z",
    "end": "2026-11-28T10:30:00Z",
    "level": "ERROR",
}


def call(
    call_id: str,
    tool: str,
    business: dict[str, Any],
    previous: tuple[str, str] | None = None,
) -> ToolCallSpec:
    arguments: dict[str, Any] = {"input": business}
    if previous is not None:
        arguments["previous_observation"] = {"tool_call_id": previous[0], "evaluation": previous[1]}
    return ToolCallSpec(id=call_id, name=tool, arguments=arguments)


def tool_step(
    *calls: ToolCallSpec, prompt_tokens: int = 100, completion_tokens: int = 20
) -> ModelStep:
    return ModelStep(
        tool_calls=calls, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )


def draft_json(cited: Sequence[str] = (), *, conclusion: bool = True) -> str:
    ids = list(cited)
    draft: dict[str, Any] = {
        "conclusion": (
            {
                "summary": "payment-api 连接池耗尽导致 5xx",
                "confidence": "HIGH",
                "evidence_tool_call_ids": ids,
            }
            if conclusion and ids
            else None
        ),
        "analysis": (
            [
                {
                    "kind": "FINDING",
                    "statement": "10:05 起大量 db pool exhausted 错误",
                    "evidence": {"status": "CITED", "tool_call_ids": ids},
                }
            ]
            if ids
            else [
                {
                    "kind": "NEGATIVE_OBSERVATION",
                    "statement": "未检查任何数据",
                    "evidence": {"status": "NO_EVIDENCE", "scope": "no bounded query possible"},
                }
            ]
        ),
        "action_plan": ["回滚 payment-api 到 v2.13.4"] if ids else [],
        "recommendations": ["为连接池配置变更加发布检查"] if ids else [],
        "limitations": {
            "checked_scope": ["payment-api ERROR 日志 10:00–10:30"] if ids else [],
            "missing_info": [] if conclusion and ids else ["需要服务名、时间窗口和错误特征"],
        },
    }
    return json.dumps(draft, ensure_ascii=False)


def final_step(text: str, prompt_tokens: int = 100, completion_tokens: int = 20) -> ModelStep:
    return ModelStep(content=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool messages (observations) a request body carried, parsed."""
    return [
        {**m, "observation": json.loads(m["content"])}
        for m in body["messages"]
        if m["role"] == "tool"
    ]
