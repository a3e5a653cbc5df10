"""Exactly one final answer per run, whatever Slack does with the post (CONTRACTS §10).

Slack may store the answer and still leave its poster without a reply: the reply comes after the
client's timeout, a 503 comes after the message was stored, the connection drops. The poster then
reads the thread for the run id its answer carries before it posts anything again: it finds the
answer and stops (no second copy, no plain fallback beside it). When the failure came before the
message was stored, the thread shows no answer and the post is made again — once. A 429 waits its
``Retry-After`` and is posted again within the answer's deadline, never dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.slack.support import SlackRig, slack_rig
from tests.slack.test_answer_fallback import QUESTION, ROOT, is_answer, with_conclusion

DONE = "Done: the diagnosis is posted below."


def thread_answers(rig: SlackRig) -> list[dict[str, Any]]:
    """Every message in the thread but the status message: answers and fallbacks alike."""
    return [
        m
        for m in rig.slack.messages
        if m.get("thread_ts") == ROOT and (m.get("metadata") or "Run " in str(m.get("text")))
    ]


async def run_once(rig: SlackRig) -> str:
    await rig.mention(QUESTION, ts=ROOT)
    await rig.handle.manager.wait_idle()
    return rig.handle.manager.completed[-1].run_id


def assert_one_full_answer(rig: SlackRig, run_id: str) -> None:
    answers = thread_answers(rig)
    assert len(answers) == 1, [m["text"][:60] for m in answers]
    assert answers[0]["metadata"]["event_payload"]["run_id"] == run_id
    assert rig.final_status() == DONE


def answer_posts(rig: SlackRig) -> int:
    return len([c for c in rig.slack.calls_of("chat.postMessage") if is_answer(c.params)])


def thread_reads(rig: SlackRig) -> int:
    return len(rig.slack.calls_of("conversations.replies"))


async def test_a_reply_after_the_client_timeout_leaves_one_answer(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path, client_timeout=1) as rig:
        # Slack stores the answer and replies after 2 s: the client gave up after 1 s (in
        # production: 35 s against the SDK's 30 s).
        rig.slack.delay("chat.postMessage", 2.0, match=is_answer)
        reads_before = thread_reads(rig)
        run_id = await run_once(rig)
        assert_one_full_answer(rig, run_id)
        assert answer_posts(rig) == 1
        assert thread_reads(rig) > reads_before


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_5xx_after_store_leaves_one_answer(
    model_server: StartServer, tmp_path: Path, status: int
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail(
            "chat.postMessage", status=status, error="service_unavailable", match=is_answer,
            after_store=True,
        )  # fmt: skip
        run_id = await run_once(rig)
        assert_one_full_answer(rig, run_id)
        assert answer_posts(rig) == 1  # no retry handler posted it again


async def test_a_connection_dropped_after_store_leaves_one_answer(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.drop("chat.postMessage", match=is_answer, after_store=True)
        run_id = await run_once(rig)
        assert_one_full_answer(rig, run_id)
        assert answer_posts(rig) == 1


@pytest.mark.parametrize("fault", ["503", "drop", "timeout"])
async def test_a_failure_before_store_is_posted_again_once(
    model_server: StartServer, tmp_path: Path, fault: str
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path, client_timeout=1) as rig:
        if fault == "503":
            rig.slack.fail("chat.postMessage", status=503, match=is_answer, times=2)
        elif fault == "drop":
            rig.slack.drop("chat.postMessage", match=is_answer, after_store=False, times=2)
        else:
            # Slack holds the post past the client's timeout and stores it only then: the
            # poster pauses before it reads the thread, finds it there and stops.
            rig.slack.latency("chat.postMessage", 1.2, match=is_answer)
        run_id = await run_once(rig)
        assert_one_full_answer(rig, run_id)
        assert answer_posts(rig) == (1 if fault == "timeout" else 3)


async def test_a_refused_answer_whose_fallback_is_stored_unheard_leaves_one_fallback(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        rig.slack.fail("chat.postMessage", error="invalid_blocks", match=is_answer)
        rig.slack.fail(
            "chat.postMessage", status=503, match=lambda p: "metadata" not in p and
            "blocks" not in p, after_store=True,
        )  # fmt: skip
        run_id = await run_once(rig)
        answers = thread_answers(rig)
        assert len(answers) == 1 and run_id in answers[0]["text"]
        assert not answers[0]["blocks"]
        assert "plain-text summary is posted below" in rig.final_status()


async def test_a_429_waits_its_turn_and_the_answer_lands(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(with_conclusion())
    async with slack_rig(model, tmp_path) as rig:
        # More 429s than the client's own retry handler takes: the poster keeps waiting.
        rig.slack.fail(
            "chat.postMessage", status=429, error="ratelimited", retry_after=0, times=6,
            match=is_answer,
        )  # fmt: skip
        run_id = await run_once(rig)
        assert_one_full_answer(rig, run_id)
        assert answer_posts(rig) == 7
        assert thread_reads(rig) == 0  # a 429 is never ambiguous: nothing to look for
