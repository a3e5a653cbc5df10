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

__all__ = ["AuditSink", "JsonlAuditSink", "MysqlAuditSink", "audit_record", "build_audit_sink"]


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


_AUDIT_TABLE = """
CREATE TABLE IF NOT EXISTS diag_audit (
  run_id VARCHAR(64) NOT NULL PRIMARY KEY,
  session_id VARCHAR(255) NOT NULL,
  outcome VARCHAR(16) NOT NULL,
  recorded_at DATETIME(6) NOT NULL,
  record LONGTEXT NOT NULL,
  KEY diag_audit_session (session_id),
  KEY diag_audit_recorded (recorded_at)
) DEFAULT CHARSET=utf8mb4
"""


class MysqlAuditSink:
    """One row per run in ``diag_audit`` of a writable audit account's database.

    The table is created on first use. The pool is small, created lazily and closed by
    ``aclose``; a failed write raises to the harness, which logs it without failing the run.
    """

    def __init__(self, dsn: str, *, connect_timeout_seconds: float = 5.0) -> None:
        from tools.mysql import parse_dsn

        try:
            self._dsn = parse_dsn(dsn)
        except ValueError as exc:
            raise ConfigError(f"DIAG_AUDIT_SINK: {exc}") from None
        self._timeout = connect_timeout_seconds
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def _ensure_pool(self) -> Any:
        import aiomysql

        async with self._lock:
            if self._pool is None:
                d = self._dsn
                self._pool = await aiomysql.create_pool(
                    minsize=0, maxsize=2, host=d.host, port=d.port, user=d.user,
                    password=d.password, db=d.database, charset="utf8mb4", autocommit=True,
                    connect_timeout=self._timeout,
                )  # fmt: skip
                async with self._pool.acquire() as conn, conn.cursor() as cur:
                    await cur.execute(_AUDIT_TABLE)
            return self._pool

    async def write(self, record: dict[str, Any]) -> None:
        pool = await self._ensure_pool()
        recorded = datetime.fromisoformat(str(record["recorded_at"])).replace(tzinfo=None)
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                "INSERT INTO diag_audit (run_id, session_id, outcome, recorded_at, record)"
                " VALUES (%s, %s, %s, %s, %s)",
                (
                    record["run_id"], record["session_id"], record["outcome"], recorded,
                    json.dumps(record, ensure_ascii=False, separators=(",", ":")),
                ),
            )  # fmt: skip

    async def aclose(self) -> None:
        async with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()


def build_audit_sink(spec: str) -> AuditSink:
    """``jsonl:DIR`` or a ``mysql://`` DSN; anything else is an operator error."""
    kind, _, target = spec.partition(":")
    if kind == "jsonl" and target:
        return JsonlAuditSink(Path(target))
    if kind in {"mysql", "mariadb"}:
        return MysqlAuditSink(spec)
    raise ConfigError("DIAG_AUDIT_SINK must be jsonl:DIR or mysql://user:password@host:port/db")


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
