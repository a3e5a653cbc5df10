"""The run's deadline reaches the evidence work it started (issue 20 item 2, FAULTS.md "Deadline
and Cancel at every await"): a real folder source behind the harness, an hour file whose scan
would run for minutes; the deadline cuts the ``query_logs`` call off and the scan thread ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from plugin.contract.request import DiagnosisRequest
from plugin.errors import StopReason
from plugin.tools.base import ToolName
from plugin.tools.logs import JsonlLogSource, LogsAdapter
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, adapters, call, harness, tool_step
from tests.tools.test_logs_stop import HOUR_FILE, _endless_hour, _wait_until


async def test_the_run_deadline_stops_the_scan_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    """End to end: a real folder source behind the harness; the run's deadline cuts the tool
    call off, and the scan it started stops too (it would otherwise read for minutes)."""
    _endless_hour(tmp_path / "logs")
    source = JsonlLogSource(tmp_path / "logs")
    table: dict[ToolName, Any] = {**adapters(), ToolName.QUERY_LOGS: LogsAdapter(source)}
    server = await model_server([tool_step(call("c1", "query_logs", LOGS_INPUT))])
    built = harness(server, tmp_path, table, DIAG_DEADLINE_SECONDS=3)
    started = time.monotonic()
    result = await built.diagnose(DiagnosisRequest("payment-api errors since 10:00?"))
    assert time.monotonic() - started < 3 + 2.0
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    assert server.request_count == 1
    await asyncio.to_thread(_wait_until, lambda: bool(source.stats.last_files), 1.0)
    assert source.stats.last_files == (HOUR_FILE,)  # the scan thread ended
