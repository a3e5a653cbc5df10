"""The offline demo: the bundled incident, end to end, with a recorded model.

The recorded model turns (a cassette under ``examples/incident/cassettes/``, installed as
``sre_diag.resources.incident``) are replayed by the shipped scripted model server
(``sre_diag.doubles``); everything else is the real product: the harness, the gate, the
interceptor, the three real tools on the bundled runbooks and logs, and the local MySQL when it
is reachable (``scripts/setup_mysql.py`` creates it; ``DIAG_MYSQL_DSN`` overrides where).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sre_diag.commands.exits import EXIT_FAILED, exit_code, load_settings
from sre_diag.contract.request import DiagnosisRequest, parse_asked_at
from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import render_text
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer, load_cassette
from sre_diag.resources import BUNDLED_CASSETTES, BUNDLED_KNOWLEDGE, BUNDLED_LOGS
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.mysql import MysqlAdapter
from sre_diag.tools.schemas import MysqlInput
from sre_diag.wiring import build_harness

__all__ = ["DEMO_DSN", "DemoRun", "replay_demo", "run_demo"]

CASSETTES = BUNDLED_CASSETTES
# The read-only account `scripts/setup_mysql.py --ro-password diag_ro_demo` creates.
DEMO_DSN = "mysql://diag_ro:diag_ro_demo@127.0.0.1:3306/diag_demo"


async def _reachable(dsn: str) -> bool:
    """Whether the incident database answers a real query through the real adapter."""
    adapter = MysqlAdapter(dsn, (), connect_timeout_seconds=2.0)
    probe = MysqlInput(sql="SELECT COUNT(*) AS n FROM deployments", purpose="demo probe")
    try:
        result = await adapter.invoke(AdapterCall("demo-probe", "demo", probe))
    finally:
        await adapter.aclose()
    return isinstance(result, Ready)


def _read_cassette(path: Path) -> tuple[str, datetime, list[ModelStep]]:
    """The recorded question, when it was asked (the cassette's ``asked_at``), the turns."""
    recorded = json.loads(path.read_text(encoding="utf-8"))
    asked_at = parse_asked_at(str(recorded["asked_at"]))
    return str(recorded["query"]), asked_at, load_cassette(path)


@dataclass(frozen=True, slots=True)
class DemoRun:
    """One replay of the bundled incident: what was asked, the result, the model double (its
    ``requests`` are what the model was told)."""

    query: str
    asked_at: datetime
    with_db: bool
    result: ExecutionResult
    server: ScriptedModelServer


async def replay_demo() -> DemoRun:
    """Replay the bundled incident through the real harness against the recorded model."""
    configured = load_settings().mysql_dsn
    dsn = configured.get_secret_value() if configured is not None else DEMO_DSN
    with_db = await _reachable(dsn)
    cassette: Path = CASSETTES / ("with-mysql.json" if with_db else "without-mysql.json")
    query, asked_at, steps = _read_cassette(cassette)
    async with ScriptedModelServer(steps, model="recorded-cassette") as server:
        settings = load_settings(
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="offline-demo",
            DIAG_MODEL="recorded-cassette",
            DIAG_KNOWLEDGE_DIR=str(BUNDLED_KNOWLEDGE),
            DIAG_LOGS_SOURCE=str(BUNDLED_LOGS),
            DIAG_MYSQL_DSN=dsn if with_db else "",
            DIAG_MYSQL_ALLOWED_TABLES="",
        )
        harness = build_harness(settings)
        try:
            request = DiagnosisRequest(query, asked_at=asked_at)
            result = await harness.diagnose(request, session_id="demo")
        finally:
            await harness.aclose()
    return DemoRun(query, asked_at, with_db, result, server)


async def run_demo(*, show_json: bool = True) -> int:
    run = await replay_demo()
    query, with_db, result, server = run.query, run.with_db, run.result, run.server
    out = sys.stdout
    out.write(f"Query: {query}\n")
    out.write(f"Asked at: {run.asked_at:%Y-%m-%dT%H:%M:%SZ}\n")
    database = "reachable: MySQL evidence included" if with_db else "not reachable: a failed check"
    out.write(f"Database: {database}\n\n")
    out.write(render_text(result) + "\n")
    if show_json:
        out.write("\n" + result.to_json() + "\n")
    try:
        server.assert_complete()
    except AssertionError as exc:
        out.write(f"\nThe recorded model script did not replay cleanly: {exc}\n")
        return EXIT_FAILED
    return exit_code(result)
