"""``/healthz``, ``/readyz``, ``/metrics`` (CONTRACTS §8): scraped after runs of each outcome.

The process test drives ``serve --http`` with signed requests and the scripted model: a Draft,
a STOPPED (deadline) run with one tool call, a FAILED (invalid draft) run and an ignored event,
then checks every listed series; ``/readyz`` answers 503 while the process drains. The
in-process tests check what the process cannot show cheaply: one registry per app, and audit
records lost.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from slack_bolt.async_app import AsyncApp

from sre_diag.contract.text import STOP_EXPLANATIONS
from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.errors import StopReason
from sre_diag.slack import register
from sre_diag.slack.metrics import Metrics
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, settings_for, tool_step
from tests.slack.serve_support import (
    REPO,
    ServeProcess,
    free_port,
    get,
    mention_body,
    post_signed,
    serve_env,
    wait_status,
)
from tests.slack.support import OTHER, slack_rig

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
MENTION = {"trigger": "mention"}

LISTED = (
    "diag_runs_total",
    "diag_run_duration_seconds_bucket",
    "diag_run_duration_seconds_count",
    "diag_model_calls_total",
    "diag_tokens_total",
    "diag_tool_calls_total",
    "diag_runs_in_flight",
    "diag_runs_queued",
    "diag_slack_events_total",
    "diag_audit_records_lost_total",
)


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def scrape(port: int) -> Samples:
    status, text = await get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return parse(text)


async def runs_ended(port: int, count: int, within: float = 60) -> Samples:
    deadline = time.monotonic() + within
    while True:
        samples = await scrape(port)
        if total(samples, "diag_runs_total") >= count or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.1)


def names(samples: Iterable[tuple[str, frozenset[tuple[str, str]]]]) -> set[str]:
    return {name for name, _ in samples}


async def test_metrics_after_runs_of_each_outcome_and_readyz_while_draining(
    model_server: StartServer, tmp_path: Path
) -> None:
    knowledge = call("call-1", "lookup_knowledge", {"query": "connection pool exhausted"})
    model = await model_server(
        [
            final_step(draft_json(conclusion=False), prompt_tokens=110, completion_tokens=21),
            tool_step(knowledge, prompt_tokens=120, completion_tokens=22),
            ModelStep(content=draft_json(conclusion=False), delay_seconds=6.0),  # deadline
            final_step("not a draft", prompt_tokens=130, completion_tokens=23),
            ModelStep(content=draft_json(conclusion=False), delay_seconds=1.0),  # drained
        ]
    )
    port = free_port()
    async with RecordingSlackApi() as slack:
        env = serve_env(
            tmp_path,
            DIAG_SLACK_API_URL=slack.base_url,
            OPENAI_BASE_URL=model.base_url,
            DIAG_DEADLINE_SECONDS="2",
            DIAG_KNOWLEDGE_DIR=str(REPO / "examples" / "incident" / "runbooks"),
        )
        process = await ServeProcess.start(env, tmp_path, http=True, port=port)
        try:
            assert await wait_status(f"http://127.0.0.1:{port}/readyz", 200)
            assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
            before = await scrape(port)
            assert names(before) >= set(LISTED) - {"diag_run_duration_seconds_bucket"}
            for n in range(3):
                body = mention_body(f"EvOPS{n:05d}", f"1764300000.00010{n}")
                assert await post_signed(port, body) == 200
                await runs_ended(port, n + 1)
            ignored = mention_body("EvOPS99999", "1764300000.000199", channel=OTHER)
            assert await post_signed(port, ignored) == 200
            samples = await runs_ended(port, 3)
            # A fourth run in flight, then SIGTERM: not ready while it drains, then exit 0.
            assert await post_signed(port, mention_body("EvOPS00004", "1764300000.000104")) == 200
            await model.wait_for_requests(5)
            in_flight = await scrape(port)
            process.send(signal.SIGTERM)
            await wait_status(f"http://127.0.0.1:{port}/readyz", 503, within=5)
            assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
            assert await process.wait_exit(within=30) == 0
        finally:
            await process.aclose()
    assert names(samples) >= set(LISTED)
    assert (
        value(samples, "diag_runs_total", outcome="DRAFT", reason="NO_CONCLUSION", **MENTION) == 1
    )
    assert (
        value(samples, "diag_runs_total", outcome="STOPPED", reason="DEADLINE_EXCEEDED", **MENTION)
        == 1
    )
    assert (
        value(samples, "diag_runs_total", outcome="FAILED", reason="INVALID_DRAFT", **MENTION) == 1
    )
    assert total(samples, "diag_runs_total") == 3
    assert value(samples, "diag_run_duration_seconds_count") == 3
    assert value(samples, "diag_run_duration_seconds_bucket", le="+Inf") == 3
    assert value(samples, "diag_model_calls_total") == 4  # the deadline cut the 3rd request
    assert value(samples, "diag_tokens_total", kind="prompt") == 110 + 120 + 130
    assert value(samples, "diag_tokens_total", kind="completion") == 21 + 22 + 23
    assert value(samples, "diag_tool_calls_total", tool="lookup_knowledge", status="READY") == 1
    assert total(samples, "diag_tool_calls_total") == 1
    assert value(samples, "diag_slack_events_total", result="accepted", reason="MENTION") == 3
    assert (
        value(samples, "diag_slack_events_total", result="ignored", reason="NOT_ADMIN_CHANNEL") == 1
    )
    assert value(samples, "diag_runs_in_flight") == 0
    assert value(samples, "diag_runs_queued") == 0
    assert value(samples, "diag_audit_records_lost_total") == 0
    assert value(in_flight, "diag_runs_in_flight") == 1
    answers = [m for m in slack.messages if m.get("metadata")]
    assert len(answers) == 4  # the drained run answered too


async def test_each_app_counts_in_its_own_registry(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    settings = settings_for(model, tmp_path, DIAG_ADMIN_CHANNELS="CADMIN0001")
    other = register(AsyncApp(token="xoxb-other", request_verification_enabled=False), settings)
    try:
        async with slack_rig(model, tmp_path) as rig:
            assert (await rig.mention("<@UDIAG0001> payment-api 5xx")).status == 200
            await rig.handle.manager.wait_idle()
            mine, theirs = (
                parse(rig.handle.metrics.render().decode()),
                parse(other.metrics.render().decode()),
            )
    finally:
        await other.close()
    assert isinstance(other.metrics, Metrics) and other.metrics is not rig.handle.metrics
    assert total(mine, "diag_runs_total") == 1 and total(theirs, "diag_runs_total") == 0
    assert value(mine, "diag_slack_events_total", result="accepted", reason="MENTION") == 1


async def test_audit_records_lost_are_exposed(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    (tmp_path / "audit").write_text("a file where the audit folder should be\n")
    async with slack_rig(model, tmp_path) as rig:
        assert (await rig.mention("<@UDIAG0001> payment-api 5xx")).status == 200
        await rig.handle.manager.wait_idle()
        samples = parse(rig.handle.metrics.render().decode())
        lost = rig.handle.manager.harness.audit_records_lost
    assert lost == 1
    assert value(samples, "diag_audit_records_lost_total") == 1
    assert (
        value(samples, "diag_runs_total", outcome="DRAFT", reason="NO_CONCLUSION", **MENTION) == 1
    )


async def test_a_budget_stop_is_counted_under_its_own_reason_not_saturation(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The one tool call is spent (c1 GAINED: nothing saturates); c2 gets STOP_REQUIRED for the
    # tool-call budget and the model asks again: TOOL_CALL_BUDGET_EXHAUSTED, in the metrics and
    # in the answer's explanation.
    logs = {"service": "payment-api", "start": "2026-11-28T10:00:00Z",
            "end": "2026-11-28T10:30:00Z"}  # fmt: skip
    model = await model_server(
        [
            tool_step(call("c1", "query_logs", logs)),
            tool_step(call("c2", "lookup_knowledge", {"query": "pool"}, previous=("c1", "GAINED"))),
            tool_step(call("c3", "lookup_knowledge", {"query": "pool size"})),
        ]
    )
    async with slack_rig(model, tmp_path, DIAG_MAX_TOOL_CALLS=1) as rig:
        assert (await rig.mention("<@UDIAG0001> payment-api 5xx")).status == 200
        await rig.handle.manager.wait_idle()
        samples = parse(rig.handle.metrics.render().decode())
        (answer,) = rig.answers()
    stopped = {
        dict(labels)["reason"]: v
        for (name, labels), v in samples.items()
        if name == "diag_runs_total" and {("outcome", "STOPPED"), ("trigger", "mention")} <= labels
    }
    assert set(stopped) == {r.value for r in StopReason}  # a closed set, every one from 0
    assert stopped == {
        r.value: float(r is StopReason.TOOL_CALL_BUDGET_EXHAUSTED) for r in StopReason
    }
    why = STOP_EXPLANATIONS[StopReason.TOOL_CALL_BUDGET_EXHAUSTED].removeprefix("Stopped: ")
    assert why[:1].upper() + why[1:] in answer["text"]  # the header says it stopped
