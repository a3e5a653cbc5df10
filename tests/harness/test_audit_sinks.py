"""Audit sinks: JSON lines and MySQL both get one bounded, valid record per run, failures
included, whatever the ids look like; a dropped table is recreated; a broken sink never changes
the run's outcome, and its lost records are counted and logged with a reason."""

from __future__ import annotations

import concurrent.futures
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sre_diag.audit import (
    MAX_RECORD_BYTES,
    AuditSink,
    JsonlAuditSink,
    MysqlAuditSink,
    build_audit_sink,
    encode_record,
)
from sre_diag.audit.jsonl import append_line
from sre_diag.audit.record import feedback_record
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.errors import ConfigError
from sre_diag.harness.run import Harness
from tests.audit_support import audit_database, audit_file_names, audit_rows, drop_audit_table
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    adapters,
    call,
    draft_json,
    final_step,
    on_sink,
    settings_for,
    tool_step,
)
from tests.mysql_db import MARIADB, run_name

pytestmark = MARIADB

DATABASE = run_name("diag_test_audit_sinks")
QUERY = DiagnosisRequest("payment-api 5xx")


def _jsonl_records(directory: Path) -> list[dict[str, Any]]:
    lines = [
        line for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()
    ]
    return [json.loads(line) for line in lines]


async def _run_all(harness: Harness, *runs: tuple[DiagnosisRequest, str | None]) -> list[Any]:
    try:
        return [await harness.diagnose(q, session_id=s) for q, s in runs]
    finally:
        await harness.aclose()  # drains the audit writer


async def test_mysql_sink_records_every_run(model_server: StartServer, tmp_path: Path) -> None:
    dsn = audit_database(DATABASE)  # no table yet: the first insert creates it
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            final_step(draft_json(["c1"])),
            final_step("not a draft"),
        ]
    )
    sink = build_audit_sink(dsn)
    assert isinstance(sink, MysqlAuditSink)
    harness = on_sink(settings_for(server, tmp_path), adapters(), sink)
    ok, failed = await _run_all(harness, (QUERY, None), (QUERY, None))
    assert (ok.outcome, failed.outcome) == (Outcome.DRAFT, Outcome.FAILED)
    rows = audit_rows(DATABASE)
    assert [(r["run_id"], r["outcome"]) for r in rows] == [
        (ok.run_id, "DRAFT"),
        (failed.run_id, "FAILED"),
    ]
    assert rows[0]["record"]["invocations"][0]["tool_call_id"] == "c1"
    assert harness.audit_records_lost == 0


async def test_a_dropped_table_is_recreated(
    model_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = audit_database(DATABASE, with_table=True)
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft, draft, draft])
    settings = settings_for(server, tmp_path)
    harness = on_sink(settings, adapters(), build_audit_sink(dsn))
    try:
        first = await harness.diagnose(QUERY)
        assert await harness.drain_audit()
        drop_audit_table(DATABASE)  # an operator's cleanup, a restore, a migration gone wrong
        second = await harness.diagnose(QUERY)
        third = await harness.diagnose(QUERY)
    finally:
        await harness.aclose()
    assert [r["run_id"] for r in audit_rows(DATABASE)] == [second.run_id, third.run_id]
    assert first.run_id != second.run_id
    assert harness.audit_records_lost == 0
    assert "diag_audit was missing" in caplog.text


def _mysql_sink(tmp_path: Path) -> AuditSink:
    return build_audit_sink(audit_database(DATABASE))


def _jsonl_sink(tmp_path: Path) -> AuditSink:
    return JsonlAuditSink(tmp_path / "audit")


def _records(kind: str, tmp_path: Path) -> list[dict[str, Any]]:
    if kind == "mysql":
        rows = audit_rows(DATABASE)
        for row in rows:  # the columns hold what the record holds, within their sizes
            assert row["run_id"] == row["record"]["run_id"] and len(row["run_id"]) <= 64
            assert row["session_id"] == row["record"]["session_id"]
            assert len(row["session_id"]) <= 255
        return [row["record"] for row in rows]
    return _jsonl_records(tmp_path / "audit")


