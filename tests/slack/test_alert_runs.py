"""Automatic runs on alert bots' messages (CONTRACTS §10), end to end through signed ``message``
events: a new top-level message of a ``DIAG_ALERT_SOURCES`` bot or app in an admin channel is
diagnosed in its thread; edits, deletions, thread replies, other bots, people (also one who
names a source as their username) and Slack's retries start nothing, and every one of them is
acknowledged; an alert whose pattern started a run within the cooldown gets a one-line pointer,
a new run after it; the runs share the concurrency limit and the queue (and its position) with
mentions; a mention in the alert's thread is a follow-up with the frozen previous turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sre_diag.doubles.recording_slack import BOT_ID, BOT_USER_ID
from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import audit_records, draft_json, final_step
from tests.slack.alert_support import ALERT_APP, ALERT_BOT, alert_event, asked, new_ts, queries
from tests.slack.support import OTHER, blocks_of, slack_rig

SOURCES = {"DIAG_ALERT_SOURCES": f"{ALERT_BOT}, A0GRAFANA1"}
FIRING = [
    {
        "title": "[FIRING:1] HighLatency web-17 (critical)",
        "text": "p99 1834ms on 10.0.3.17 since 10:05",
        "fields": [{"title": "instance", "value": "web-17:8080"}],
    }
]


def _firing(host: str, p99: int, count: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "title": f"[FIRING:{count}] HighLatency {host} (critical)",
            "text": f"p99 {p99}ms on 10.0.3.{p99 % 250} since 10:05",
            "fields": [{"title": "instance", "value": f"{host}:8080"}],
        }
    ]


async def test_a_source_bots_new_message_is_diagnosed_in_its_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    ts = new_ts()
    async with slack_rig(model, tmp_path, **SOURCES) as rig:
        assert (await alert_event(rig, attachments=FIRING, ts=ts)).status == 200
        await rig.handle.manager.wait_idle()
        [answer] = rig.answers()
        status = rig.posts()[0]
        metrics = rig.handle.metrics.render().decode()
    assert queries(model) == [
        "[FIRING:1] HighLatency web-17 (critical)\np99 1834ms on 10.0.3.17 since 10:05\n"
        "instance: web-17:8080"
    ]
    assert answer["thread_ts"] == ts and status["thread_ts"] == ts
    assert any(b["type"] == "actions" for b in blocks_of(status))  # progress with Cancel
    assert asked(model)[0]["previous_turn"] is None
    [record] = [r for r in audit_records(tmp_path) if r.get("kind") == "diagnosis"]
    assert record["trigger"] == "alert"
    assert 'reason="NO_CONCLUSION",trigger="alert"} 1.0' in metrics
    assert 'diag_slack_events_total{reason="ALERT",result="accepted"} 1.0' in metrics


async def test_an_app_id_source_and_a_modern_bot_message_without_subtype(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path, DIAG_ALERT_SOURCES=ALERT_APP) as rig:
        await alert_event(rig, text="DiskFull node-3", subtype=None, bot_id="B0ANYBOT01")
        await rig.handle.manager.wait_idle()
    assert queries(model) == ["DiskFull node-3"]


@pytest.mark.parametrize(
    "fields",
    [
        {"subtype": "message_changed", "message": {"text": "edited", "bot_id": ALERT_BOT}},
        {"edited": {"user": ALERT_BOT, "ts": "1764300001.000001"}},
        {"subtype": "message_deleted", "deleted_ts": "1764300000.000001"},
        {"thread_ts": "1764299000.000001"},
        {"bot_id": "B0OTHERBOT", "app_id": "A0OTHERAPP"},
        {"bot_id": BOT_ID},  # our own
        {"bot_id": None, "app_id": None, "subtype": None, "user": "U0MALLORY",
         "username": ALERT_BOT},  # a person whose name spoofs a source
        {"bot_id": None, "subtype": None, "user": "U0MALLORY", "app_id": ALERT_APP},
        {"channel": OTHER},
        {"subtype": "channel_join", "user": "U0NEW"},
    ],
)  # fmt: skip
async def test_no_run_and_an_ack_for_everything_else(
    model_server: StartServer, tmp_path: Path, fields: dict[str, Any]
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path, DIAG_ALERT_SOURCES=f"{ALERT_BOT},{ALERT_APP}") as rig:
        response = await alert_event(rig, attachments=FIRING, **fields)
        assert response.status == 200
        await rig.handle.manager.wait_idle()
        assert rig.posts() == []
    assert model.request_count == 0


async def test_without_sources_messages_are_acknowledged_and_ignored(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path) as rig:
        assert (await alert_event(rig, attachments=FIRING)).status == 200
        person = await alert_event(rig, text="hi", bot_id=None, subtype=None, user="U1")
        assert person.status == 200
        await rig.handle.manager.wait_idle()
        assert rig.posts() == []


async def test_slack_retries_and_duplicate_deliveries_run_once(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path, **SOURCES) as rig:
        ts = new_ts()
        await alert_event(rig, attachments=FIRING, ts=ts, event_id="Ev0ALERT01")
        await alert_event(rig, attachments=FIRING, ts=ts, event_id="Ev0ALERT01")
        await alert_event(rig, attachments=FIRING, ts=ts, event_id="Ev0ALERT01", retry_num="1")
        await rig.handle.manager.wait_idle()
        assert len(rig.answers()) == 1


async def test_the_cooldown_points_to_the_earlier_thread_then_lets_a_new_run_through(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False)) for _ in range(3)])
    first, storm, other, later = new_ts(), new_ts(), new_ts(), new_ts()
    async with slack_rig(model, tmp_path, DIAG_ALERT_COOLDOWN_SECONDS="2", **SOURCES) as rig:
        await alert_event(rig, attachments=_firing("web-17", 1834), ts=first)
        await rig.handle.manager.wait_idle()
        # Same alert, other host, numbers and count: pointed to the first thread.
        await alert_event(rig, attachments=_firing("web-02", 912, count=3), ts=storm)
        # Another alert in the same window runs.
        await alert_event(rig, text="DiskFull /var 97% on node-3", ts=other)
        await rig.handle.manager.wait_idle()
        pointer = rig.thread_texts(storm)
        assert len(rig.answers()) == 2
        await asyncio.sleep(2.2)
        await alert_event(rig, attachments=_firing("web-09", 700), ts=later)
        await rig.handle.manager.wait_idle()
        answered = [a["thread_ts"] for a in rig.answers()]
        metrics = rig.handle.metrics.render().decode()
    [line] = pointer
    assert "\n" not in line and first in line and "cooldown" in line
    assert answered == [first, other, later]
    assert 'diag_slack_events_total{reason="ALERT_COOLDOWN",result="ignored"} 1.0' in metrics


async def test_a_refused_alert_does_not_hold_the_cooldown(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    big, small = new_ts(), new_ts()
    async with slack_rig(model, tmp_path, DIAG_MAX_QUERY_BYTES="64", **SOURCES) as rig:
        await alert_event(rig, text="HighLatency web-17 " + "x" * 80, ts=big)
        await alert_event(rig, text="HighLatency web-17 " + "x" * 30, ts=small)
        await rig.handle.manager.wait_idle()
        [refusal] = rig.thread_texts(big)
        [answer] = rig.answers()
    assert "DIAG_MAX_QUERY_BYTES" in refusal and answer["thread_ts"] == small


async def test_alerts_share_the_concurrency_limit_and_show_their_queue_position(
    model_server: StartServer, tmp_path: Path
) -> None:
    slow = ModelStep(content=draft_json(conclusion=False), delay_seconds=0.5)
    model = await model_server([slow, *(final_step(draft_json(conclusion=False)),) * 2])
    second, third = new_ts(), new_ts()
    async with slack_rig(model, tmp_path, DIAG_MAX_CONCURRENT_RUNS="1", **SOURCES) as rig:
        await rig.mention(f"<@{BOT_USER_ID}> first", ts=new_ts())
        await model.wait_for_requests(1)
        await alert_event(rig, text="HighLatency web-17", ts=second)
        await alert_event(rig, text="DiskFull node-3", ts=third)
        await asyncio.sleep(0.2)
        assert model.request_count == 1  # the mention holds the only slot
        assert rig.handle.manager.in_flight == 3
        statuses = {p["thread_ts"]: p["text"] for p in rig.posts()}
        await rig.handle.manager.wait_idle()
        assert len(rig.answers()) == 3
    assert statuses[second] == "Starting: next in line"
    assert statuses[third] == "Queued · Waiting: 1 diagnosis ahead"


async def test_a_mention_in_the_alerts_thread_is_a_follow_up(
    model_server: StartServer, tmp_path: Path
) -> None:
    draft = json.loads(draft_json(conclusion=False))
    draft["limitations"]["missing_info"] = ["the deploy log of web-17"]
    model = await model_server(
        [final_step(json.dumps(draft)), final_step(draft_json(conclusion=False))]
    )
    ts = new_ts()
    async with slack_rig(model, tmp_path, **SOURCES) as rig:
        await alert_event(rig, attachments=FIRING, ts=ts)
        await rig.handle.manager.wait_idle()
        await rig.mention(f"<@{BOT_USER_ID}> and since 10:20?", thread_ts=ts, ts=new_ts())
        await rig.handle.manager.wait_idle()
        assert [a["thread_ts"] for a in rig.answers()] == [ts, ts]
    follow_up = asked(model)[1]
    assert follow_up["query"] == "and since 10:20?"
    assert follow_up["previous_turn"] == {
        "query": queries(model)[0],
        "conclusion": None,
        "missing_info": ["the deploy log of web-17"],
    }
    triggers = [r["trigger"] for r in audit_records(tmp_path) if r.get("kind") == "diagnosis"]
    assert sorted(triggers) == ["alert", "mention"]
