"""The "Diagnose this" message shortcut (CONTRACTS §10), end to end through signed
``message_action`` payloads, the recording Slack and the scripted model: the Query is the
message's visible text as posted (attachments and fields flattened, never cut), ``asked_at`` its
``ts``, the answer in its thread; over the byte limit one visible line and no run; outside an
admin channel an ephemeral refusal and no run; hostile alert text reaches the model as data and
nothing of it is posted back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sre_diag.contract.request import format_asked_at, slack_ts_moment
from sre_diag.doubles.recording_slack import BOT_ID
from tests.conftest import StartServer
from tests.harness.support import audit_records, draft_json, final_step
from tests.slack.alert_support import ALERT_BOT, asked, diagnose, new_ts, queries
from tests.slack.support import OTHER, slack_rig

HOSTILE = (
    "<!channel> *URGENT* <@U0ALICE99> click <https://evil.example|here> "
    "\u202egnp.exe\u202c ~x~ `code` &amp; @here"
)


def _alertmanager(ts: str, text: str = "payment-api 5xx above 5% since 10:05") -> dict[str, Any]:
    return {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": ALERT_BOT,
        "username": "Alertmanager",
        "text": "",
        "ts": ts,
        "attachments": [
            {
                "fallback": "[FIRING:1] PaymentApi5xxHigh",
                "title": "[FIRING:1] PaymentApi5xxHigh payment-api (critical)",
                "text": text,
                "fields": [
                    {"title": "service", "value": "payment-api", "short": True},
                    {"title": "instance", "value": "10.0.3.17:8080", "short": True},
                ],
            }
        ],
    }


async def test_a_bot_message_is_diagnosed_in_its_thread_with_its_flattened_text(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    ts = new_ts()
    async with slack_rig(model, tmp_path) as rig:
        response = await diagnose(rig, _alertmanager(ts))
        assert response.status == 200
        await rig.handle.manager.wait_idle()
        [answer] = rig.answers()
        metrics = rig.handle.metrics.render().decode()
    expected = (
        "[FIRING:1] PaymentApi5xxHigh payment-api (critical)\n"
        "payment-api 5xx above 5% since 10:05\n"
        "service: payment-api\ninstance: 10.0.3.17:8080"
    )
    assert queries(model) == [expected]
    moment = slack_ts_moment(ts)
    assert moment is not None
    assert asked(model)[0]["asked_at"] == format_asked_at(moment)
    assert answer["thread_ts"] == ts
    assert answer["metadata"]["event_payload"]["turn"]["query"] == expected
    [record] = [r for r in audit_records(tmp_path) if r.get("kind") == "diagnosis"]
    assert record["trigger"] == "shortcut"
    assert (
        'diag_runs_total{outcome="DRAFT",reason="NO_CONCLUSION",trigger="shortcut"} 1.0' in metrics
    )
    assert 'diag_slack_events_total{reason="SHORTCUT",result="accepted"} 1.0' in metrics


async def test_a_reply_in_a_thread_is_answered_in_that_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    root, reply = new_ts(), new_ts()
    message = {"type": "message", "user": "U0ONCALL1", "text": "why 5xx?", "ts": reply,
               "thread_ts": root}  # fmt: skip
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, message)
        await rig.handle.manager.wait_idle()
        [answer] = rig.answers()
    assert answer["thread_ts"] == root
    assert queries(model) == ["why 5xx?"]


async def test_over_the_byte_limit_one_visible_line_and_no_run(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    ts = new_ts()
    text = "订单" * 700  # 4200 bytes of UTF-8 for 1400 characters
    async with slack_rig(model, tmp_path) as rig:
        assert (await diagnose(rig, _alertmanager(ts, text))).status == 200
        await rig.handle.manager.wait_idle()
        posts = rig.posts()
    assert model.request_count == 0
    [refusal] = posts
    assert refusal["thread_ts"] == ts and "\n" not in refusal["text"]
    assert "4,096" in refusal["text"] and "nothing was cut" in refusal["text"]
    assert "订单" not in refusal["text"]


async def test_at_the_byte_limit_it_runs_uncut(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    text = "é" * 2048  # exactly 4096 bytes
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, {"type": "message", "user": "U1", "text": text, "ts": new_ts()})
        await rig.handle.manager.wait_idle()
    assert queries(model) == [text]


async def test_outside_an_admin_channel_an_ephemeral_refusal_and_no_run(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path) as rig:
        response = await diagnose(rig, _alertmanager(new_ts()), channel=OTHER, user="U0ONCALL1")
        assert response.status == 200
        await rig.handle.manager.wait_idle()
        ephemeral = rig.slack.calls_of("chat.postEphemeral")
        assert rig.posts() == []
    assert model.request_count == 0
    [note] = ephemeral
    assert note.params["channel"] == OTHER and note.params["user"] == "U0ONCALL1"
    assert "cannot diagnose messages in this channel" in note.params["text"]


async def test_on_one_of_our_own_answers_it_points_to_replay(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    own = {"type": "message", "bot_id": BOT_ID, "text": "Diagnosis …", "ts": new_ts()}
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, own)
        await rig.handle.manager.wait_idle()
        notes = [c.params["text"] for c in rig.slack.calls_of("chat.postEphemeral")]
    assert model.request_count == 0
    assert any("Replay diagnosis" in n for n in notes)


async def test_a_message_without_text_is_refused_visibly(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    ts = new_ts()
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, {"type": "message", "user": "U1", "text": "", "ts": ts, "files": []})
        await rig.handle.manager.wait_idle()
        [refusal] = rig.posts()
    assert model.request_count == 0 and refusal["thread_ts"] == ts


async def test_malformed_payloads_are_acknowledged_and_dropped(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path) as rig:
        for message in ({"text": "no ts"}, {"ts": "12", "text": "bad ts"}, {"ts": 1.5}):
            assert (await diagnose(rig, message)).status == 200
        assert await rig.interact({"type": "message_action", "callback_id": "diagnose_message"})
        await rig.handle.manager.wait_idle()
        assert rig.posts() == []
    assert model.request_count == 0


async def test_hostile_alert_text_reaches_the_model_as_data_and_stays_inert(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    ts = new_ts()
    message = _alertmanager(ts, HOSTILE)
    message["attachments"][0]["fields"].append({"title": "<!here>", "value": HOSTILE})
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, message)
        await rig.handle.manager.wait_idle()
        shown = [
            json.dumps([c.params.get("text"), c.params.get("blocks")], ensure_ascii=False)
            for c in rig.slack.calls
            if c.method in {"chat.postMessage", "chat.update", "chat.postEphemeral"}
        ]
    [query] = queries(model)
    assert HOSTILE in query and f"<!here>: {HOSTILE}" in query  # verbatim to the model
    assert shown
    for raw in ("<!channel>", "<!here>", "<@U0ALICE99>", "https://evil.example", "\u202e"):
        assert not any(raw in s for s in shown), raw
