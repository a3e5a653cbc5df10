"""The alert cooldown across replicas and the trigger through the worker queue (CONTRACTS §10),
against a redis-server of the test's own: two replicas sharing one Redis agree that an alert's
pattern is cooling down; ``serve --http --workers 1`` runs an alert and a shortcut through the
queue, and the worker's audit records carry their triggers; a job keeps its trigger and stays
readable by workers of the same version in both directions."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.slack.job_entry import Job, Poison, parse_entry
from sre_diag.slack.state import MemoryState, RedisState, SharedState
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step
from tests.slack.alert_support import ALERT_BOT, alert_event, new_ts
from tests.slack.redis_server import OwnRedis, own_redis
from tests.slack.serve_support import ServeProcess, free_port, post_signed, serve_env, wait_status
from tests.slack.support import ADMIN, APP_ID, MANIFEST_SCOPES, TEAM_ID, slack_rig


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_cooldown_state(kind: str, tmp_path: Path) -> None:
    async with own_redis(tmp_path) as server:
        clock = _Clock()
        state: SharedState = MemoryState(clock) if kind == "memory" else RedisState(server.url)
        try:
            assert await state.claim_alert("k", "1764300000.000001", 0.5) is None
            assert await state.claim_alert("k", "1764300000.000002", 0.5) == "1764300000.000001"
            await state.forget_alert("k", "1764300000.000002")  # not its holder: kept
            assert await state.claim_alert("k", "1764300000.000003", 0.5) == "1764300000.000001"
            await state.forget_alert("k", "1764300000.000001")
            assert await state.claim_alert("k", "1764300000.000004", 0.5) is None
            clock.now += 1.0
            await asyncio.sleep(0.6 if kind == "redis" else 0)
            assert await state.claim_alert("k", "1764300000.000005", 0.5) is None  # expired
        finally:
            await state.aclose()


async def test_two_replicas_share_the_cooldown(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    first, storm = new_ts(), new_ts()
    env = {"DIAG_ALERT_SOURCES": ALERT_BOT}
    async with own_redis(tmp_path) as server:
        env["DIAG_REDIS_URL"] = server.url
        async with (
            slack_rig(model, tmp_path / "a", **env) as one,
            slack_rig(model, tmp_path / "b", **env) as two,
        ):
            await alert_event(one, text="HighLatency web-17 p99=1834ms", ts=first)
            await alert_event(two, text="HighLatency web-02 p99=912ms", ts=storm)
            await one.handle.manager.wait_idle()
            await two.handle.manager.wait_idle()
            assert [a["thread_ts"] for a in one.answers()] == [first]
            assert two.answers() == []
            [pointer] = two.thread_texts(storm)
    assert first in pointer and "cooldown" in pointer


async def test_redis_out_of_reach_gets_a_polite_reply(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with own_redis(tmp_path) as server:
        url = server.url
        async with slack_rig(
            model, tmp_path, DIAG_ALERT_SOURCES=ALERT_BOT, DIAG_REDIS_URL=url
        ) as rig:
            await server.stop()
            ts = new_ts()
            assert (await alert_event(rig, text="DiskFull", ts=ts)).status == 200
            await rig.handle.manager.wait_idle()
            [reply] = rig.thread_texts(ts)
    assert "unreachable" in reply and model.request_count == 0


# -- the job carries the trigger ------------------------------------------------------------


def _job(**changes: Any) -> dict[str, Any]:
    job = Job.freeze(
        run_key="k1", run_id="run-1", scope="A1:T1", channel=ADMIN, thread_ts="1764300000.000001",
        query="q", previous_turn=None, asked_at=None, requested_by=None, replay=False,
        status_ts=None,
    )  # fmt: skip
    return {**json.loads(job.dumps()), **changes}


@pytest.mark.parametrize(
    ("changes", "trigger"),
    [
        ({"run_trigger": "alert"}, "alert"),
        ({"run_trigger": "shortcut"}, "shortcut"),
        ({"run_trigger": None}, "mention"),
        ({"run_trigger": None, "replay": True}, "replay"),
    ],
)
def test_a_job_keeps_its_trigger(changes: dict[str, Any], trigger: str) -> None:
    parsed = parse_entry({"job": json.dumps(_job(**changes))})
    assert isinstance(parsed, Job) and parsed.started_by().value == trigger


def test_a_job_from_an_older_front_is_a_mention() -> None:
    older = _job()
    del older["run_trigger"]
    parsed = parse_entry({"job": json.dumps(older)})
    assert isinstance(parsed, Job) and parsed.started_by().value == "mention"


@pytest.mark.parametrize("bad", ["ALERT", "cron", 3, ["alert"]])
def test_an_unknown_trigger_is_poison(bad: object) -> None:
    parsed = parse_entry({"job": json.dumps(_job(run_trigger=bad))})
    assert isinstance(parsed, Poison) and parsed.reason == "INVALID_FIELDS"


# -- through serve --http --workers 1 --------------------------------------------------------


def _envelope(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "legacy", "team_id": TEAM_ID, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
    }  # fmt: skip


def _records(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for file in sorted(path.glob("*.jsonl"))
        for line in file.read_text("utf-8").splitlines()
    ]


async def _audited(path: Path, count: int, within: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within
    while True:
        records = await asyncio.to_thread(_records, path)
        runs = [r for r in records if r.get("kind") == "diagnosis"]
        if len(runs) >= count or time.monotonic() > deadline:
            return runs
        await asyncio.sleep(0.2)


async def _serve(server: OwnRedis, slack: RecordingSlackApi, base_url: str, tmp_path: Path) -> Any:
    env = serve_env(
        tmp_path,
        DIAG_SLACK_API_URL=slack.base_url,
        OPENAI_BASE_URL=base_url,
        DIAG_REDIS_URL=server.url,
        DIAG_ALERT_SOURCES=ALERT_BOT,
    )
    port = free_port()
    front = await ServeProcess.start(env, tmp_path, http=True, port=port, extra=["--workers", "1"])
    await wait_status(f"http://127.0.0.1:{port}/readyz", 200)
    return front, port


async def test_alert_and_shortcut_runs_through_the_worker_queue(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False)) for _ in range(2)])
    alert_ts, posted_ts = new_ts(), new_ts()
    alert = {"type": "message", "subtype": "bot_message", "bot_id": ALERT_BOT,
             "text": "DiskFull /var 97% on node-3", "ts": alert_ts, "channel": ADMIN}  # fmt: skip
    shortcut = {
        "type": "message_action", "callback_id": "diagnose_message", "trigger_id": "1.2.3",
        "user": {"id": "U0ONCALL1"}, "team": {"id": TEAM_ID}, "api_app_id": APP_ID,
        "channel": {"id": ADMIN}, "message_ts": posted_ts,
        "message": {"type": "message", "user": "U0DEV", "text": "why is checkout slow?",
                    "ts": posted_ts},
    }  # fmt: skip
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack, own_redis(tmp_path) as server:
        front, port = await _serve(server, slack, model.base_url, tmp_path)
        try:
            assert await post_signed(port, _envelope(alert)) == 200
            assert await post_signed(port, shortcut, form=True) == 200
            runs = await _audited(tmp_path / "audit", 2)
            front.send(signal.SIGTERM)  # the front stops its worker; a SIGKILL would orphan it
            assert await front.wait_exit() == 0
        finally:
            await front.aclose()
    assert sorted(r["trigger"] for r in runs) == ["alert", "shortcut"]
    answered = {m["thread_ts"] for m in slack.messages if m.get("metadata")}
    assert answered == {alert_ts, posted_ts}