HOSTILE_SESSIONS = [
    "s" * 300,  # longer than the column
    "s" * 255 + "-another-thread",  # same 255-char prefix: must stay a distinct session
    "thread-\udcff\udcfe-from-non-utf8-argv",  # what argv decoding makes of invalid UTF-8
    "🔥" * 300,  # four-byte characters beyond the column
    "x" * 100_000,
]
# An id within the harness's bound (<= 128 chars) that is not valid Unicode (a JSON-escaped lone
# surrogate: the run then fails closed, MODEL_ERROR, after one round), one at the bound, and ids
# far over it (answered REJECTED INVALID_ENVELOPE without a canonical invocation).
LONE_ID = "call-\ud800-lone"
MODEL_IDS = [LONE_ID, "c" * 128, "d" * 10_000, "e" * 1_000_000]


@pytest.mark.parametrize("kind", ["jsonl", "mysql"])
async def test_hostile_session_and_tool_call_ids_keep_their_records_bounded(
    model_server: StartServer, tmp_path: Path, kind: str
) -> None:
    steps = [final_step(draft_json(conclusion=False)) for _ in HOSTILE_SESSIONS]
    for tool_call_id in MODEL_IDS:
        steps.append(tool_step(call(tool_call_id, "query_logs", LOGS_INPUT)))
        if tool_call_id != LONE_ID:
            steps.append(final_step(draft_json(conclusion=False)))
    server = await model_server(steps)
    sink = _mysql_sink(tmp_path) if kind == "mysql" else _jsonl_sink(tmp_path)
    harness = on_sink(settings_for(server, tmp_path), adapters(), sink)
    runs = [(QUERY, s) for s in HOSTILE_SESSIONS] + [(QUERY, None) for _ in MODEL_IDS]
    results = await _run_all(harness, *runs)
    assert harness.audit_records_lost == 0
    records = _records(kind, tmp_path)
    assert [r["run_id"] for r in records] == [r.run_id for r in results]
    sessions = [r["session_id"] for r in records[: len(HOSTILE_SESSIONS)]]
    assert len(set(sessions)) == len(HOSTILE_SESSIONS)  # cut ids stay distinct
    assert all(len(s) <= 255 for s in sessions)
    for record in records:
        assert len(json.dumps(record, ensure_ascii=False).encode("utf-8")) <= MAX_RECORD_BYTES
        for invocation in record["invocations"]:
            assert len(invocation["tool_call_id"]) <= 128
    lone = records[len(HOSTILE_SESSIONS)]["invocations"]
    assert len(lone) == 1 and lone[0]["tool_call_id"].startswith("call-\\ud800-lone")


def test_an_oversized_record_is_cut_to_the_bound_and_stays_valid_json() -> None:
    invocation = {"tool_call_id": "c1", "business_input": {"sql": "x" * 900}, "scope": "s" * 300}
    record: dict[str, Any] = {
        "kind": "diagnosis",
        "run_id": "run-1",
        "session_id": "s",
        "outcome": "DRAFT",
        "rounds": [{"index": n} for n in range(2000)],
        "invocations": [dict(invocation, tool_call_id=f"c{n}") for n in range(500)],
        "cited_tool_call_ids": [],
    }
    text = encode_record(record)
    assert len(text.encode("utf-8")) <= MAX_RECORD_BYTES
    cut = json.loads(text)
    assert (cut["run_id"], cut["outcome"]) == ("run-1", "DRAFT")
    assert cut["business_inputs_omitted"] is True
    assert cut["invocations_omitted"] + len(cut["invocations"]) == 500
    assert cut["rounds_omitted"] + len(cut["rounds"]) == 2000
    small = {**record, "rounds": [], "invocations": [invocation]}
    assert json.loads(encode_record(small)) == small  # a record within the bound is untouched


