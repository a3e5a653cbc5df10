"""The Evidence button: signed clicks through ``app.async_dispatch`` post, in the thread, the
observations the answer cites (as the model saw them); expired evidence and other channels are
told or ignored; on Redis any replica answers; evidence never enters the audit record; the
view stays within Block Kit limits and escapes hostile evidence."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from sre_diag.contract.text import EvidenceCheck, render_evidence_text
from sre_diag.slack.blocks import EVIDENCE_ACTION_ID, render_evidence
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, tool_step
from tests.slack.support import (
    ADMIN,
    OTHER,
    SlackRig,
    answer_button,
    blocks_of,
    button_payload,
    redis_url,
    require_redis,
    scoped_keys,
    scrub,
    slack_rig,
    unique_app_id,
)
from tests.slack.test_render import HOSTILE, RAW_MARKERS, _all_text, _assert_limits

QUESTION = "<@UDIAG0001> payment-api 5xx since 10:05"
THREAD = "1764300000.000100"
SECOND_ADMIN = "CADMIN0003"


def _script() -> list[Any]:
    return [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]


async def _answered(rig: SlackRig, app_id: str = "A00000001") -> str:
    await rig.mention(QUESTION, ts=THREAD, app_id=app_id)
    await rig.handle.manager.wait_idle()
    return str(answer_button(rig, EVIDENCE_ACTION_ID)["value"])


def _evidence_posts(rig: SlackRig) -> list[dict[str, Any]]:
    return [
        p
        for p in rig.posts()
        if any(b.get("type") == "header" and b["text"]["text"] == "Evidence" for b in blocks_of(p))
    ]


async def test_fresh_evidence_is_posted_in_the_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(_script())
    async with slack_rig(model, tmp_path) as rig:
        run_id = await _answered(rig)
        assert run_id == rig.handle.manager.completed[-1].run_id
        response = await rig.interact(button_payload(EVIDENCE_ACTION_ID, run_id))
        assert response.status == 200
        [post] = _evidence_posts(rig)
        assert post["thread_ts"] == THREAD and post["channel"] == ADMIN
        text = "\n".join(str(b.get("text", {}).get("text", "")) for b in blocks_of(post))
        # The same projection the model saw: the two log lines of the scripted adapter.
        assert "*#1* query_logs · payment-api · ERROR" in text
        # Each line's time is a Slack date (the date once), the window too.
        first = "<!date^1795860000^{date_short_pretty} {time_secs}|2026-11-28 10:00:00 UTC>"
        assert f"> {first} · ERROR payment-api · db pool exhausted" in text
        second = "<!date^1795860060^{time_secs}|10:01:00 UTC>"
        assert f"> {second} · ERROR payment-api · db pool exhausted" in text
        assert "10:00–10:30 UTC" not in text and "2026-11-28T" not in text
        seen = next(m for m in model.requests[1]["messages"] if m["role"] == "tool")
        assert json.loads(seen["content"])["item_count"] == 2
        # Evidence never enters the audit record.
        audit = "".join(p.read_text("utf-8") for p in (tmp_path / "audit").glob("*.jsonl"))
        assert run_id in audit and "db pool exhausted" not in audit


async def test_expired_evidence_says_so_ephemerally(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(_script())
    async with slack_rig(model, tmp_path, DIAG_EVIDENCE_TTL_SECONDS="0.3") as rig:
        run_id = await _answered(rig)
        await asyncio.sleep(0.5)
        await rig.interact(button_payload(EVIDENCE_ACTION_ID, run_id, user="UREADER2"))
        assert not _evidence_posts(rig)
        [note] = [c.params for c in rig.slack.calls_of("chat.postEphemeral")]
        assert note["user"] == "UREADER2" and note["channel"] == ADMIN
        assert "no longer kept" in note["text"] and "0.3 seconds" in note["text"]


async def test_other_channels_get_no_evidence(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server(_script())
    async with slack_rig(model, tmp_path, admin=f"{ADMIN},{SECOND_ADMIN}") as rig:
        run_id = await _answered(rig)
        # Outside the admin channels: ignored, nothing posted, nobody told.
        await rig.interact(button_payload(EVIDENCE_ACTION_ID, run_id, channel=OTHER))
        assert not _evidence_posts(rig)
        assert not rig.slack.calls_of("chat.postEphemeral")
        # Another admin channel replaying this answer's run id: the evidence stays where it was.
        await rig.interact(button_payload(EVIDENCE_ACTION_ID, run_id, channel=SECOND_ADMIN))
        assert not _evidence_posts(rig)
        [note] = rig.slack.calls_of("chat.postEphemeral")
        assert note.params["channel"] == SECOND_ADMIN
        metrics = rig.handle.metrics.render().decode()
        assert 'diag_slack_events_total{reason="NOT_ADMIN_CHANNEL",result="ignored"} 1.0' in metrics


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client = await require_redis()
    yield client
    await client.aclose()


async def test_any_replica_answers_from_redis(
    model_server: StartServer, tmp_path: Path, admin: Redis
) -> None:
    app_id = unique_app_id()
    model = await model_server(_script())
    env = {"DIAG_REDIS_URL": redis_url()}
    try:
        async with (
            slack_rig(model, tmp_path / "a", **env) as owner,
            slack_rig(model, tmp_path / "b", **env) as other,
        ):
            run_id = await _answered(owner, app_id)
            keys = await scoped_keys(admin, app_id)
            [key] = [k for k in keys if ":evidence:" in k]
            assert key.endswith(f"{app_id}:T00000001:{run_id}")
            assert 0 < await admin.pttl(key) <= 86_400_000
            await other.interact(button_payload(EVIDENCE_ACTION_ID, run_id, app_id=app_id))
            [post] = _evidence_posts(other)
            assert post["thread_ts"] == THREAD
            # Another app sharing the Redis sees nothing of it.
            await other.interact(button_payload(EVIDENCE_ACTION_ID, run_id, app_id=unique_app_id()))
            assert len(_evidence_posts(other)) == 1
            assert "no longer kept" in other.slack.calls_of("chat.postEphemeral")[0].params["text"]
    finally:
        await scrub(admin, app_id)


def _hostile_checks(total_bytes: int = 50_000) -> list[EvidenceCheck]:
    """Observations stuffed with hostile text: every kind of item and a log summary."""
    line = f"{HOSTILE} `code` ~x~ _y_ \u202e\u200b\x1b[31m & <&> " * 4
    per_check = total_bytes // 6
    checks = []
    for n in range(1, 7):
        items: list[dict[str, Any]] = []
        while len(json.dumps(items, ensure_ascii=False)) < per_check:
            k = len(items)
            items += [
                {"ts": HOSTILE, "service": HOSTILE, "level": "ERROR", "message": line},
                {"title": HOSTILE, "heading": "*h*", "path": "<p>", "score": 1, "snippet": line},
                {"cells": {HOSTILE: line, "n": k}},
            ]
        summary = {
            "matched": 10**9,
            "exact": False,
            "first_ts": HOSTILE,
            "last_ts": HOSTILE,
            "buckets": {"start": HOSTILE, "width_seconds": 60, "counts": list(range(60))},
            "top_messages": [{"pattern": line, "count": 5, "first_ts": "", "last_ts": ""}] * 5,
        }
        observation = {"items": items, "summary": summary, "truncated": True}
        checks.append(EvidenceCheck(n, f"call-{n}", "query_logs", HOSTILE, observation))
    return checks


def test_maximal_hostile_evidence_stays_within_limits_and_inert() -> None:
    checks = _hostile_checks()
    assert sum(len(json.dumps(c.observation)) for c in checks) >= 50_000
    message = render_evidence("run-" + "x" * 3000, checks)
    _assert_limits(message)
    text = _all_text(message)
    for out in (text, message.text):
        for marker in RAW_MARKERS:
            assert marker not in out
        assert "@here" not in out and "@everyone" not in out
        assert "\u202e" not in out and "\x1b" not in out and "\u200b" not in out
        assert "*h*" not in re.sub(r"`[^`\n]*`", "", out)  # its marks only inside code spans
    assert "&lt;!channel&gt;" in text
    # Every line of a section starts with our own text or a quote mark.
    for block in message.blocks:
        if block["type"] == "section":
            for row in block["text"]["text"].splitlines():
                assert row.startswith(("*#", "> ", "_", "• ")), row
    assert "more not shown" in text  # the cut is visible
    assert sum(len(t) for t in _all_text(message).splitlines()) < 40_000


def test_many_checks_share_the_blocks() -> None:
    checks = _hostile_checks() * 3  # 18 checks
    message = render_evidence("run-1", checks)
    _assert_limits(message)
    assert "(6 more not shown)" in _all_text(message)


def test_text_view_is_one_line_per_item() -> None:
    out = render_evidence_text("run-1", _hostile_checks(3000))
    assert "\x1b" not in out and "\u202e" not in out
    for row in out.splitlines()[1:]:
        assert row.startswith(("  #", "     ")), row
    assert "Matching lines: 1000000000 (estimated)" in out
