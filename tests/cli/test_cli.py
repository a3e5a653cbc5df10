"""``python -m sre_diag diagnose`` and ``demo`` as processes: stdout JSON, exit codes, real tools.

The model is the scripted OpenAI-compatible server; the evidence comes from the three real
adapters: the bundled runbooks, the bundled JSON-lines logs and the real MariaDB test database
(set explicitly: unset, the runbook and log tools answer ``NOT_CONFIGURED``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from sre_diag.resources import BUNDLED_KNOWLEDGE, BUNDLED_LOGS
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, tool_step
from tests.mysql_db import MARIADB

pytestmark = MARIADB

REPO = Path(__file__).resolve().parents[2]
W = {"start": "2026-11-28T10:00:00Z", "end": "2026-11-28T10:30:00Z"}


async def run_cli(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sre_diag",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def base_env(server_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server_url,
        "OPENAI_API_KEY": "sk-test-CANARY-openai-key-91c2",
        "DIAG_MODEL": "scripted-proxy-model",
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
        **extra,
    }


def single_json(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, stdout
    parsed: dict[str, Any] = json.loads(lines[0])
    return parsed


async def test_diagnose_end_to_end_with_all_three_real_tools(
    model_server: StartServer, tmp_path: Path, mysql_ro_dsn: str
) -> None:
    sql = {
        "sql": "SELECT service, version, deployed_at FROM deployments ORDER BY deployed_at",
        "purpose": "recent deployments",
    }
    draft = {
        "conclusion": {
            "summary": "payment-api v2.14.0 reduced its DB pool; requests time out waiting for it",
            "confidence": "HIGH",
            "evidence_tool_call_ids": ["call-1", "call-3"],
        },
        "analysis": [
            {
                "kind": "FINDING",
                "statement": "db pool exhausted errors since 10:05",
                "evidence": {"status": "CITED", "tool_call_ids": ["call-1"]},
            },
            {
                "kind": "FINDING",
                "statement": "runbook: pool exhaustion",
                "evidence": {"status": "CITED", "tool_call_ids": ["call-2"]},
            },
            {
                "kind": "FINDING",
                "statement": "v2.14.0 deployed at 10:02",
                "evidence": {"status": "CITED", "tool_call_ids": ["call-3"]},
            },
        ],
        "action_plan": ["roll back payment-api"],
        "recommendations": [],
        "limitations": {"checked_scope": ["logs", "runbooks", "deployments"], "missing_info": []},
    }
    server = await model_server(
        [
            tool_step(
                call("call-1", "query_logs", {"service": "payment-api", **W, "level": "ERROR"})
            ),
            tool_step(
                call(
                    "call-2",
                    "lookup_knowledge",
                    {"query": "db pool exhausted 连接池"},
                    previous=("call-1", "GAINED"),
                )
            ),
            tool_step(call("call-3", "query_mysql", sql, previous=("call-2", "GAINED"))),
            final_step(json.dumps(draft)),
        ]
    )
    env = base_env(
        server.base_url,
        tmp_path,
        DIAG_MYSQL_DSN=mysql_ro_dsn,
        DIAG_KNOWLEDGE_DIR=str(BUNDLED_KNOWLEDGE),
        DIAG_LOGS_SOURCE=str(BUNDLED_LOGS),
    )
    code, out, err = await run_cli(
        "diagnose", "payment-api 5xx since 10:05 UTC", env=env, cwd=tmp_path
    )
    result = single_json(out)
    assert code == 0, err
    assert result["outcome"] == "DRAFT"
    checks = {c["tool_call_id"]: c for c in result["progress"]["checks"]}
    assert all(c["status"] == "READY" and c["item_count"] > 0 for c in checks.values())
    observations = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in server.requests[3]["messages"]
        if m["role"] == "tool"
    }
    assert any("db pool exhausted" in i["message"] for i in observations["call-1"]["items"])
    assert observations["call-2"]["items"][0]["path"].endswith(".md")
    versions = {i["cells"]["version"] for i in observations["call-3"]["items"]}
    assert "v2.14.0" in versions
    password = mysql_ro_dsn.split(":")[2].split("@")[0]
    everything = out + err + json.dumps(server.requests)
    assert password not in everything and "CANARY-openai-key" not in out + err


async def test_unset_knowledge_dir_and_logs_source_answer_not_configured(
    model_server: StartServer, tmp_path: Path
) -> None:
    """CONTRACTS §2: unset means NOT_CONFIGURED, never the bundled demo incident."""
    server = await model_server(
        [
            tool_step(call("call-1", "query_logs", {"service": "payment-api", **W})),
            tool_step(
                call(
                    "call-2",
                    "lookup_knowledge",
                    {"query": "db pool exhausted"},
                )  # an ERROR observation is never evaluated
            ),
            final_step(draft_json(conclusion=False)),
        ]
    )
    env = base_env(server.base_url, tmp_path)  # neither DIAG_KNOWLEDGE_DIR nor DIAG_LOGS_SOURCE
    code, out, err = await run_cli("diagnose", "payment-api 5xx", env=env, cwd=tmp_path)
    assert code == 0, err
    assert single_json(out)["outcome"] == "DRAFT"
    observations = [
        json.loads(m["content"]) for m in server.requests[2]["messages"] if m["role"] == "tool"
    ]
    assert [(o["tool"], o["evidence_status"], o.get("error_code")) for o in observations] == [
        ("query_logs", "ERROR", "NOT_CONFIGURED"),
        ("lookup_knowledge", "ERROR", "NOT_CONFIGURED"),
    ]


NO_EVIDENCE = "no evidence source is set (DIAG_KNOWLEDGE_DIR, DIAG_LOGS_SOURCE, DIAG_MYSQL_DSN)"
UNSET = {"DIAG_KNOWLEDGE_DIR": "", "DIAG_LOGS_SOURCE": "", "DIAG_MYSQL_DSN": ""}  # "" is unset


async def test_diagnose_with_no_evidence_source_warns_on_stderr(
    model_server: StartServer, tmp_path: Path
) -> None:
    """Issue 22: the model is still asked (the answer says what could not be checked), and
    stderr says why it will be empty; stdout is still the one Execution Result."""
    server = await model_server([final_step(draft_json(conclusion=False))] * 2)
    env = base_env(server.base_url, tmp_path, **UNSET)
    code, out, err = await run_cli("diagnose", "payment-api 5xx", env=env, cwd=tmp_path)
    assert code == 0, err
    assert single_json(out)["outcome"] == "DRAFT"
    warned = [line for line in err.splitlines() if NO_EVIDENCE in line]
    assert len(warned) == 1 and "WARNING" in warned[0], err
    assert NO_EVIDENCE not in out

    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    env = base_env(server.base_url, tmp_path, **{**UNSET, "DIAG_KNOWLEDGE_DIR": str(runbooks)})
    code, out, err = await run_cli("diagnose", "payment-api 5xx", env=env, cwd=tmp_path)
    assert code == 0, err
    assert NO_EVIDENCE not in err + out


async def test_diagnose_input_rejected_exits_2_without_model_call(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([])
    env = base_env(server.base_url, tmp_path, DIAG_MAX_QUERY_BYTES="10")
    code, out, _ = await run_cli("diagnose", "this query is too long", env=env, cwd=tmp_path)
    assert code == 2
    assert single_json(out)["error"]["code"] == "QUERY_TOO_LARGE"
    bad_turn = tmp_path / "turn.json"
    bad_turn.write_text('{"query": "q"}', encoding="utf-8")
    code, out, _ = await run_cli(
        "diagnose", "q", "--previous-turn", str(bad_turn), env=env, cwd=tmp_path
    )
    assert code == 2
    assert single_json(out)["error"]["code"] == "INVALID_PREVIOUS_TURN"
    assert server.request_count == 0


async def test_diagnose_failed_closed_exits_1_with_a_safe_failure(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([final_step("Sure! Here is my analysis: the DB is down.")])
    code, out, err = await run_cli(
        "diagnose", "payment-api 5xx", env=base_env(server.base_url, tmp_path), cwd=tmp_path
    )
    result = single_json(out)
    assert code == 1
    assert result["failure"] == {"code": "INVALID_DRAFT", "detail": "PREFIXED"}
    assert "Traceback" not in out + err


async def test_diagnose_model_server_error_is_model_error(
    model_server: StartServer, tmp_path: Path
) -> None:
    from sre_diag.doubles.scripted_model import ModelStep

    server = await model_server([ModelStep(status=500)])
    code, out, _ = await run_cli(
        "diagnose", "payment-api 5xx", env=base_env(server.base_url, tmp_path), cwd=tmp_path
    )
    assert code == 1
    assert single_json(out)["failure"] == {"code": "MODEL_ERROR", "detail": "HTTP_500"}
    assert server.request_count == 1  # no retry


async def test_demo_runs_offline(tmp_path: Path) -> None:
    env = {"DIAG_CACHE_DIR": str(tmp_path / "cache"), "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'a'}"}
    code, out, err = await run_cli("demo", env=env, cwd=tmp_path)
    assert code == 0, err
    assert "DRAFT" in out and "Checks:" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["outcome"] == "DRAFT"
    assert result["usage"]["model_calls"] >= 5


async def test_diagnose_tells_the_model_when_the_question_was_asked(
    model_server: StartServer, tmp_path: Path
) -> None:
    """``--asked-at`` (any zone) reaches the model as UTC and lands in the audit record."""
    server = await model_server([final_step(draft_json(conclusion=False))])
    env = base_env(server.base_url, tmp_path)
    code, out, err = await run_cli(
        "diagnose", "5xx since 10:05", "--asked-at", "2026-11-28T18:20:00+08:00",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert single_json(out)["outcome"] == "DRAFT"
    user = next(m for m in server.requests[0]["messages"] if m["role"] == "user")
    assert json.loads(user["content"])["asked_at"] == "2026-11-28T10:20:00Z"
    records = [
        json.loads(line)
        for path in (tmp_path / "audit").glob("*.jsonl")
        for line in path.read_text("utf-8").splitlines()
    ]
    assert [r["asked_at"] for r in records] == ["2026-11-28T10:20:00Z"]
    for bad in ("2026-11-28T10:20:00", "yesterday", "0001-01-01T00:10+01:00"):
        code, _, _ = await run_cli("diagnose", "q", "--asked-at", bad, env=env, cwd=tmp_path)
        assert code == 2, bad
    assert server.request_count == 1
