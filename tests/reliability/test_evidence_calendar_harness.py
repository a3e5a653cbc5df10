"""Issue 10 item 2 through the harness: a model window at the calendar's edge is a refused
envelope, never a failed run.

``0001-01-01T00:10+01:00`` (before year 1 in UTC) used to pass validation and overflow later
(``AGENT_ERROR``). Now the model gets ``REJECTED INVALID_ENVELOPE`` for each variant, can still
query a sane window and answer, every run is audited, and the process keeps serving. The real
folder adapter answers the sane window, over a log file that also carries out-of-range ``ts``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.result import Outcome
from sre_diag.tools.base import ToolName
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, tool_step
from tests.reliability.support import (
    LOGS_WINDOW,
    QUERY,
    assert_still_serves,
    audit_of,
    build,
    healthy_step,
    observations,
)

EDGES = [
    ("0001-01-01T00:10+01:00", "0001-01-01T00:40+01:00"),
    ("9999-12-31T23:00-01:00", "9999-12-31T23:59-01:00"),
    ("0001-01-01T00:00:00Z", "0001-01-01T00:30:00Z"),
    ("2026-11-28T10:00:00Z", "9999-12-31T23:59:59.999999-23:59"),
]


def _write_logs(folder: Path) -> None:
    hour = folder / "payment-api" / "2026-11-28" / "10.jsonl"
    hour.parent.mkdir(parents=True)
    rows: list[dict[str, Any]] = [
        {"ts": "0001-01-01T00:10+01:00", "message": "out of range before"},
        {"ts": "9999-12-31T23:59-01:00", "message": "out of range after"},
        {"ts": "2026-11-28T10:05:00Z", "message": "db pool exhausted"},
    ]
    hour.write_text(
        "".join(
            json.dumps({"service": "payment-api", "level": "ERROR", **row}) + "\n" for row in rows
        ),
        "utf-8",
    )


@pytest.mark.parametrize(("start", "end"), EDGES)
async def test_calendar_edge_window_is_a_refused_envelope(
    model_server: StartServer, tmp_path: Path, start: str, end: str
) -> None:
    _write_logs(tmp_path / "logs")
    edge = {"service": "payment-api", "start": start, "end": end}
    sane = {"service": "payment-api", **LOGS_WINDOW}
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", edge)),
            tool_step(call("c2", "query_logs", sane)),
            final_step(draft_json(["c2"])),
            healthy_step(),
        ]
    )
    adapters = {ToolName.QUERY_LOGS: LogsAdapter(JsonlLogSource(tmp_path / "logs"))}
    harness = build(server.base_url, tmp_path, adapters)
    result = await harness.diagnose(QUERY)

    assert result.outcome is Outcome.DRAFT, result.to_json()
    refused, answered = observations(server.requests[2])
    assert refused["evidence_status"] == "REJECTED"
    assert refused["error_code"] == "INVALID_ENVELOPE"
    assert "Traceback" not in json.dumps(refused) and "Overflow" not in json.dumps(refused)
    assert answered["evidence_status"] == "READY"
    assert [item["message"] for item in answered["items"]] == ["db pool exhausted"]
    audit_of(tmp_path, result)
    await assert_still_serves(harness, tmp_path, server)
