"""Audit: one JSON-lines record per run, with its model rounds and canonical invocations.

The record is built from the RunContext only (identity, usage, rounds, ledger) and the result's
outcome; evidence items and model text are not copied, so nothing a backend returned can leak
into it. It is written even when the run fails.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from plugin.context import RunContext
from plugin.errors import ConfigError
from plugin.result import ExecutionResult

__all__ = ["AuditSink", "JsonlAuditSink", "audit_record", "build_audit_sink"]


class AuditSink(Protocol):
    """Where run records go."""

    async def write(self, record: dict[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


class JsonlAuditSink:
    """Appends records to ``DIR/audit-YYYY-MM-DD.jsonl`` (UTC day), off the event loop."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def path_for(self, day: datetime) -> Path:
        return self.directory / f"audit-{day:%Y-%m-%d}.jsonl"

    async def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        await asyncio.to_thread(self._append, line)

    def _append(self, line: str) -> None:
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self.path_for(datetime.now(UTC)).open("a", encoding="utf-8") as handle:
                handle.write(line)

    async def aclose(self) -> None:
        return None


def build_audit_sink(spec: str) -> AuditSink:
    """``jsonl:DIR`` is supported; anything else is an operator error."""
    kind, _, target = spec.partition(":")
    if kind == "jsonl" and target:
        return JsonlAuditSink(Path(target))
    raise ConfigError(
        "DIAG_AUDIT_SINK must be jsonl:DIR (the mysql:// audit sink is not available yet)"
    )


def audit_record(
    ctx: RunContext, result: ExecutionResult, *, kind: str = "diagnosis"
) -> dict[str, Any]:
    """The audit record of one run: no evidence items, no model text, no credentials."""
    return {
        "kind": kind,
        "recorded_at": datetime.now(UTC).isoformat(),
        "run_id": ctx.run_id,
        "session_id": ctx.session_id,
        "outcome": result.outcome.value,
        "stop_reason": result.stop_reason.value if result.stop_reason else None,
        "failure": result.failure.model_dump(mode="json") if result.failure else None,
        "usage": result.usage.model_dump(mode="json"),
        "usage_estimated": ctx.usage.usage_estimated,
        "budgets": asdict(ctx.budgets),
        "rounds": [asdict(r) for r in ctx.rounds],
        "invocations": [
            {
                "tool_call_id": i.tool_call_id,
                "run_id": i.run_id,
                "tool": i.tool.value,
                "status": i.status.value,
                "code": i.code,
                "business_input": i.business_input,
                "scope": i.scope,
                "item_count": i.item_count,
                "truncated": i.truncated,
                "evaluation": i.evaluation.value if i.evaluation else None,
                "started_ms": round(i.started_ms, 3),
                "duration_ms": round(i.duration_ms, 3),
                "observation_bytes": i.observation_bytes,
            }
            for i in ctx.ledger
        ],
        "cited_tool_call_ids": sorted(result.draft.cited_ids()) if result.draft else [],
    }
