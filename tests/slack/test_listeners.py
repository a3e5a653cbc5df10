"""The Slack edge end to end: signed requests through ``app.async_dispatch``, a recording Slack
Web API, the scripted model server and the real harness.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.support import ABSENT, ADMIN, OTHER, SlackRig, slack_rig

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05 UTC, order ord_10231"


def cancel_payload(run_key: str, channel: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": "UHUMAN01"},
        "team": {"id": "T00000001"},
        "api_app_id": "A00000001",
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel},
        "trigger_id": "1.2.3",
        "actions": [
            {
                "type": "button",
                "action_id": "diag_cancel",
                "block_id": "b",
                "value": run_key,
                "action_ts": "1764300001.000001",
            }
        ],
    }


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


async def test_happy_path_in_a_thread(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    async with slack_rig(model, tmp_path) as rig:
        response = await rig.mention(QUESTION, ts="1764300000.000100")
        assert response.status == 200
        await rig.handle.manager.wait_idle()
        posts = rig.posts()
        status, answer = posts[0], posts[-1]
        assert status["thread_ts"] == answer["thread_ts"] == "1764300000.000100"
        assert buttons(
            json.loads(status["blocks"]) if isinstance(status["blocks"], str) else status["blocks"]
        )
        metadata = answer["metadata"]
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        assert metadata["event_type"] == "diag_turn"
        assert (
            metadata["event_payload"]["turn"]["query"]
            == "payment-api 5xx since 10:05 UTC, order ord_10231"
        )
        assert answer["text"]
        # The model got the query with mentions stripped, verbatim otherwise.
        user = next(m for m in model.requests[0]["messages"] if m["role"] == "user")
        assert (
            json.loads(user["content"])["query"]
            == "payment-api 5xx since 10:05 UTC, order ord_10231"
        )
        # The status message ended in a final state without the Cancel button.
        final_status = rig.slack.calls_of("chat.update")[-1].params
        blocks = final_status["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        assert not buttons(blocks)


async def test_follow_up_carries_exactly_the_frozen_previous_turn(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [
            final_step(draft_json(conclusion=False)),
            final_step(draft_json(conclusion=False)),
        ]
    )
    async with slack_rig(model, tmp_path) as rig:
        root = "1764300000.000200"
        rig.slack.seed_message(ADMIN, ts=root, text=QUESTION, user="UHUMAN01")
        # Noise in the thread that must never reach the model.
        rig.slack.seed_message(
            ADMIN, ts="1764300000.000250", thread_ts=root, text="raw chatter", user="U2"
        )
        await rig.mention(QUESTION, ts=root)
        await rig.handle.manager.wait_idle()
        await rig.mention(
            "<@UDIAG0001> the window is 10:00–10:30 UTC", thread_ts=root, ts="1764300600.000300"
        )
        await rig.handle.manager.wait_idle()
    second = json.loads(
        next(m for m in model.requests[1]["messages"] if m["role"] == "user")["content"]
    )
    assert second == {
        "query": "the window is 10:00–10:30 UTC",
        "previous_turn": {
            "query": "payment-api 5xx since 10:05 UTC, order ord_10231",
            "conclusion": None,
            "missing_info": ["需要服务名、时间窗口和错误特征"],
        },
        # when the follow-up was asked: its message ts (1764300600 = 2025-11-28 03:30 UTC)
        "asked_at": "2025-11-28T03:30:00Z",
    }
    first = json.loads(
        next(m for m in model.requests[0]["messages"] if m["role"] == "user")["content"]
    )
    assert first["asked_at"] == "2025-11-28T03:20:00Z"
    assert "raw chatter" not in json.dumps(model.requests)


async def test_ignored_events_produce_no_run_and_no_post(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path) as rig:
        cases = [
            await rig.mention(QUESTION, channel=OTHER),
            await rig.mention(QUESTION, channel="D0DIRECT1", channel_type="im"),
            await rig.mention(QUESTION, bot_id="BOTHER01"),
            await rig.mention(QUESTION, edited={"user": "UHUMAN01", "ts": "1"}),
            await rig.mention(QUESTION, retry_num="1"),
            await rig.mention(QUESTION, ts=ABSENT),
        ]
        await rig.handle.manager.wait_idle()
        assert [r.status for r in cases] == [200] * 6
        assert model.request_count == 0
        assert rig.posts() == []
        # A first delivery over Socket Mode carries retry number 0: it is served.
        first = await rig.mention(QUESTION, event_id="EvDUP0001", retry_num="0")
        duplicate = await rig.mention(QUESTION, event_id="EvDUP0001")
        await rig.handle.manager.wait_idle()
        assert (first.status, duplicate.status) == (200, 200)
        assert model.request_count == 1
        assert len(rig.answers()) == 1
        assert [r.value for r in rig.handle.listeners.ignored] == [
            "NOT_ADMIN_CHANNEL",
            "DIRECT_MESSAGE",
            "FROM_BOT",
            "EDITED",
            "SLACK_RETRY",
            "MALFORMED",
            "DUPLICATE_EVENT",
        ]


async def _status_run_key(rig: SlackRig) -> str:
    for _ in range(200):
        if rig.posts():
            blocks = rig.posts()[0]["blocks"]
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
            found = buttons(blocks)
            if found:
                return str(found[0]["value"])
        await asyncio.sleep(0.01)
    raise AssertionError("no status message with a Cancel button")


async def test_cancel_button_stops_the_run(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            ModelStep(content="x", delay_seconds=30),
        ]
    )
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION)
        run_key = await _status_run_key(rig)
        await model.wait_for_requests(2)
        ignored = await rig.interact(cancel_payload(run_key, OTHER))
        assert ignored.status == 200
        assert rig.handle.manager.in_flight == 1  # a click from another channel does nothing
        clicked = await rig.interact(cancel_payload(run_key, ADMIN))
        assert clicked.status == 200
        await rig.handle.manager.wait_idle()
        result = rig.handle.manager.completed[-1]
        assert (result.outcome.value, result.stop_reason and result.stop_reason.value) == (
            "STOPPED",
            "CANCELLED",
        )
        assert len(rig.answers()) == 1
        assert "cancelled" in rig.answers()[0]["text"].lower()
        assert model.aborted == 1


async def test_concurrency_limit_queues_and_one_run_per_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [
            ModelStep(content=draft_json(conclusion=False), delay_seconds=0.5),
            final_step(draft_json(conclusion=False)),
        ]
    )
    async with slack_rig(model, tmp_path, DIAG_MAX_CONCURRENT_RUNS="1") as rig:
        await rig.mention(QUESTION, ts="1764300000.000301")
        await model.wait_for_requests(1)
        await rig.mention(QUESTION, ts="1764300000.000302")  # another thread: queued
        await rig.mention(QUESTION, thread_ts="1764300000.000301")  # busy thread: declined
        await asyncio.sleep(0.2)
        # The first run still holds the only slot: the second has not reached the model.
        assert model.request_count == 1
        assert rig.handle.manager.in_flight == 2
        second_thread = [
            json.dumps(c.params)
            for c in rig.slack.calls_of("chat.postMessage")
            if c.params.get("thread_ts") == "1764300000.000302"
        ]
        assert len(second_thread) == 1 and "Starting: next in line" in second_thread[0]
        busy = [
            c.params.get("text", "")
            for c in rig.slack.calls_of("chat.postMessage")
            if c.params.get("thread_ts") == "1764300000.000301"
        ]
        assert any("already running in this thread" in t for t in busy)
        await rig.handle.manager.wait_idle()
        assert model.request_count == 2
        assert len(rig.answers()) == 2


async def test_rate_limited_post_is_retried(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", status=429, error="ratelimited", retry_after=0, times=1)
        await rig.mention(QUESTION)
        await rig.handle.manager.wait_idle()
        assert len(rig.slack.calls_of("chat.postMessage")) == 3  # 429, status retried, answer
        assert len(rig.answers()) == 1


async def test_slack_failure_keeps_the_audit_and_the_process(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [final_step(draft_json(conclusion=False)), final_step(draft_json(conclusion=False))]
    )
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", error="invalid_auth", times=2)
        await rig.mention(QUESTION)
        await rig.handle.manager.wait_idle()
        assert rig.answers() == []
        audit = (tmp_path / "audit").glob("*.jsonl")
        assert sum(len(p.read_text().splitlines()) for p in audit) == 1
        await rig.mention(QUESTION)  # the process still serves the next mention
        await rig.handle.manager.wait_idle()
        assert len(rig.answers()) == 1


async def test_hostile_model_text_renders_escaped(
    model_server: StartServer, tmp_path: Path
) -> None:
    hostile = json.loads(draft_json(conclusion=False))
    hostile["analysis"][0]["statement"] = (
        "<!channel> <@U0ADMIN> @here see <https://evil.example|docs>"
    )
    model = await model_server([final_step(json.dumps(hostile))])
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION)
        await rig.handle.manager.wait_idle()
        answer = rig.answers()[0]
        rendered = json.dumps(answer["blocks"]) + answer["text"]
        assert "<!channel>" not in rendered and "<@U0ADMIN>" not in rendered
        assert "<https://evil" not in rendered
        assert "&lt;!channel&gt;" in rendered


async def test_blank_question_gets_a_polite_reply(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention("<@UDIAG0001>   ")
        await rig.handle.manager.wait_idle()
        assert model.request_count == 0
        assert any("Mention me with a question" in p.get("text", "") for p in rig.posts())


async def test_replay_shortcut_reruns_the_recorded_question(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [final_step(draft_json(conclusion=False)), final_step(draft_json(conclusion=False))]
    )
    async with slack_rig(model, tmp_path) as rig:
        root = "1764300000.000400"
        await rig.mention(QUESTION, ts=root)
        await rig.handle.manager.wait_idle()
        answer = rig.answers()[0]
        shortcut = {
            "type": "message_action",
            "callback_id": "replay_diagnosis",
            "trigger_id": "1.2.3",
            "user": {"id": "UHUMAN01"},
            "team": {"id": "T00000001"},
            "api_app_id": "A00000001",
            "channel": {"id": ADMIN},
            "message_ts": answer["ts"],
            "message": {
                "type": "message",
                "ts": answer["ts"],
                "thread_ts": root,
                "bot_id": answer["bot_id"],
                "text": answer["text"],
            },
        }
        outside = await rig.interact({**shortcut, "channel": {"id": OTHER}})
        assert outside.status == 200
        response = await rig.interact(shortcut)
        assert response.status == 200
        await rig.handle.manager.wait_idle()
        assert model.request_count == 2
        first = [m for m in model.requests[0]["messages"] if m["role"] == "user"]
        second = [m for m in model.requests[1]["messages"] if m["role"] == "user"]
        assert first == second  # the same question, with the same (absent) previous turn
        replay = rig.answers()[-1]
        assert "replay" in (json.dumps(replay["blocks"]) + replay["text"]).lower()
