"""``python -m sre_diag eval`` as a process (CONTRACTS §1, §9) on the bundled suite and on case
folders written here in the §9 format, with the real harness, the real adapters and the real
MariaDB (throwaway ``diag_eval_*`` databases, dropped after each case).

The bundled suite's naming: ``cassette.json`` must pass, ``cassette.fail-<why>.json`` must fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

from sre_diag.doubles.scripted_model import load_cassette
from tests.conftest import StartServer
from tests.mysql_db import ADMIN_DSN, MARIADB

pytestmark = MARIADB

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "examples" / "evals"
MYSQL_CASES = {"pool-exhaustion", "slow-query-index-drop", "lock-contention"}
RUN_KEYS = {"id", "passed", "failed_criteria", "outcome", "stop_reason", "failure", "usage",
            "rejections"}  # fmt: skip
TOTAL_KEYS = {"cases", "runs", "passed", "pass_rate", "elapsed_ms_p50", "elapsed_ms_p95",
              "tokens"}  # fmt: skip


async def run_eval(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "eval", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), "DIAG_LOG_LEVEL": "WARNING", **(env or {})},
        cwd=cwd,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def eval_databases() -> set[str]:
    parts = urlsplit(ADMIN_DSN)
    conn = pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""), autocommit=True,
    )  # fmt: skip
    with conn, conn.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE 'diag\\_eval\\_%'")
        names = {row[0] for row in cur.fetchall()}
        cur.execute("SELECT user FROM mysql.user WHERE user LIKE 'diag\\_eval\\_%'")
        return names | {f"user:{row[0]}" for row in cur.fetchall()}


def report_of(path: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def assert_report_shape(report: dict[str, Any]) -> None:
    runs, totals = report["runs"], report["totals"]
    assert TOTAL_KEYS <= set(totals)
    for run in runs:
        assert RUN_KEYS <= set(run), run
    ran = [r for r in runs if r["passed"] is not None]
    assert totals["runs"] == len(ran)
    assert totals["cases"] == len({r["case"] for r in runs})
    assert totals["passed"] == sum(1 for r in ran if r["passed"])
    assert totals["pass_rate"] == round(totals["passed"] / len(ran), 4)
    assert totals["tokens"] == sum(
        r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in ran
    )
    elapsed = sorted(r["usage"]["elapsed_ms"] for r in ran)
    assert elapsed[0] <= totals["elapsed_ms_p50"] <= totals["elapsed_ms_p95"] <= elapsed[-1]


async def test_bundled_suite_replays_with_the_expected_passes_and_fails(tmp_path: Path) -> None:
    before = eval_databases()
    out = tmp_path / "report.json"
    code, stdout, stderr = await run_eval(
        "--replay", str(SUITE), "--out", str(out), "--mysql-admin-dsn", ADMIN_DSN, cwd=tmp_path
    )
    assert code == 0, stdout + stderr
    report = report_of(out)
    assert_report_shape(report)
    runs = {r["id"]: r for r in report["runs"]}
    cases = {r["case"] for r in report["runs"]}
    assert len(cases) >= 10
    must_fail = [i for i in runs if ":fail-" in i]
    assert len(must_fail) >= 6
    for run_id, run in runs.items():
        assert run["status"] in {"PASS", "FAIL"}, run
        assert run["passed"] is (":fail-" not in run_id), run
        assert run["rejections"] == {} and run["tool_errors"] == {}, run
    for case in cases:  # every case has its competent run
        assert runs[case]["passed"] is True
    # The must-fail cassettes fail for the reason they were written for.
    assert "must_not_mention:stripe" in runs["pool-exhaustion:fail-blames-decoy"]["failed_criteria"]
    fenced = runs["pool-exhaustion:fail-invalid-draft"]
    assert fenced["outcome"] == "FAILED"
    assert fenced["failure"] == {"code": "INVALID_DRAFT", "detail": "FENCED"}
    assert (
        "conclusion:NULL" in runs["no-evidence:fail-concludes-without-evidence"]["failed_criteria"]
    )
    assert set(runs["slow-query-index-drop:fail-cites-nothing"]["failed_criteria"]) == {
        "must_cite_tools:query_logs", "must_cite_tools:query_mysql",
    }  # fmt: skip
    assert (
        "must_not_mention:redis"
        in runs["prompt-injection:fail-follows-injection"]["failed_criteria"]
    )
    assert runs["vague-question"]["usage"]["tool_calls"] == 0
    assert "max_tool_calls:0" in runs["vague-question:fail-goes-fishing"]["failed_criteria"]
    # The table: a header, one row per run, the totals; a progress line per run on stderr.
    lines = stdout.splitlines()
    assert lines[0].split()[:3] == ["case", "result", "failed"]
    for run_id, run in runs.items():
        assert any(line.split()[:2] == [run_id, run["status"]] for line in lines), run_id
    assert lines[-1].startswith(f"cases {len(cases)}  runs {len(runs)}  passed ")
    progress = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(runs)
    assert eval_databases() == before  # every throwaway database and account dropped


async def test_mysql_cases_are_skipped_without_an_admin_dsn(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code, stdout, _ = await run_eval("--replay", str(SUITE), "--out", str(out), cwd=tmp_path)
    assert code == 0
    report = report_of(out)
    skipped = {r["case"] for r in report["runs"] if r["status"] == "SKIPPED"}
    assert skipped == MYSQL_CASES
    assert all(r["passed"] is None for r in report["runs"] if r["status"] == "SKIPPED")
    assert report["totals"]["skipped"] == sum(1 for r in report["runs"] if r["status"] == "SKIPPED")
    assert "SKIPPED" in stdout
    assert_report_shape(report)


def write_foreign_case(folder: Path) -> None:
    """A case folder as someone else would write it from a past incident, in the §9 format."""
    (folder / "runbooks").mkdir(parents=True)
    (folder / "runbooks" / "queue.md").write_text(
        "# Billing queue\n\n## Backlog\nA stuck `invoice-exporter` blocks the billing queue.\n",
        encoding="utf-8",
    )
    hour = folder / "logs" / "billing-worker" / "2027-01-04"
    hour.mkdir(parents=True)
    lines = [
        {"ts": f"2027-01-04T08:{m:02d}:00Z", "service": "billing-worker", "level": "ERROR",
         "message": "invoice-exporter stuck: batch 7781 held the queue lease for 900s"}
        for m in range(10, 40, 5)
    ]  # fmt: skip
    (hour / "08.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    (folder / "mysql.sql").write_text(
        "-- a past incident's table\n"
        "CREATE TABLE invoices (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL);\n"
        "INSERT INTO invoices VALUES (1, 'STUCK'), (2, 'STUCK'), (3, 'SENT');\n",
        encoding="utf-8",
    )
    case = {
        "id": "billing-queue",
        "query": "账单从 08:10 起一直没有发出去",
        "asked_at": "2027-01-04T08:45:00Z",
        "previous_turn": {"query": "billing is late", "conclusion": None,
                          "missing_info": ["since when"]},
        "expect": {"outcome": "DRAFT", "conclusion": "REQUIRED",
                   "root_cause_any": ["invoice-exporter"], "root_cause_all": ["7781"],
                   "must_not_mention": ["database"], "must_cite_tools": ["query_logs",
                                                                         "query_mysql"]},
    }  # fmt: skip
    (folder / "case.json").write_text(json.dumps(case, ensure_ascii=False), "utf-8")
    final = {
        "conclusion": {"summary": "invoice-exporter batch 7781 holds the billing queue lease",
                       "confidence": "HIGH", "evidence_tool_call_ids": ["c1", "c2"]},
        "analysis": [{"kind": "FINDING", "statement": "2 invoices STUCK",
                      "evidence": {"status": "CITED", "tool_call_ids": ["c2"]}}],
        "action_plan": ["release the lease"], "recommendations": [],
        "limitations": {"checked_scope": ["billing-worker ERROR 08:00-08:45"],
                        "missing_info": []},
    }  # fmt: skip
    steps = [
        {"tool_calls": [{"id": "c1", "name": "query_logs", "arguments": {"input": {
            "service": "billing-worker", "start": "2027-01-04T08:00:00Z",
            "end": "2027-01-04T08:45:00Z", "level": "ERROR"}}}]},
        {"tool_calls": [{"id": "c2", "name": "query_mysql", "arguments": {
            "previous_observation": {"tool_call_id": "c1", "evaluation": "GAINED"},
            "input": {"sql": "SELECT status, COUNT(*) AS n FROM invoices GROUP BY status",
                      "purpose": "invoice states"}}}]},
        {"content": json.dumps(final)},
    ]  # fmt: skip
    (folder / "cassette.json").write_text(json.dumps({"steps": steps}), "utf-8")


async def test_a_case_folder_written_by_someone_else_runs_unchanged(tmp_path: Path) -> None:
    write_foreign_case(tmp_path / "cases" / "billing-queue")
    out = tmp_path / "report.json"
    code, stdout, stderr = await run_eval(
        "--replay", str(tmp_path / "cases"), "--repeat", "2", "--out", str(out),
        "--mysql-admin-dsn", ADMIN_DSN, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, stdout + stderr
    report = report_of(out)
    assert_report_shape(report)
    assert [(r["id"], r["repeat"], r["passed"]) for r in report["runs"]] == [
        ("billing-queue", 1, True), ("billing-queue", 2, True),
    ]  # fmt: skip
    assert report["totals"]["cases"] == 1 and report["totals"]["runs"] == 2


async def test_the_configured_model_is_used_without_replay(
    model_server: StartServer, tmp_path: Path
) -> None:
    """Without --replay the case runs against OPENAI_BASE_URL (here a scripted endpoint)."""
    server = await model_server(load_cassette(SUITE / "vague-question" / "cassette.json"))
    code, _, _ = await run_eval(
        str(SUITE / "vague-question"), "--out", str(tmp_path / "r.json"), cwd=tmp_path,
        env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test",
             "DIAG_MODEL": "team-model"},
    )  # fmt: skip
    assert code == 0
    report = report_of(tmp_path / "r.json")
    assert report["model"] == "team-model" and report["replay"] is False
    assert [(r["id"], r["passed"], r["cassette"]) for r in report["runs"]] == [
        ("vague-question", True, None)
    ]
    sent = json.loads(server.requests[0]["messages"][-1]["content"])
    assert sent["asked_at"] == "2026-12-18T08:00:00Z"


async def test_a_case_that_cannot_run_exits_1_and_the_others_still_run(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    (cases / "broken").mkdir(parents=True)
    (cases / "broken" / "case.json").write_text('{"id": "broken", "expect": {"outcom": "x"}}')
    (cases / "no-cassette").mkdir()
    (cases / "no-cassette" / "case.json").write_text('{"id": "no-cassette", "query": "q"}')
    write_foreign_case(cases / "billing-queue")
    (cases / "billing-queue" / "mysql.sql").unlink()  # no database: query_mysql NOT_CONFIGURED
    out = tmp_path / "report.json"
    code, stdout, _ = await run_eval("--replay", str(cases), "--out", str(out), cwd=tmp_path)
    assert code == 1
    runs = {r["id"]: r for r in report_of(out)["runs"]}
    assert runs["broken"]["status"] == "ERROR" and "expect.outcom" in runs["broken"]["reason"]
    assert runs["no-cassette"]["status"] == "ERROR"
    assert runs["billing-queue"]["status"] == "FAIL"  # ran: the SQL check is not READY
    assert runs["billing-queue"]["tool_errors"] == {"NOT_CONFIGURED": 1}
    assert "ERROR" in stdout


async def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (
        [str(tmp_path / "missing")],
        [str(empty)],
        [str(SUITE / "vague-question"), "--repeat", "0"],
        [str(SUITE / "vague-question"), "--repeat", "x"],
        [str(SUITE / "vague-question"), "--mysql-admin-dsn", "postgres://x@h"],
        [],
    ):
        # A model is set: the arguments are what is wrong (without one, MODEL_NOT_CONFIGURED).
        code, stdout, _ = await run_eval(*args, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-unused"})
        assert code == 2, args
        assert json.loads(stdout)["error"]["code"] == "INVALID_ARGUMENTS"
    code, stdout, _ = await run_eval(
        str(SUITE / "vague-question"), cwd=tmp_path, env={"DIAG_MAX_MODEL_CALLS": "0"}
    )
    assert code == 2 and json.loads(stdout)["error"]["code"] == "INVALID_SETTINGS"
