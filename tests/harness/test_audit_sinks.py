"""Audit sinks: JSON lines and MySQL both get one record per run, failures included; a broken
sink never changes the run's outcome."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pymysql
import pytest

from plugin.audit import MysqlAuditSink, build_audit_sink
from plugin.errors import ConfigError
from plugin.request import DiagnosisRequest
from plugin.result import Outcome
from plugin.usecase import Harness
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    adapters,
    call,
    draft_json,
    final_step,
    settings_for,
    tool_step,
)
from tests.mysql_db import ADMIN_DSN

DATABASE = "diag_audit_test"


@pytest.fixture
def audit_dsn() -> str:
    parts = urlsplit(ADMIN_DSN)
    conn = pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        autocommit=True,
    )
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cur.execute(f"CREATE DATABASE {DATABASE}")
    conn.close()
    return f"{parts.scheme}://{parts.netloc}/{DATABASE}"


def _rows(dsn: str) -> list[tuple[str, str, str]]:
    parts = urlsplit(dsn)
    conn = pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=DATABASE,
    )
    with conn.cursor() as cur:
        cur.execute("SELECT run_id, outcome, record FROM diag_audit ORDER BY recorded_at")
        rows = [(str(a), str(b), str(c)) for a, b, c in cur.fetchall()]
    conn.close()
    return rows


async def test_mysql_sink_records_every_run(
    model_server: StartServer, tmp_path: Path, audit_dsn: str
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            final_step(draft_json(["c1"])),
            final_step("not a draft"),
        ]
    )
    sink = build_audit_sink(audit_dsn)
    assert isinstance(sink, MysqlAuditSink)
    harness = Harness(settings=settings_for(server, tmp_path), adapters=adapters(), audit=sink)
    try:
        ok = await harness.diagnose(DiagnosisRequest("payment-api 5xx"))
        failed = await harness.diagnose(DiagnosisRequest("payment-api 5xx"))
    finally:
        await harness.aclose()
    assert (ok.outcome, failed.outcome) == (Outcome.DRAFT, Outcome.FAILED)
    rows = _rows(audit_dsn)
    assert [(r[0], r[1]) for r in rows] == [(ok.run_id, "DRAFT"), (failed.run_id, "FAILED")]
    record = json.loads(rows[0][2])
    assert record["invocations"][0]["tool_call_id"] == "c1"


async def test_a_broken_sink_does_not_change_the_outcome(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([final_step(draft_json(conclusion=False))])
    sink = MysqlAuditSink("mysql://audit:pw@127.0.0.1:1/none", timeout_seconds=1)
    harness = Harness(settings=settings_for(server, tmp_path), adapters=adapters(), audit=sink)
    try:
        result = await harness.diagnose(DiagnosisRequest("payment-api 5xx"))
    finally:
        await harness.aclose()
    assert result.outcome is Outcome.DRAFT


@pytest.mark.parametrize("spec", ["", "jsonl:", "s3://bucket", "mysql://nohost"])
def test_bad_sink_settings_are_operator_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        build_audit_sink(spec)
