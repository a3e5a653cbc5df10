"""The run's deadline reaches the evidence work it started (issue 20 item 2, FAULTS.md "Deadline
and Cancel at every await"): a real folder source behind the harness, an hour file whose scan
would run for minutes; the deadline cuts the ``query_logs`` call off and the scan ends — in a
thread for a small window, in a child process (killed) for a large one."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.errors import StopReason
from sre_diag.tools.base import ToolName
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, adapters, call, harness, tool_step
from tests.tools.test_logs_stop import _cpu_busy, _endless_hour, _wait_until


@pytest.mark.parametrize("process_bytes", [None, 0], ids=["thread", "child-process"])
async def test_the_run_deadline_stops_the_scan(
    model_server: StartServer, tmp_path: Path, process_bytes: int | None
) -> None:
    """End to end: a real folder source behind the harness; the run's deadline cuts the tool
    call off, and the scan it started stops too (it would otherwise read for minutes)."""
    _endless_hour(tmp_path / "logs")
    source = JsonlLogSource(tmp_path / "logs", process_bytes=process_bytes)
    table: dict[ToolName, Any] = {**adapters(), ToolName.QUERY_LOGS: LogsAdapter(source)}
    server = await model_server([tool_step(call("c1", "query_logs", LOGS_INPUT))])
    built = harness(server, tmp_path, table, DIAG_DEADLINE_SECONDS=6)  # a slow start fits
    started = time.monotonic()
    result = await built.diagnose(DiagnosisRequest("payment-api errors since 10:00?"))
    assert time.monotonic() - started < 6 + 2.0
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    assert server.request_count == 1
    if process_bytes is None:  # the thread spins through NUL bytes until it sees its stop
        await asyncio.to_thread(_wait_until, lambda: not _cpu_busy(0.2), 1.0)
        assert await asyncio.to_thread(_cpu_busy, 0.3) is False
    else:  # the child that scanned was killed (or, still starting, is kept idle)
        await asyncio.to_thread(_wait_until, lambda: source.workers.busy == 0, 1.0)
        assert source.workers.busy == 0
        await source.aclose()
