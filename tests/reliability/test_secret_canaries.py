"""Secret canaries through ``python -m sre_diag diagnose`` as a process, with the real adapters.

Unique canaries shaped like real secrets are planted in log lines (a bearer token, a
``password=`` pair), in a runbook (an AKIA key id, a JWT, ``password:``), in a secret-named
database column, in the DSN password and in OPENAI_API_KEY, and in the text of exceptions raised
inside adapters. None may appear in any request body the model server received, in the
``diagnose`` stdout or in the audit records (nor in stderr, the process log).

Redaction masks by pattern and by column name, so a canary that looks like ordinary text in an
ordinary column is NOT masked: evidence is evidence and reaches the model as data. That is
asserted too, so the boundary is documented rather than assumed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import run_cli, single_json
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, tool_step
from tests.mysql_db import MARIADB
from tests.reliability.evidence import (
    CANARY_DSN_PASSWORD,
    CANARY_OPENAI_KEY,
    CANARY_PLAIN,
    CANARY_SECRET_COLUMN,
    MASKED_CANARIES,
    TABLE,
    ReliabilityDb,
    write_logs,
    write_runbooks,
)
from tests.reliability.support import LOGS_WINDOW, audit_records
from tests.reliability.test_faults import closed_port

pytestmark = MARIADB

CANARY_EXCEPTION = "CANARY-exc-9d1f-secret"


def _env(server_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server_url,
        "OPENAI_API_KEY": CANARY_OPENAI_KEY,
        "DIAG_MODEL": "scripted-proxy-model",
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
        **extra,
    }


def _assert_absent(canaries: tuple[str, ...], **places: str) -> None:
    for where, text in places.items():
        leaked = [line for line in text.splitlines() if any(c in line for c in canaries)]
        assert not leaked, f"canary leaked into {where}: {leaked[:3]}"


async def test_canaries_in_evidence_and_settings_never_leave(
    model_server: StartServer, tmp_path: Path, reliability_db: ReliabilityDb
) -> None:
    write_runbooks(tmp_path / "runbooks")
    write_logs(tmp_path / "logs")
    logs = {"service": "payment-api", **LOGS_WINDOW, "limit": 50}
    kb = {"query": "运维凭据 AWS key session password", "top_k": 5}
    sql = {"sql": f"SELECT id, note, api_token FROM {TABLE} ORDER BY id", "purpose": "notes"}
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", logs)),
            tool_step(call("c2", "lookup_knowledge", kb, previous=("c1", "GAINED"))),
            tool_step(call("c3", "query_mysql", sql, previous=("c2", "GAINED"))),
            final_step(draft_json(["c1", "c2", "c3"])),
        ]
    )
    env = _env(
        server.base_url,
        tmp_path,
        DIAG_MYSQL_DSN=reliability_db.ro_dsn,
        # The account can read the secret column: this exercises the second, masking layer
        # (the first, column grants, is tests/tools/test_mysql_secrecy.py's).
        DIAG_MYSQL_REQUIRE_COLUMN_GRANTS="false",
        DIAG_KNOWLEDGE_DIR=str(tmp_path / "runbooks"),
        DIAG_LOGS_SOURCE=str(tmp_path / "logs"),
    )
    code, out, err = await run_cli("diagnose", "payment-api 5xx since 10:05", env=env, cwd=tmp_path)
    result = single_json(out)
    assert code == 0, err
    assert result["outcome"] == "DRAFT"
    assert [c["status"] for c in result["progress"]["checks"]] == ["READY"] * 3
    bodies = json.dumps(server.requests, ensure_ascii=False)
    audit = json.dumps(audit_records(tmp_path), ensure_ascii=False)
    assert len(audit_records(tmp_path)) == 1
    _assert_absent(MASKED_CANARIES, request_bodies=bodies, stdout=out, audit=audit, stderr=err)
    # The evidence really was there and was masked, not missing.
    observation = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in server.requests[3]["messages"]
        if m["role"] == "tool"
    }
    rows = {i["cells"]["id"]: i["cells"] for i in observation["c3"]["items"]}
    assert {cells["api_token"] for cells in rows.values()} == {"***"}  # secret-named column
    assert "[REDACTED]" in json.dumps(observation["c1"]) + json.dumps(observation["c2"])
    # An ordinary-looking canary in an ordinary column passes through as evidence (by design).
    assert rows[3]["note"] == CANARY_PLAIN and CANARY_PLAIN in bodies
    assert CANARY_PLAIN not in audit and CANARY_PLAIN not in out  # evidence is not copied
    assert CANARY_SECRET_COLUMN not in bodies


async def test_canaries_in_adapter_exceptions_never_leave(
    model_server: StartServer, tmp_path: Path
) -> None:
    """The runbook folder's path and the DSN password appear in the adapters' own exceptions
    (FileNotFoundError(path), the driver's connect error); only stable codes come out."""
    missing = tmp_path / CANARY_EXCEPTION / "runbooks"
    dsn = f"mysql://diag_ro:{CANARY_DSN_PASSWORD}@127.0.0.1:{closed_port()}/diag"
    server = await model_server(
        [
            tool_step(call("c1", "lookup_knowledge", {"query": "db pool exhausted"})),
            tool_step(call("c2", "query_mysql", {"sql": "SELECT 1 FROM orders", "purpose": "p"})),
            final_step(draft_json(conclusion=False)),
        ]
    )
    env = _env(server.base_url, tmp_path, DIAG_MYSQL_DSN=dsn, DIAG_KNOWLEDGE_DIR=str(missing))
    code, out, err = await run_cli("diagnose", "payment-api 5xx since 10:05", env=env, cwd=tmp_path)
    result = single_json(out)
    assert code == 0, err
    assert [(c["status"], c["error_code"]) for c in result["progress"]["checks"]] == [
        ("ERROR", "UNAVAILABLE"),
        ("ERROR", "UNAVAILABLE"),
    ]
    bodies = json.dumps(server.requests, ensure_ascii=False)
    audit = json.dumps(audit_records(tmp_path), ensure_ascii=False)
    canaries = (CANARY_EXCEPTION, CANARY_DSN_PASSWORD, CANARY_OPENAI_KEY)
    _assert_absent(canaries, request_bodies=bodies, stdout=out, audit=audit, stderr=err)
