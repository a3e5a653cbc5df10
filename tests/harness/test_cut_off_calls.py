"""A tool call cut off mid-call is still a canonical invocation (CONTRACTS §6, FAULTS "Deadline
and Cancel at every await").

The adapter really ran (a SQL statement reached the database): whatever ends it — the deadline,
a Cancel, a stop of the task running the diagnosis — the call is in ``progress.checks`` and in
the audit record as ``ERROR`` with ``TIMEOUT`` (deadline) or ``CANCELLED``, is never citable,
and the adapter itself sees its cancellation at that moment (it does not run on).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Check, ExecutionResult, Outcome
from sre_diag.errors import StopReason
from sre_diag.harness.hooks import StepHook
from sre_diag.tools.base import AdapterCall, AdapterResult, Ready, ToolName
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    ScriptedAdapter,
    adapters,
    audit_records,
    call,
    harness,
    tool_step,
)

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC")
SQL = {"sql": "SELECT status, COUNT(*) FROM orders GROUP BY status", "purpose": "失败订单"}


class HangingAdapter(ScriptedAdapter):
    """Never answers on its own; records when (and whether) it saw its cancellation."""

    def __init__(self, tool: ToolName) -> None:
        super().__init__(tool)
        self.entered = asyncio.Event()
        self.cancelled_at: float | None = None
        self.finished = False

    async def invoke(self, call: AdapterCall[Any]) -> AdapterResult:
        self.calls.append(call)
        self.entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled_at = asyncio.get_running_loop().time()
            raise
        self.finished = True
        return Ready(items=[])


class Results(StepHook):
    def __init__(self) -> None:
        self.results: list[ExecutionResult] = []

    def on_result(self, ctx: Any, result: ExecutionResult) -> None:
        self.results.append(result)


def _cut_off_check(result: ExecutionResult, call_id: str) -> Check:
    assert result.progress is not None, result.to_json()
    matching = [c for c in result.progress.checks if c.tool_call_id == call_id]
    assert len(matching) == 1, result.to_json()
    return matching[0]


def _audited(tmp_path: Path, call_id: str) -> dict[str, Any]:
    (record,) = audit_records(tmp_path)
    matching = [i for i in record["invocations"] if i["tool_call_id"] == call_id]
    assert len(matching) == 1, record
    return dict(matching[0])


@pytest.mark.parametrize("tool", [ToolName.QUERY_MYSQL, ToolName.QUERY_LOGS])
async def test_the_deadline_cuts_a_call_off_as_error_timeout(
    model_server: StartServer, tmp_path: Path, tool: ToolName
) -> None:
    business = SQL if tool is ToolName.QUERY_MYSQL else LOGS_INPUT
    server = await model_server([tool_step(call("slow-1", tool.value, business))])
    hanging = HangingAdapter(tool)
    h = harness(server, tmp_path, adapters(**{tool.value: hanging}), DIAG_DEADLINE_SECONDS=4)
    loop = asyncio.get_running_loop()
    result = await h.diagnose(QUERY)
    ended = loop.time()
    assert result.outcome is Outcome.STOPPED
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    check = _cut_off_check(result, "slow-1")
    assert (check.tool, check.status, check.error_code) == (tool.value, "ERROR", "TIMEOUT")
    assert check.scope is not None and check.item_count == 0
    assert result.usage.tool_calls == 1 and server.request_count == 1
    assert result.usage.elapsed_ms < 5000  # within a second of the deadline (FAULTS)
    # The adapter saw its cancellation before the run's result existed, and did not run on.
    assert hanging.cancelled_at is not None and hanging.cancelled_at <= ended
    assert not hanging.finished
    audited = _audited(tmp_path, "slow-1")
    assert (audited["status"], audited["code"]) == ("ERROR", "TIMEOUT")
    assert audited["business_input"] == (
        SQL if tool is ToolName.QUERY_MYSQL else {**LOGS_INPUT, "contains": None, "limit": 20}
    )
    assert audited["observation_bytes"] == 0  # the model never got an observation for it
    assert audited["duration_ms"] > 0


async def test_a_cancel_cuts_a_call_off_as_error_cancelled(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([tool_step(call("sql-1", "query_mysql", SQL))])
    hanging = HangingAdapter(ToolName.QUERY_MYSQL)
    cancel = asyncio.Event()
    h = harness(server, tmp_path, adapters(query_mysql=hanging))
    run = asyncio.create_task(h.diagnose(QUERY, cancel_event=cancel))
    await asyncio.wait_for(hanging.entered.wait(), 10)
    cancel.set()
    result = await asyncio.wait_for(run, 3)  # within a second or so of the Cancel (load: 3 s)
    assert result.stop_reason is StopReason.CANCELLED
    check = _cut_off_check(result, "sql-1")
    assert (check.status, check.error_code) == ("ERROR", "CANCELLED")
    assert hanging.cancelled_at is not None and not hanging.finished
    assert _audited(tmp_path, "sql-1")["code"] == "CANCELLED"


async def test_a_stop_of_the_running_task_cuts_a_call_off_as_error_cancelled(
    model_server: StartServer, tmp_path: Path
) -> None:
    # A drain or shutdown cancels the task running the diagnosis: the signal goes on to whoever
    # sent it, and the run's result and audit record still carry the call.
    server = await model_server([tool_step(call("sql-1", "query_mysql", SQL))])
    hanging = HangingAdapter(ToolName.QUERY_MYSQL)
    seen = Results()
    h = harness(server, tmp_path, adapters(query_mysql=hanging))
    run = asyncio.create_task(h.diagnose(QUERY, hooks=[seen]))
    await asyncio.wait_for(hanging.entered.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    (result,) = seen.results
    assert result.stop_reason is StopReason.CANCELLED
    check = _cut_off_check(result, "sql-1")
    assert (check.status, check.error_code) == ("ERROR", "CANCELLED")
    assert hanging.cancelled_at is not None
    assert _audited(tmp_path, "sql-1")["status"] == "ERROR"


async def test_a_cut_off_call_is_never_citable_and_earlier_checks_stay(
    model_server: StartServer, tmp_path: Path
) -> None:
    # c1 READY, then the deadline cuts c2 off: both are checks, in order; only c1 is READY,
    # which is what the citation check accepts.
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "query_mysql", SQL, previous=("c1", "GAINED"))),
        ]
    )
    hanging = HangingAdapter(ToolName.QUERY_MYSQL)
    h = harness(server, tmp_path, adapters(query_mysql=hanging), DIAG_DEADLINE_SECONDS=4)
    result = await h.diagnose(QUERY)
    assert result.stop_reason is StopReason.DEADLINE_EXCEEDED
    assert result.progress is not None
    assert [(c.tool_call_id, c.status, c.error_code) for c in result.progress.checks] == [
        ("c1", "READY", None),
        ("c2", "ERROR", "TIMEOUT"),
    ]
    assert result.usage.tool_calls == 2
