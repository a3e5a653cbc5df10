"""Runs leave the Slack front (issue 16): ``serve --workers N`` / ``sre-diag worker`` over a Redis
Stream, as processes against the machine's Redis, a recording Slack API and a scripted model.

The run queue's stream has a fixed name (``sre-diag:jobs``): these tests isolate it in a Redis
database of their own (``_DB``), emptied before and after each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.blocks import EVIDENCE_ACTION_ID, FEEDBACK_UP_ACTION_ID
from sre_diag.slack.jobs import DEFAULT_STREAM, GROUP
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.serve_support import (
    ServeProcess,
    free_port,
    get,
    mention_body,
    post_signed,
    serve_env,
    wait_status,
)
from tests.slack.support import ADMIN, button_payload, cancel_payload, redis_url, require_redis

_DB = 13


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client = await require_redis(_DB)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


def _env(tmp_path: Path, slack: RecordingSlackApi, base_url: str, **values: str) -> dict[str, str]:
    return serve_env(
        tmp_path,
        DIAG_SLACK_API_URL=slack.base_url,
        OPENAI_BASE_URL=base_url,
        DIAG_REDIS_URL=redis_url(_DB),
        **values,
    )


def _answers(slack: RecordingSlackApi) -> list[dict[str, Any]]:
    return [m for m in slack.messages if (m.get("metadata") or {}).get("event_type")]


async def _until(check: Callable[[], bool], within: float, what: str) -> float:
    """Poll ``check`` until true; the monotonic time it became true."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {within} s: {what}")


def _run_key(slack: RecordingSlackApi) -> str | None:
    for posted in slack.calls_of("chat.postMessage"):
        for block in posted.params.get("blocks") or []:
            if block.get("type") == "actions":
                for element in block.get("elements", []):
                    if element.get("action_id") == "diag_cancel":
                        return str(element["value"])
    return None


async def _front(env: dict[str, str], tmp_path: Path, workers: int) -> tuple[ServeProcess, int]:
    port = free_port()
    front = await ServeProcess.start(
        env, tmp_path, http=True, port=port, extra=["--workers", str(workers)]
    )
    await wait_status(f"http://127.0.0.1:{port}/readyz", 200)
    return front, port


async def _metrics_with(port: int, line: str, within: float = 5) -> str:
    """``/metrics`` once it shows ``line`` (the queue's figures are read every second)."""
    deadline = time.monotonic() + within
    while True:
        text = (await get(f"http://127.0.0.1:{port}/metrics"))[1]
        if line in text or time.monotonic() > deadline:
            assert line in text, text
            return text
        await asyncio.sleep(0.2)


async def _exits_0(process: ServeProcess, within: float = 60) -> None:
    """SIGTERM ``process``; it exits 0 in time (else its log tells why)."""
    process.send(signal.SIGTERM)
    try:
        code = await process.wait_exit(within)
    except TimeoutError:
        raise AssertionError(f"no exit within {within} s:\n{process.stderr[-4000:]}") from None
    assert code == 0, process.stderr[-4000:]


def _no_traceback(*processes: ServeProcess) -> None:
    for process in processes:
        assert "Traceback" not in process.stderr, process.stderr


async def test_front_and_two_workers_answer_concurrent_mentions(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    steps = [ModelStep(content=draft_json(conclusion=False), delay_seconds=1.5) for _ in range(2)]
    model = await model_server(steps)
    threads = ["1764300000.000501", "1764300000.000502"]
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url, DIAG_MAX_CONCURRENT_RUNS="1")
        front, port = await _front(env, tmp_path, workers=2)
        try:
            await front.wait_for_log("ready: up to 1 run(s)", count=2)
            sent = time.monotonic()
            for i, ts in enumerate(threads):
                assert await post_signed(port, mention_body(f"EvWORK{i:04d}", ts)) == 200
            done = await _until(lambda: len(_answers(slack)) == 2, 30, "two answers")
            taken = await front.wait_for_log("taken by", count=2)
            metrics = (await get(f"http://127.0.0.1:{port}/metrics"))[1]
            front.send(signal.SIGTERM)
            assert await front.wait_exit() == 0
        finally:
            await front.aclose()
    # One answer in each thread, each run in its own worker, the two at the same time (one
    # slot per worker, 1.5 s per run).
    assert sorted(a["thread_ts"] for a in _answers(slack)) == threads
    consumers = {line.split("taken by ")[1].split(":")[0] for line in taken}
    assert len(consumers) == 2, taken
    assert done - sent < 2 * 1.5 + 1.0
    assert "diag_jobs_queued" in metrics and "diag_jobs_claimed_total" in metrics
    # Each status message (posted by the front) was finished by the worker.
    statuses = [m for m in slack.messages if m.get("thread_ts") in threads and not m["metadata"]]
    assert len(statuses) == 2
    assert all("Done" in json.dumps(m["blocks"]) for m in statuses), statuses
    assert await admin.xpending(DEFAULT_STREAM, GROUP) == {
        "pending": 0,
        "min": None,
        "max": None,
        "consumers": [],
    }
    _no_traceback(front)


