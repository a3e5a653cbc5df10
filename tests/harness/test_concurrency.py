"""Twenty concurrent runs keep separate ledgers, hooks and audit records."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import Invocation
from sre_diag.harness.state import RunState
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    audit_records,
    call,
    draft_json,
    final_step,
    harness,
    tool_step,
)


class Seen(StepHook):
    def __init__(self) -> None:
        self.run_ids: set[str] = set()
        self.call_ids: list[str] = []

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        self.run_ids.update({ctx.run_id, invocation.run_id})
        self.call_ids.append(invocation.tool_call_id)


async def test_twenty_concurrent_runs_stay_separate(
    model_server: StartServer, tmp_path: Path
) -> None:
    async def one(n: int) -> tuple[ExecutionResult, Seen]:
        server = await model_server(
            [
                tool_step(call(f"r{n}-c1", "query_logs", LOGS_INPUT)),
                final_step(draft_json([f"r{n}-c1"])),
            ]
        )
        hook = Seen()
        result = await harness(server, tmp_path).diagnose(
            DiagnosisRequest(f"query {n}"), session_id=f"s{n}", hooks=[hook]
        )
        return result, hook

    outcomes = await asyncio.gather(*(one(n) for n in range(20)))
    assert {r.run_id for r, _ in outcomes}.__len__() == 20
    for n, (result, hook) in enumerate(outcomes):
        assert result.outcome is Outcome.DRAFT
        assert hook.run_ids == {result.run_id}
        assert hook.call_ids == [f"r{n}-c1"]
        assert result.progress is not None
        assert [c.tool_call_id for c in result.progress.checks] == [f"r{n}-c1"]
    records = {r["run_id"]: r for r in audit_records(tmp_path)}
    assert len(records) == 20
    for result, _ in outcomes:
        assert [i["run_id"] for i in records[result.run_id]["invocations"]] == [result.run_id]
