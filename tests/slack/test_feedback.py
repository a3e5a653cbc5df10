"""👍 / 👎 on every final answer: one vote per user (changeable), a 👎 reason through a modal
(``views.open`` + ``view_submission``); each vote an audit record of kind ``feedback`` and a
``diag_feedback_total{vote}`` count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sre_diag.slack.blocks import FEEDBACK_DOWN_ACTION_ID, FEEDBACK_UP_ACTION_ID
from sre_diag.slack.feedback import FEEDBACK_VIEW_ID, REASON_ACTION_ID, REASON_BLOCK_ID
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.support import (
    ADMIN,
    OTHER,
    SlackRig,
    answer_button,
    button_payload,
    slack_rig,
)
from tests.slack.test_render import HOSTILE

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05"
THREAD = "1764300000.000100"


def _feedback(tmp_path: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((tmp_path / "audit").glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    return [r for r in records if r.get("kind") == "feedback"]


def _count(rig: SlackRig, vote: str) -> float:
    for line in rig.handle.metrics.render().decode().splitlines():
        if line.startswith(f'diag_feedback_total{{vote="{vote}"}}'):
            return float(line.split()[-1])
    raise AssertionError("no diag_feedback_total series")


async def _drain(rig: SlackRig) -> None:
    assert await rig.handle.manager.harness.drain_audit(10)


def _submission(view: dict[str, Any], reason: str, user: str = "UHUMAN01") -> dict[str, Any]:
    return {
        "type": "view_submission",
        "team": {"id": "T00000001"},
        "api_app_id": "A00000001",
        "user": {"id": user},
        "trigger_id": "4.5.6",
        "view": {
            **view,
            "id": "V0001",
            "state": {"values": {REASON_BLOCK_ID: {REASON_ACTION_ID: {"value": reason}}}},
        },
    }


async def test_votes_first_changed_repeated_and_a_reason(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION, ts=THREAD)
        await rig.handle.manager.wait_idle()
        run_id = rig.handle.manager.completed[-1].run_id
        assert answer_button(rig, FEEDBACK_UP_ACTION_ID)["value"] == run_id
        assert answer_button(rig, FEEDBACK_DOWN_ACTION_ID)["value"] == run_id
        assert _count(rig, "up") == _count(rig, "down") == 0

        # First vote.
        await rig.interact(button_payload(FEEDBACK_UP_ACTION_ID, run_id))
        # The same vote again: nothing new is written or counted.
        await rig.interact(button_payload(FEEDBACK_UP_ACTION_ID, run_id))
        notes = [c.params["text"] for c in rig.slack.calls_of("chat.postEphemeral")]
        assert "recorded" in notes[0] and "already recorded" in notes[1]
        assert _count(rig, "up") == 1

        # Changed to 👎: counted, and the reason modal opens with the click's trigger id.
        await rig.interact(button_payload(FEEDBACK_DOWN_ACTION_ID, run_id))
        assert _count(rig, "down") == 1 and _count(rig, "up") == 1
        [opened] = rig.slack.calls_of("views.open")
        assert opened.params["trigger_id"] == "1.2.3"
        view = opened.params["view"]
        view = json.loads(view) if isinstance(view, str) else view
        assert view["callback_id"] == FEEDBACK_VIEW_ID

        # The modal's submission: a bounded, one-line reason.
        reason = f"wrong service\n{HOSTILE}\x1b[2J" + "y" * 5000
        response = await rig.interact(_submission(view, reason))
        assert response.status == 200

        # Another user votes independently.
        await rig.interact(button_payload(FEEDBACK_UP_ACTION_ID, run_id, user="UOTHER02"))
        assert _count(rig, "up") == 2
        await _drain(rig)

        records = _feedback(tmp_path)
        assert [(r["user_id"], r["vote"]) for r in records] == [
            ("UHUMAN01", "up"),
            ("UHUMAN01", "down"),
            ("UHUMAN01", "down"),
            ("UOTHER02", "up"),
        ]
        assert all(r["run_id"] == run_id and r["recorded_at"] for r in records)
        assert records[0]["reason"] is None
        with_reason = records[2]["reason"]
        assert with_reason.startswith("wrong service <!channel>")  # kept as typed, one line
        assert "\n" not in with_reason and "\x1b" not in with_reason
        assert len(with_reason) <= 500
        assert records[2]["session_id"] == f"slack:{ADMIN}:{THREAD}"


async def test_feedback_outside_the_admin_channels_is_ignored(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION, ts=THREAD)
        await rig.handle.manager.wait_idle()
        run_id = rig.handle.manager.completed[-1].run_id
        # Every final answer has feedback buttons, even without a conclusion or evidence.
        answer_button(rig, FEEDBACK_UP_ACTION_ID)
        await rig.interact(button_payload(FEEDBACK_DOWN_ACTION_ID, run_id, channel=OTHER))
        forged = {
            "type": "modal",
            "callback_id": FEEDBACK_VIEW_ID,
            "private_metadata": json.dumps({"r": run_id, "c": OTHER, "t": THREAD}),
        }
        await rig.interact(_submission(forged, "spam"))
        await _drain(rig)
        assert not _feedback(tmp_path)
        assert not rig.slack.calls_of("views.open")
        assert _count(rig, "down") == 0
