"""The offline demo: the bundled incident, end to end, with a recorded model.

The recorded model turns (a cassette under ``examples/incident/cassettes/``, installed as
``sre_diag.resources.incident``) are replayed by the shipped scripted model server
(``sre_diag.doubles``); everything else is the real product: the harness, the gate, the
interceptor, the three real tools on the bundled runbooks and logs, and the local MySQL when it
is reachable (:mod:`sre_diag.commands.demo_db` finds or sets it up; ``DIAG_MYSQL_DSN`` overrides
where).
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
from sre_diag.wiring import build_harness

__all__ = ["DemoRun", "replay_demo", "run_demo"]

CASSETTES = BUNDLED_CASSETTES


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
    without_db_reason: str = ""


async def replay_demo() -> DemoRun:
    """Replay the bundled incident through the real harness against the recorded model."""
    from sre_diag.commands import demo_db

    base = load_settings()
    configured = base.mysql_dsn.get_secret_value() if base.mysql_dsn is not None else None
    database = await demo_db.find(configured, base)
    dsn, with_db = database.dsn or "", database.dsn is not None
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
    return DemoRun(query, asked_at, with_db, result, server, database.reason)


async def run_demo(*, show_json: bool = True) -> int:
    run = await replay_demo()
    query, with_db, result, server = run.query, run.with_db, run.result, run.server
    out = sys.stdout
    out.write(f"Query: {query}\n")
    out.write(f"Asked at: {run.asked_at:%Y-%m-%dT%H:%M:%SZ}\n")
    database = (
        "reachable: MySQL evidence included"
        if with_db
        else f"not used ({run.without_db_reason}): the MySQL check fails"
    )
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
