"""A readable answer: a short first screen, each scope said once, the bot's own times as Slack
dates (local to each reader), a Cancel that asks first; ``replay`` prints the evidence view."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sre_diag.commands.replay import replay_envelope
from sre_diag.contract.text import render_text
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.blocks import (
    CANCEL_ACTION_ID,
    EVIDENCE_ACTION_ID,
    FEEDBACK_DOWN_ACTION_ID,
    FEEDBACK_UP_ACTION_ID,
)
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    call,
    draft_json,
    final_step,
    settings_for,
    tool_step,
)
from tests.slack.support import ADMIN, blocks_of, cancel_payload, slack_rig

REPO = Path(__file__).resolve().parents[2]
QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05"
THREAD = "1764300000.000100"
START = 1795860000  # 2026-11-28T10:00:00Z
END = START + 1800


def _section_texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks if b.get("type") == "section"]


async def test_answer_layout_dates_and_scope_once(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION, ts=THREAD)
        await rig.handle.manager.wait_idle()
        answer = rig.answers()[-1]
        blocks = answer["blocks"]
        kinds = [b["type"] for b in blocks]
        # First screen: header, conclusion, the top finding, then the buttons; the rest after
        # a divider.
        assert kinds[:4] == ["header", "section", "section", "actions"]
        assert kinds[4] == "divider"
        ids = [e["action_id"] for e in blocks[3]["elements"]]
        assert ids == [EVIDENCE_ACTION_ID, FEEDBACK_UP_ACTION_ID, FEEDBACK_DOWN_ACTION_ID]
        text = "\n".join(_section_texts(blocks))
        # The check's window is a Slack date (each reader's local time) with a UTC fallback.
        window = (
            f"<!date^{START}^{{date_short_pretty}} {{time}}|2026-11-28 10:00 UTC>"
            f"–<!date^{END}^{{time}}|10:30 UTC>"
        )
        assert f"*#1* query_logs · payment-api · ERROR · {window} — 2 lines returned" in text
        assert "10:00–10:30 UTC" not in text
        # Each scope once: citations name the check, the scope is under Checked only, and the
        # model's checked scope that repeats it is not listed again.
        assert text.count("payment-api · ERROR") == 1
        assert "_Evidence:_ *#1* query_logs" in text
        assert "payment-api ERROR 日志 10:00–10:30" not in text
        assert "*Checked*" in text and "Limitations" not in text
        assert "Conclusion" not in text  # the header says it, with how sure
        assert blocks[0]["text"]["text"] == "Diagnosis · HIGH confidence"
        # Model text keeps its own times as text.
        assert "10:05 起大量 db pool exhausted 错误" in text
        # When the question was asked, as a Slack date, in the footer.
        footer = " ".join(e["text"] for e in blocks[-2]["elements"])
        assert "Asked <!date^1764300000^{date_short_pretty} {time}|2025-11-28 03:20 UTC>" in footer


def test_plain_text_says_each_scope_once() -> None:
    from tests.slack.test_render import _check, _result, _small_draft

    draft = _small_draft()
    draft["limitations"]["checked_scope"] = ["payment-api ERROR scope 1 logs", "db-1 disk"]
    out = render_text(_result(draft=draft, checks=[_check(1)]))
    assert out.count("payment-api · ERROR · scope 1") == 1
    assert "payment-api ERROR scope 1 logs" not in out
    assert "Also checked:\n  - db-1 disk" in out


async def test_cancel_asks_first_and_a_confirmed_click_cancels(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            ModelStep(content="x", delay_seconds=30),
        ]
    )
    async with slack_rig(model, tmp_path) as rig:
        await rig.mention(QUESTION, ts=THREAD)
        await model.wait_for_requests(2)
        status = rig.posts()[0]
        [button] = [e for b in blocks_of(status) if b["type"] == "actions" for e in b["elements"]]
        assert button["action_id"] == CANCEL_ACTION_ID
        confirm = button["confirm"]
        assert confirm["title"]["text"] == "Cancel this diagnosis?"
        assert confirm["confirm"]["text"] == "Cancel the run"
        assert confirm["deny"]["text"] == "Keep running"
        # Slack sends the click only once confirmed.
        response = await rig.interact(cancel_payload(button["value"], ADMIN))
        assert response.status == 200
        await asyncio.wait_for(rig.handle.manager.wait_idle(), 10)
        result = rig.handle.manager.completed[-1]
        assert result.stop_reason is not None and result.stop_reason.value == "CANCELLED"


async def test_replay_prints_the_evidence_view(model_server: StartServer, tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "payment.md").write_text(
        "# Payment API\n\n## DB pool exhausted\n\nRaise the pool size; roll back v2.14.0.\n",
        encoding="utf-8",
    )
    model = await model_server(
        [
            tool_step(call("call-1", "lookup_knowledge", {"query": "db pool exhausted"})),
            final_step(draft_json(["call-1"])),
        ]
    )
    settings = settings_for(
        model, tmp_path, DIAG_KNOWLEDGE_DIR=str(runbooks), DIAG_CACHE_DIR=str(tmp_path / "c")
    )
    output = await replay_envelope(REPO / "examples/slack/app_mention.json", settings)
    evidence = [p for p in output.posts if p.splitlines()[1:2] == ["Evidence"]]
    assert len(evidence) == 1, output.posts
    # Printed as a reader sees it: no mrkdwn marks, entities or date tokens.
    assert "\n#1 lookup_knowledge" in evidence[0]
    assert "Raise the pool size" in evidence[0]
    assert "<!date" not in evidence[0] and "*#1*" not in evidence[0]