async def test_a_partial_line_left_in_the_file_does_not_corrupt_the_next_record(
    model_server: StartServer, tmp_path: Path
) -> None:
    directory = tmp_path / "audit"
    directory.mkdir()
    for path in audit_file_names(directory):
        path.write_bytes(b'{"run_id": "run-crashed", "outc')  # a crash mid-line, long ago
    server = await model_server([final_step(draft_json(conclusion=False))])
    harness = on_sink(settings_for(server, tmp_path), adapters(), _jsonl_sink(tmp_path))
    (result,) = await _run_all(harness, (QUERY, None))
    today = audit_file_names(directory)[0].read_text().splitlines()
    assert today[0] == '{"run_id": "run-crashed", "outc'
    assert json.loads(today[1])["run_id"] == result.run_id
    assert len(today) == 2


async def test_a_tilde_in_the_folder_is_the_home_directory(
    model_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the process environment, not the code
    server = await model_server([final_step(draft_json(conclusion=False))])
    sink = build_audit_sink("jsonl:~/diag-audit")
    harness = on_sink(settings_for(server, tmp_path), adapters(), sink)
    (result,) = await _run_all(harness, (QUERY, None))
    assert isinstance(sink, JsonlAuditSink) and sink.directory == tmp_path / "home" / "diag-audit"
    records = _jsonl_records(tmp_path / "home" / "diag-audit")
    assert [r["run_id"] for r in records] == [result.run_id]


async def test_a_broken_sink_does_not_change_the_outcome_and_the_loss_is_counted(
    model_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await model_server([final_step(draft_json(conclusion=False))])
    sink = MysqlAuditSink("mysql://audit:pw-CANARY-77@127.0.0.1:1/none", timeout_seconds=1)
    harness = on_sink(settings_for(server, tmp_path), adapters(), sink)
    (result,) = await _run_all(harness, (QUERY, None))
    assert result.outcome is Outcome.DRAFT
    assert harness.audit_records_lost == 1
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert len(lost) == 1 and result.run_id in lost[0]
    assert "MySQL error 2003: cannot reach the server" in lost[0]
    assert "127.0.0.1:1/none" in lost[0]
    assert "CANARY" not in caplog.text


@pytest.mark.parametrize("spec", ["", "jsonl:", "s3://bucket", "mysql://nohost"])
def test_bad_sink_settings_are_operator_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        build_audit_sink(spec)


def test_concurrent_writers_to_one_file_keep_every_line_whole(tmp_path: Path) -> None:
    """Several harnesses (or processes) appending to one day file: no empty or merged line.

    Closing someone's partial line must not misread another writer's append in flight.
    """
    path = tmp_path / "audit-shared.jsonl"

    def writer(n: int) -> None:
        for i in range(200):
            record = {"writer": n, "i": i, "pad": "x" * (i * 37 % 9000)}
            append_line(path, (json.dumps(record) + "\n").encode())

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(writer, range(16)))
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(line) for line in lines[:-1]]
    assert len(records) == 16 * 200


async def test_feedback_records_sit_beside_their_run_in_the_mysql_sink(
    model_server: StartServer, tmp_path: Path
) -> None:
    """A run's record and any number of votes on it are separate rows (kind column)."""
    dsn = audit_database(DATABASE)
    server = await model_server([final_step(draft_json(conclusion=False))])
    harness = on_sink(settings_for(server, tmp_path), adapters(), build_audit_sink(dsn))
    try:
        result = await harness.diagnose(QUERY)
        for vote, reason in (("up", None), ("down", None), ("down", "cited the wrong deploy")):
            harness.audit.submit(feedback_record(result.run_id, "U0VOTER1", vote, reason=reason))
        assert await harness.drain_audit()
    finally:
        await harness.aclose()
    rows = audit_rows(DATABASE)
    assert [r["run_id"] for r in rows] == [result.run_id] * 4
    assert [r["record"]["kind"] for r in rows] == ["diagnosis", "feedback", "feedback", "feedback"]
    assert harness.audit_records_lost == 0
