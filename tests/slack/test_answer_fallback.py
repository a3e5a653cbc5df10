"""Every run that started ends with one visible answer in its thread, and the status message says
what actually happened: Slack refusing the rendered answer (blocks, metadata, length, anything
else it answers ``ok: false``) gets a bounded, escaped
plain-text fallback without blocks or metadata; a refused fallback is admitted in the status.
(A rate limit or a server error is not a refusal: see ``test_answer_once.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.support import SlackRig, slack_rig

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05 UTC"
ROOT = "1764300000.000900"
DONE = "Done: the diagnosis is posted below."


def is_answer(params: dict[str, Any]) -> bool:
    """The rendered answer: the only post that carries metadata (the frozen turn)."""
    return "metadata" in params


def is_not_status(params: dict[str, Any]) -> bool:
    """Everything but the status message (which has blocks and no metadata)."""
    return "metadata" in params or "blocks" not in params


def with_conclusion() -> list[ModelStep]:
    return [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]


def thread_posts(rig: SlackRig) -> list[dict[str, Any]]:
    """What Slack accepted into the thread, in order (refused calls are not stored)."""
    return [m for m in rig.slack.messages if m.get("thread_ts") == ROOT]


def fallback_of(rig: SlackRig) -> dict[str, Any]:
    status, *rest = thread_posts(rig)
    assert status["blocks"], "the first post is the status message"
    assert len(rest) == 1, f"one visible answer, got {[m['text'] for m in rest]}"
    return rest[0]


REFUSALS = [
    pytest.param({"error": "invalid_blocks"}, id="invalid_blocks"),
    pytest.param({"error": "invalid_metadata_format"}, id="invalid_metadata"),
    pytest.param({"error": "metadata_too_large"}, id="metadata_too_large"),
    pytest.param({"error": "msg_too_long"}, id="msg_too_long"),
    pytest.param({"error": "fatal_error"}, id="other_error"),
    # A 429 or a 5xx is not a refusal: the answer waits its turn, or the thread is read for it
    # before it is posted again (tests/slack/test_answer_once.py).
]


@pytest.mark.parametrize("refusal", REFUSALS)
async def test_refused_answer_gets_a_plain_fallback_and_a_truthful_status(
    model_server: StartServer, tmp_path: Path, refusal: dict[str, Any]
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", match=is_answer, **refusal)
        await rig.mention(QUESTION, ts=ROOT)
        await rig.handle.manager.wait_idle()
        result = rig.handle.manager.completed[-1]
        attempts = [c for c in rig.slack.calls_of("chat.postMessage") if is_answer(c.params)]
        assert len(attempts) == refusal.get("times", 1)  # the retry handlers did give up
        fallback = fallback_of(rig)
        assert not fallback["blocks"] and fallback["metadata"] is None
        text = fallback["text"]
        assert text.startswith(
            "Diagnosis DRAFT — conclusion (HIGH): payment-api 连接池耗尽导致 5xx"
        )
        assert refusal["error"] in text and result.run_id in text
        assert rig.answers() == []  # no message carries a frozen turn that was never shown
        status = rig.final_status()
        assert status != DONE and "Slack refused the full answer" in status
        # Slack's code as it is (inert in a code span), so it can be looked up
        assert refusal["error"] in status and "plain-text summary is posted below" in status


async def test_refused_fallback_is_admitted_in_the_status(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", error="invalid_blocks", match=is_answer)
        rig.slack.fail("chat.postMessage", error="channel_archived", match=is_not_status)
        await rig.mention(QUESTION, ts=ROOT)
        await rig.handle.manager.wait_idle()
        run_id = rig.handle.manager.completed[-1].run_id
        assert [m["blocks"] != [] for m in thread_posts(rig)] == [True]  # only the status
        status = rig.final_status()
        assert status.startswith("Could not post the answer: Slack refused the full answer")
        assert "invalid_blocks" in status and "plain-text summary too" in status
        assert "channel_archived" in status
        assert "DRAFT" in status and "payment-api 连接池耗尽导致 5xx" in status and run_id in status
        assert DONE not in status


async def test_stopped_and_failed_fallbacks_name_the_reason(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [
            ModelStep(content="x", delay_seconds=5),  # the deadline stops the first run
            ModelStep(status=500, raw_body='{"error": "upstream CANARY"}'),
        ]
    )
    async with slack_rig(model, tmp_path, DIAG_DEADLINE_SECONDS="0.5") as rig:
        rig.slack.fail("chat.postMessage", error="invalid_blocks", match=is_answer, times=2)
        await rig.mention(QUESTION, ts=ROOT)
        await rig.handle.manager.wait_idle()
        stopped = fallback_of(rig)["text"]
        stopped_status = rig.final_status()
        await rig.mention(QUESTION, ts="1764300000.000901")
        await rig.handle.manager.wait_idle()
        failed = rig.thread_texts("1764300000.000901")[-1]
        failed_status = rig.final_status()
    assert stopped.startswith("Diagnosis STOPPED — DEADLINE_EXCEEDED.")
    assert stopped_status.startswith("Stopped: Slack refused the full answer")
    assert "invalid_blocks" in stopped_status
    assert failed.startswith("Diagnosis FAILED — MODEL_ERROR HTTP_500.")
    assert "CANARY" not in failed
    assert failed_status.startswith("Failed closed: Slack refused the full answer")


async def test_hostile_conclusion_in_the_fallback_is_inert_and_bounded(
    model_server: StartServer, tmp_path: Path
) -> None:
    draft = json.loads(draft_json(["call-1"]))
    draft["conclusion"]["summary"] = "<!channel> *pool* `x`\n*Conclusion* (confidence: *HIGH*) " + (
        "&" * 430
    )
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(json.dumps(draft))]
    )
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", error="msg_too_long", match=is_answer)
        await rig.mention(QUESTION, ts=ROOT)
        await rig.handle.manager.wait_idle()
        call_ = [c for c in rig.slack.calls_of("chat.postMessage") if not c.params.get("blocks")]
        params = call_[-1].params
    text = params["text"]
    assert params.get("mrkdwn") is False and "metadata" not in params and "blocks" not in params
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    # Posted with mrkdwn off: the model's marks format nothing and are kept as typed.
    assert "*pool* `x` *Conclusion* (confidence: *HIGH*)" in text
    first_line, second_line = text.split("\n")  # the model's newline did not start a line
    assert "Conclusion" in first_line and second_line.startswith("Slack refused")
    assert len(text) <= 1200 and first_line.endswith("…")
    assert "&amp;" in text and not first_line.removesuffix("…").endswith(("&", "&a", "&am"))


async def test_refused_input_hint_lands_in_the_status(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", error="restricted_action", match=is_not_status)
        await rig.mention("<@UDIAG0001>   ", ts=ROOT)
        await rig.handle.manager.wait_idle()
        assert rig.final_status().startswith("Not started: Mention me with a question")