async def test_a_one_slot_worker_takes_each_next_job_and_the_stream_is_trimmed(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    # The slot a run frees is seen by the worker's taker at once (a run's end used to be
    # counted only after its acknowledgement had woken the taker, which then slept forever).
    steps = [ModelStep(content=draft_json(conclusion=False), delay_seconds=0.3) for _ in range(4)]
    model = await model_server(steps)
    threads = [f"1764300000.00070{i}" for i in range(4)]
    async with RecordingSlackApi() as slack:
        env = _env(
            tmp_path, slack, model.base_url,
            DIAG_MAX_CONCURRENT_RUNS="1", DIAG_JOB_CLAIM_SECONDS="3",
        )  # fmt: skip
        front, port = await _front(env, tmp_path, workers=1)
        try:
            await front.wait_for_log("ready: up to 1 run(s)")
            for i, ts in enumerate(threads):
                assert await post_signed(port, mention_body(f"EvSLOT{i:04d}", ts)) == 200
            await _until(lambda: len(_answers(slack)) == 4, 30, "four answers, one at a time")
            # Acknowledged entries leave the stream at the next heartbeat (every 1 s here):
            # only the last delivered one stays, as the group's mark.
            for _ in range(50):
                if await admin.xlen(DEFAULT_STREAM) <= 1:
                    break
                await asyncio.sleep(0.2)
            assert await admin.xlen(DEFAULT_STREAM) == 1
            await _exits_0(front)
        finally:
            await front.aclose()
    assert sorted(a["thread_ts"] for a in _answers(slack)) == threads
    assert len(await front.wait_for_log("taken by", count=4)) == 4
    _no_traceback(front)


async def test_cancel_reaches_a_run_in_a_worker(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    model = await model_server(
        [ModelStep(content=draft_json(conclusion=False), delay_seconds=20.0)]
    )
    thread = "1764300000.000601"
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url)
        front, port = await _front(env, tmp_path, workers=1)
        try:
            assert await post_signed(port, mention_body("EvCANC0001", thread)) == 200
            await asyncio.wait_for(model.wait_for_requests(1), 30)
            run_key = _run_key(slack)
            assert run_key is not None
            clicked = time.monotonic()
            assert await post_signed(port, cancel_payload(run_key, ADMIN), form=True) == 200
            answered = await _until(lambda: len(_answers(slack)) == 1, 15, "the cancelled answer")
            front.send(signal.SIGTERM)
            assert await front.wait_exit() == 0
        finally:
            await front.aclose()
    answer = _answers(slack)[0]
    assert answer["thread_ts"] == thread
    assert "The run was cancelled" in answer["text"], answer
    assert answered - clicked < 10
    _no_traceback(front)


async def test_a_killed_worker_s_job_is_answered_worker_lost(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    model = await model_server(
        [ModelStep(content=draft_json(conclusion=False), delay_seconds=30.0)]
    )
    thread = "1764300000.000701"
    claim = 3.0
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url, DIAG_JOB_CLAIM_SECONDS=str(claim))
        front, port = await _front(env, tmp_path, workers=0)
        first = await ServeProcess.start(env, tmp_path, command=["worker"])
        second = await ServeProcess.start(env, tmp_path, command=["worker"])
        try:
            await first.wait_for_log("ready: up to")
            await second.wait_for_log("ready: up to")
            assert await post_signed(port, mention_body("EvKILL0001", thread)) == 200
            await asyncio.wait_for(model.wait_for_requests(1), 30)
            runner = first if any("taken by" in line for line in first.lines) else second
            other = second if runner is first else first
            await runner.wait_for_log("taken by")
            killed = runner.send(signal.SIGKILL)
            await runner.wait_exit()
            answered = await _until(lambda: len(_answers(slack)) == 1, claim + 10, "WORKER_LOST")
            metrics = await _metrics_with(port, "diag_jobs_claimed_total 1.0")
            for process in (other, front):
                await _exits_0(process)
        finally:
            for process in (first, second, front):
                await process.aclose()
    answer = _answers(slack)[0]
    assert answer["thread_ts"] == thread
    text = json.dumps(answer)
    assert "AGENT_ERROR" in text and "WORKER_LOST" in text, text
    assert "Replay diagnosis" in text  # the shortcut asks it again (the metadata is there)
    assert answer["metadata"]["event_payload"]["turn"]["query"] == "payment-api 5xx since 10:05"
    # Claimed once the claim time passed without a touch (the last touch came up to one
    # heartbeat, 1 s here, before the kill), within it plus a heartbeat and a margin.
    assert claim - 1.0 - 0.3 <= answered - killed < claim + 6
    assert "its worker was lost" in other.stderr
    # Never run twice: the model saw the one request of the killed worker.
    assert model.request_count == 1
    records = [
        json.loads(line)
        for path in (tmp_path / "audit").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    lost = [r for r in records if (r.get("failure") or {}).get("detail") == "WORKER_LOST"]
    assert len(lost) == 1 and lost[0]["outcome"] == "FAILED"
    assert lost[0]["failure"]["code"] == "AGENT_ERROR"
    assert lost[0]["run_id"] in text
    assert 'diag_jobs_queued{state="taken"} 0.0' in metrics
    assert (await admin.xpending(DEFAULT_STREAM, GROUP))["pending"] == 0
    _no_traceback(front, other)


async def test_a_local_worker_that_dies_is_started_again_and_answers_its_lost_job(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    model = await model_server(
        [
            ModelStep(content=draft_json(conclusion=False), delay_seconds=30.0),
            ModelStep(content=draft_json(conclusion=False)),
        ]
    )
    lost, later = "1764300000.000801", "1764300000.000802"
    claim = 3.0
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url, DIAG_JOB_CLAIM_SECONDS=str(claim))
        front, port = await _front(env, tmp_path, workers=1)
        try:
            started = await front.wait_for_log("started 1 local worker(s): pid")
            pid = int(started[0].rsplit("pid", 1)[1])
            await front.wait_for_log("ready: up to")
            assert await post_signed(port, mention_body("EvKEEP0001", lost)) == 200
            await asyncio.wait_for(model.wait_for_requests(1), 30)
            os.kill(pid, signal.SIGKILL)
            await front.wait_for_log(f"worker pid {pid} exited -9; starting another in 1 s")
            await front.wait_for_log("started local worker pid")
            await front.wait_for_log("ready: up to", count=2)
            # The only worker is the new one: it claims the job its predecessor held.
            await _until(lambda: len(_answers(slack)) == 1, claim + 15, "WORKER_LOST")
            assert await post_signed(port, mention_body("EvKEEP0002", later)) == 200
            await _until(lambda: len(_answers(slack)) == 2, 30, "the next mention answered")
            await _exits_0(front)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            await front.aclose()
    first, second = _answers(slack)
    assert first["thread_ts"] == lost and "WORKER_LOST" in json.dumps(first)
    assert second["thread_ts"] == later and "WORKER_LOST" not in json.dumps(second)
    assert model.request_count == 2  # the lost job was never run again
    assert "worker pid" in front.stderr and "did not drain" not in front.stderr
    _no_traceback(front)


def _gone(pid: int) -> bool:
    """``pid`` has exited (a zombie no one reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def test_local_workers_drain_and_exit_when_their_front_is_killed(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    # SIGKILL the front of ``serve --workers 2`` mid-run: its local workers must not live on
    # taking jobs for a front that is gone (they did, and stole later tests' jobs); the run in
    # flight is still answered, once, before they exit.
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=3.0)])
    thread = "1764300000.000851"
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url)
        front, port = await _front(env, tmp_path, workers=2)
        started = await front.wait_for_log("started 2 local worker(s): pid")
        pids = [int(p) for p in started[0].rsplit("pid", 1)[1].split(",")]
        try:
            await front.wait_for_log("ready: up to", count=2)
            assert await post_signed(port, mention_body("EvORPH0001", thread)) == 200
            await asyncio.wait_for(model.wait_for_requests(1), 30)
            assert front.process.pid is not None
            os.kill(front.process.pid, signal.SIGKILL)
            await _until(lambda: all(_gone(pid) for pid in pids), 30, "the workers gone")
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await front.aclose()
    assert [a["thread_ts"] for a in _answers(slack)] == [thread]
    assert front.stderr.count("is gone: draining and stopping") == 2, front.stderr[-4000:]
    assert (await admin.xpending(DEFAULT_STREAM, GROUP))["pending"] == 0
    _no_traceback(front)


async def test_sigterm_drains_the_worker(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=2.0)])
    thread = "1764300000.000801"
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url)
        front, port = await _front(env, tmp_path, workers=0)
        worker = await ServeProcess.start(env, tmp_path, command=["worker"])
        try:
            await worker.wait_for_log("ready: up to")
            assert await post_signed(port, mention_body("EvTERM0001", thread)) == 200
            await asyncio.wait_for(model.wait_for_requests(1), 30)
            await _exits_0(worker)
            await _exits_0(front)
        finally:
            await worker.aclose()
            await front.aclose()
    # The run in flight finished and was answered before the worker exited, then acknowledged.
    answers = _answers(slack)
    assert len(answers) == 1 and answers[0]["thread_ts"] == thread
    assert "draining 1 run(s)" in worker.stderr
    assert (await admin.xpending(DEFAULT_STREAM, GROUP))["pending"] == 0
    assert (await admin.xinfo_groups(DEFAULT_STREAM))[0]["lag"] == 0
    _no_traceback(front, worker)


async def test_duplicate_deliveries_start_one_run(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=0.5)])
    thread = "1764300000.000901"
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url)
        front, port = await _front(env, tmp_path, workers=1)
        try:
            body = mention_body("EvDUPL0001", thread)
            statuses = await asyncio.gather(*(post_signed(port, body) for _ in range(3)))
            assert statuses == [200, 200, 200]
            await _until(lambda: len(_answers(slack)) == 1, 30, "the answer")
            await asyncio.sleep(1.0)  # a second run would have started by now
            front.send(signal.SIGTERM)
            assert await front.wait_exit() == 0
        finally:
            await front.aclose()
    assert len(_answers(slack)) == 1
    assert model.request_count == 1
    assert await admin.xlen(DEFAULT_STREAM) == 1
    _no_traceback(front)


async def test_workers_need_redis(tmp_path: Path) -> None:
    env = serve_env(tmp_path)
    for args in (["--workers", "2"], None):
        if args is None:
            process = await ServeProcess.start(env, tmp_path, command=["worker"])
        else:
            process = await ServeProcess.start(env, tmp_path, http=True, extra=args)
        try:
            assert await process.wait_exit() == 2
        finally:
            await process.aclose()
        lines = process.stdout.strip().splitlines()
        assert len(lines) == 1, process.stdout
        error = json.loads(lines[0])["error"]
        assert error["code"] == "INVALID_SETTINGS" and "DIAG_REDIS_URL" in error["message"]


async def test_evidence_and_feedback_of_a_run_in_a_worker(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    """The worker keeps the cited observations in Redis; the front serves the Evidence button
    and 👍 on the answer the worker posted."""
    logs = tmp_path / "logs" / "payment-api" / "2026-11-28" / "10.jsonl"
    logs.parent.mkdir(parents=True)
    line = {"ts": "2026-11-28T10:05:00Z", "service": "payment-api", "level": "ERROR",
            "message": "db pool exhausted: timed out after 3000ms"}  # fmt: skip
    logs.write_text(json.dumps(line) + "\n", "utf-8")
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    thread = "1764300000.001001"
    async with RecordingSlackApi() as slack:
        env = _env(tmp_path, slack, model.base_url, DIAG_LOGS_SOURCE=str(tmp_path / "logs"))
        front, port = await _front(env, tmp_path, workers=1)
        try:
            assert await post_signed(port, mention_body("EvEVID0001", thread)) == 200
            await _until(lambda: len(_answers(slack)) == 1, 30, "the answer")
            buttons = {
                e["action_id"]: e["value"]
                for b in _answers(slack)[0]["blocks"]
                if b.get("type") == "actions"
                for e in b["elements"]
            }
            for action in (EVIDENCE_ACTION_ID, FEEDBACK_UP_ACTION_ID):
                click = button_payload(action, buttons[action], thread_ts=thread)
                assert await post_signed(port, click, form=True) == 200
            await _until(
                lambda: any("db pool exhausted" in json.dumps(m) for m in slack.messages[1:]
                            if not m.get("metadata") and m.get("thread_ts") == thread
                            and "Evidence" in json.dumps(m)),
                10,
                "the evidence view",
            )  # fmt: skip
            await _until(
                lambda: bool(slack.calls_of("chat.postEphemeral")), 10, "the feedback note"
            )
            front.send(signal.SIGTERM)
            assert await front.wait_exit() == 0
        finally:
            await front.aclose()
    note = slack.calls_of("chat.postEphemeral")[0].params["text"]
    assert "Thanks" in note
    _no_traceback(front)
