"""A slow or broken audit sink never delays an answer, other runs' tools, a drain or a close.

Each broken sink is real: a MariaDB table another session holds with ``LOCK TABLES ... WRITE``,
a TCP server that accepts and never greets, an unreachable port, a FIFO (with and without a
reader), a symlink or a directory where the day's JSON-lines file should be. Through the
harness: the answer comes back at once (for the slow sinks, while the record is still being
written), the record is lost within ``DIAG_AUDIT_TIMEOUT_SECONDS``, counted and logged with a
reason, and the next run is answered as fast.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sre_diag.audit import AuditSink, AuditWriter, JsonlAuditSink, MysqlAuditSink
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.harness.run import Harness
from sre_diag.resources import BUNDLED_LOGS
from sre_diag.tools.base import EvidenceAdapter, ToolName
from sre_diag.tools.logs import LogsAdapter, build_log_source
from tests.audit_support import (
    audit_database,
    audit_file_names,
    locked_audit_table,
    make_fifos,
    make_symlinks,
    silent_server,
)
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
from tests.mysql_db import MARIADB_SOLO, run_name
from tests.reliability.support import ConversationModelServer
from tests.reliability.support import settings as reliability_settings

pytestmark = MARIADB_SOLO

TIMEOUT = 3.0  # DIAG_AUDIT_TIMEOUT_SECONDS in these tests
ANSWER_BOUND = 1.5  # a run with one scripted model round, whatever the sink does
DATABASE = run_name("diag_test_audit_bounded")
QUERY = DiagnosisRequest("payment-api 5xx since 10:05")

SinkFactory = Callable[[Path], AbstractAsyncContextManager[AuditSink]]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def _locked(tmp_path: Path) -> AsyncIterator[AuditSink]:
    dsn = audit_database(DATABASE, with_table=True)
    with locked_audit_table(DATABASE):
        yield MysqlAuditSink(dsn, timeout_seconds=TIMEOUT)


@asynccontextmanager
async def _silent(tmp_path: Path) -> AsyncIterator[AuditSink]:
    async with silent_server() as server:
        yield MysqlAuditSink(server.dsn(), timeout_seconds=TIMEOUT)
        assert server.accepted >= 1


@asynccontextmanager
async def _unreachable(tmp_path: Path) -> AsyncIterator[AuditSink]:
    yield MysqlAuditSink(f"mysql://a:b@127.0.0.1:{_closed_port()}/x", timeout_seconds=TIMEOUT)


@asynccontextmanager
async def _fifo(tmp_path: Path) -> AsyncIterator[AuditSink]:
    make_fifos(tmp_path / "audit")
    yield JsonlAuditSink(tmp_path / "audit")


@asynccontextmanager
async def _fifo_with_reader(tmp_path: Path) -> AsyncIterator[AuditSink]:
    readers = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in make_fifos(tmp_path / "audit")]
    try:
        yield JsonlAuditSink(tmp_path / "audit")
        assert all(os.read(fd, 1) == b"" for fd in readers)  # nothing was written into it
    finally:
        for fd in readers:
            os.close(fd)


@asynccontextmanager
async def _symlink(tmp_path: Path) -> AsyncIterator[AuditSink]:
    target = tmp_path / "planted-target.txt"
    target.write_text("untouched\n")
    make_symlinks(tmp_path / "audit", target)
    yield JsonlAuditSink(tmp_path / "audit")
    assert target.read_text() == "untouched\n"


@asynccontextmanager
async def _directory(tmp_path: Path) -> AsyncIterator[AuditSink]:
    for path in audit_file_names(tmp_path / "audit"):
        path.mkdir(parents=True)
    yield JsonlAuditSink(tmp_path / "audit")


@dataclass(frozen=True)
class Broken:
    name: str
    sink: SinkFactory
    reason: str  # in the logged reason
    slow: bool  # fails only after a wait (a lock wait, the timeout): still in flight at the answer


BROKEN = [
    Broken("locked-table", _locked, "MySQL error 1205: lock wait timeout", slow=True),
    Broken(
        "silent-server",
        _silent,
        f"no answer within {TIMEOUT:g} s while connecting to MySQL (TCP connect, server greeting",
        slow=True,
    ),
    Broken("unreachable", _unreachable, "MySQL error 2003: cannot reach the server", slow=False),
    Broken("fifo", _fifo, "is a FIFO, not a regular file", slow=False),
    Broken("fifo-with-reader", _fifo_with_reader, "is a FIFO, not a regular file", slow=False),
    Broken("symlink", _symlink, "is a symbolic link; links are not followed", slow=False),
    Broken("directory", _directory, "is a directory", slow=False),
]


def _lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sre_diag.audit.writer"]


async def _timed(harness: Harness, query: DiagnosisRequest = QUERY) -> tuple[Any, float]:
    started = time.monotonic()
    result = await harness.diagnose(query)
    return result, time.monotonic() - started


@pytest.mark.parametrize("broken", BROKEN, ids=lambda b: b.name)
async def test_a_broken_sink_never_delays_the_answer(
    broken: Broken, model_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft, draft])
    settings = settings_for(server, tmp_path, DIAG_AUDIT_TIMEOUT_SECONDS=TIMEOUT)
    async with broken.sink(tmp_path) as sink:
        harness = on_sink(settings, adapters(), sink)
        try:
            result, answered = await _timed(harness)
            in_flight = harness.audit.pending
            assert result.outcome is Outcome.DRAFT
            assert answered < ANSWER_BOUND, f"{broken.name}: answered after {answered:.2f} s"
            if broken.slow:  # the answer came back while its record was still being written
                assert in_flight == 1 and harness.audit_records_lost == 0
            started = time.monotonic()
            assert await harness.drain_audit()
            assert time.monotonic() - started <= TIMEOUT + 1.0
            assert harness.audit_records_lost == 1
            (lost,) = _lost_lines(caplog)
            assert f"audit record of {result.run_id} lost: " in lost and broken.reason in lost
            second, again = await _timed(harness)  # the process still answers as fast
            assert second.outcome is Outcome.DRAFT and again < ANSWER_BOUND
        finally:
            await harness.aclose()
    assert harness.audit_records_lost == 2
    assert "audit-pw-SILENT" not in caplog.text
    print(f"\n[audit] {broken.name}: answers in {answered * 1000:.0f} / {again * 1000:.0f} ms")


def _script(query: str) -> list[Any]:
    if query == "logs":
        return [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            final_step(draft_json(["c1"])),
        ]
    return [final_step(draft_json(conclusion=False))]


@pytest.mark.parametrize("broken", [BROKEN[0], BROKEN[1], BROKEN[3]], ids=lambda b: b.name)
async def test_other_runs_tools_are_unaffected_by_a_stuck_sink(
    broken: Broken, tmp_path: Path
) -> None:
    """Forty finished runs wait for a stuck sink (more than the default executor has threads);
    a run whose ``query_logs`` needs a thread of that executor still reads the logs at once."""
    server = await ConversationModelServer(_script).start()
    logs = LogsAdapter(build_log_source(str(BUNDLED_LOGS)))
    table: dict[ToolName, EvidenceAdapter[Any]] = {**adapters(), ToolName.QUERY_LOGS: logs}
    settings = reliability_settings(server.base_url, tmp_path, DIAG_AUDIT_TIMEOUT_SECONDS=TIMEOUT)
    try:
        async with broken.sink(tmp_path) as sink:
            harness = on_sink(settings, table, sink)
            try:
                ended = await asyncio.gather(
                    *(harness.diagnose(DiagnosisRequest(f"end {n}")) for n in range(40))
                )
                assert all(r.outcome is Outcome.DRAFT for r in ended)
                result, elapsed = await _timed(harness, DiagnosisRequest("logs"))
            finally:
                await harness.aclose()
    finally:
        await server.stop()
    assert result.outcome is Outcome.DRAFT and result.progress is not None
    (check,) = result.progress.checks
    assert (check.status, check.item_count > 0) == ("READY", True)
    assert elapsed < ANSWER_BOUND + 1.0, f"query_logs run took {elapsed:.2f} s"
    assert harness.audit_records_lost == 41
    print(
        f"\n[audit] {broken.name}: query_logs run beside 40 stuck records {elapsed * 1000:.0f} ms"
    )


async def test_drain_and_close_are_bounded_and_count_what_they_give_up(
    model_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft] * 5)
    settings = settings_for(server, tmp_path, DIAG_AUDIT_TIMEOUT_SECONDS=TIMEOUT)
    async with silent_server() as silent:
        sink = MysqlAuditSink(silent.dsn(), timeout_seconds=TIMEOUT)
        harness = on_sink(settings, adapters(), sink)
        try:
            for _ in range(5):
                await harness.diagnose(QUERY)
            assert harness.audit.pending == 5
            started = time.monotonic()
            assert not await harness.drain_audit(0.5)
            assert 0.5 <= time.monotonic() - started < 1.0
        finally:
            started = time.monotonic()
            await harness.aclose()
            closed = time.monotonic() - started
    assert closed <= TIMEOUT + 2.5, f"close took {closed:.2f} s"
    assert harness.audit_records_lost == 5 and harness.audit.pending == 0
    lines = _lost_lines(caplog)
    assert len(lines) == 5
    assert sum("not written before the audit writer closed" in line for line in lines) >= 3
    print(f"\n[audit] close with 5 records stuck on a silent server: {closed * 1000:.0f} ms")


def _record(n: int) -> dict[str, Any]:
    return {
        "run_id": f"run-{n}",
        "session_id": "s",
        "outcome": "DRAFT",
        "recorded_at": datetime.now(UTC).isoformat(),
    }


async def test_the_queue_is_bounded_and_a_closed_writer_refuses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    async with silent_server() as silent:
        sink = MysqlAuditSink(silent.dsn(), timeout_seconds=TIMEOUT)
        writer = AuditWriter(sink, timeout_seconds=TIMEOUT, capacity=2)
        for n in range(5):
            writer.submit(_record(n))
        assert (writer.pending, writer.records_lost) == (2, 3)
        assert "2 records are already waiting for the sink" in caplog.text
        await writer.aclose(0.2)
        writer.submit(_record(9))
    assert (writer.pending, writer.records_lost) == (0, 6)
    assert "audit record of run-9 lost: the audit writer is closed" in caplog.text


async def test_records_are_written_in_order_after_the_answer(
    model_server: StartServer, tmp_path: Path
) -> None:
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft] * 3)
    settings = settings_for(server, tmp_path, DIAG_AUDIT_TIMEOUT_SECONDS=TIMEOUT)
    harness = on_sink(settings, adapters(), JsonlAuditSink(tmp_path / "a"))
    try:
        results = [await harness.diagnose(QUERY) for _ in range(3)]
        assert await harness.drain_audit()
    finally:
        await harness.aclose()
    lines = audit_file_names(tmp_path / "a")[0].read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == [r.run_id for r in results]
    assert harness.audit_records_lost == 0
