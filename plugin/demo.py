"""The offline demo: the bundled incident, end to end, with a recorded model.

The recorded model turns (a cassette under ``examples/incident/cassettes/``, installed as
``plugin.resources.incident``) are replayed by the shipped scripted model server
(``plugin.doubles``); everything else is the real product: the harness, the gate, the
interceptor, the three real tools on the bundled runbooks and logs, and the local MySQL when it
is reachable (``scripts/setup_mysql.py`` creates it; ``DIAG_MYSQL_DSN`` overrides where).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from plugin.cli import EXIT_FAILED, exit_code, load_settings
from plugin.doubles.scripted_model import ModelStep, ScriptedModelServer, load_cassette
from plugin.render_text import render_text
from plugin.request import DiagnosisRequest
from plugin.resources import BUNDLED_CASSETTES, BUNDLED_KNOWLEDGE, BUNDLED_LOGS
from plugin.wiring import build_harness
from tools.base import AdapterCall, Ready
from tools.mysql import MysqlAdapter
from tools.schemas import MysqlInput

__all__ = ["DEMO_DSN", "run_demo"]

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


def _read_cassette(path: Path) -> tuple[str, list[ModelStep]]:
    query = json.loads(path.read_text(encoding="utf-8"))["query"]
    return str(query), load_cassette(path)


async def run_demo(*, show_json: bool = True) -> int:
    configured = load_settings().mysql_dsn
    dsn = configured.get_secret_value() if configured is not None else DEMO_DSN
    with_db = await _reachable(dsn)
    cassette: Path = CASSETTES / ("with-mysql.json" if with_db else "without-mysql.json")
    query, steps = _read_cassette(cassette)
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
            result = await harness.diagnose(DiagnosisRequest(query), session_id="demo")
        finally:
            await harness.aclose()
    out = sys.stdout
    out.write(f"Query: {query}\n")
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
