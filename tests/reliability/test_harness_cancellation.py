"""Issue 10 item 10: many cancelled concurrent runs leave no unretrieved task exception.

Runs are cancelled at every stage a run has (before its first round, during a tool, just after
a round so the gate raises ``BudgetStop('CANCELLED')`` inside the workflow, mid-request, at
random moments); the loop's exception handler must never be called and no "never retrieved"
record may be logged. The model is the per-conversation loopback fake, which counts requests.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.errors import StopReason
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.state import ModelRound, RunState
from sre_diag.tools.base import AdapterCall, Ready, ToolName
from tests.harness.support import LOGS_INPUT, ScriptedAdapter, adapters, call, tool_step
from tests.reliability.support import ConversationModelServer, audit_records, build

STAGES = ["before", "tool", "after-round", "in-request", "random"]


class CancelAt(StepHook):
    def __init__(self, cancel: asyncio.Event, stage: str) -> None:
        self.cancel, self.stage = cancel, stage

    def on_model_round(self, ctx: RunState, model_round: ModelRound) -> None:
        if self.stage == "after-round" and model_round.index == 1:
            self.cancel.set()  # the next round's gate raises CANCELLED inside the workflow

    def on_tool_started(self, ctx: RunState, tool: ToolName, scope: str) -> None:
        if self.stage == "tool":
            self.cancel.set()


class SlowLogs(ScriptedAdapter):
    async def invoke(self, call: AdapterCall[Any]) -> Ready:  # type: ignore[override]
        self.calls.append(call)
        await asyncio.sleep(random.random() * 0.004)
        return Ready(items=[])


def script(query: str) -> list[ModelStep]:
    stage = query.split(":")[0]
    slow = 5.0 if stage == "in-request" else 0.0
    return [
        tool_step(call("c1", "query_logs", LOGS_INPUT)),
        ModelStep(content='{"x": 1}', delay_seconds=slow),
    ]


async def test_many_cancelled_runs_leave_no_unretrieved_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    server = await ConversationModelServer(script).start()
    try:
        harness = build(
            server.base_url, tmp_path, adapters(query_logs=SlowLogs(ToolName.QUERY_LOGS))
        )

        async def one(i: int, n: int) -> tuple[str, ExecutionResult]:
            stage = STAGES[n % len(STAGES)]
            cancel = asyncio.Event()
            if stage == "before":
                cancel.set()
            run = asyncio.ensure_future(
                harness.diagnose(
                    DiagnosisRequest(f"{stage}:{i}:{n}"),
                    cancel_event=cancel,
                    hooks=[CancelAt(cancel, stage)],
                )
            )
            if stage in {"in-request", "random"}:
                await asyncio.sleep(0.05 if stage == "in-request" else random.random() * 0.02)
                cancel.set()
            return stage, await run

        with caplog.at_level(logging.ERROR):
            for i in range(3):
                outcomes = await asyncio.gather(*(one(i, n) for n in range(100)))
                for stage, result in outcomes:
                    if stage != "random":  # a random cancel may come after the end
                        assert result.outcome is Outcome.STOPPED, (stage, result.to_json())
                        assert result.stop_reason is StopReason.CANCELLED
            for _ in range(3):  # unretrieved exceptions are reported when collected
                gc.collect()
                await asyncio.sleep(0.02)
    finally:
        loop.set_exception_handler(previous)
        await server.stop()

    assert reported == []
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert server.unexpected == 0
    for query, count in server.requests.items():
        stage = query.split(":")[0]
        # Cancelled before the first round: no request; after round 1: round 2 never sent.
        limit = {"before": 0, "tool": 1, "after-round": 1}.get(stage, 2)
        assert count <= limit, (query, count)
    assert len(audit_records(tmp_path)) == 300  # every run has its audit record
