"""``sre-diag replay FILE`` of an alert thread (CONTRACTS §1, §10): a recorded ``message`` event
of an alert bot and a ``message_action`` of the "Diagnose this" shortcut replay through the same
listeners, print what would have been posted and the Execution Result, and are audited as
``replay``; what is not one of these is refused with a stable code."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from sre_diag.commands.replay import ReplayError, replay_envelope
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    audit_records,
    call,
    draft_json,
    final_step,
    settings_for,
    tool_step,
)

REPO = Path(__file__).resolve().parents[2]
ALERT = REPO / "examples/slack/alert_message.json"
SHORTCUT = REPO / "examples/slack/diagnose_message.json"
FLATTENED = (
    "[FIRING:1] PaymentApi5xxHigh payment-api (critical)\n"
    "payment-api 5xx ratio above 5% since 10:05 UTC on 2026-11-28; orders stuck in payment\n"
    "service: payment-api\nseverity: critical"
)


def _query(model: object) -> dict[str, object]:
    requests = getattr(model, "requests")  # noqa: B009
    user = next(m for m in requests[0]["messages"] if m["role"] == "user")
    return dict(json.loads(user["content"]))


@pytest.mark.parametrize("path", [ALERT, SHORTCUT], ids=["alert", "shortcut"])
async def test_an_alert_thread_replays(
    model_server: StartServer, tmp_path: Path, path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    settings = settings_for(model, tmp_path, DIAG_CACHE_DIR=str(tmp_path / "c"))
    output = await replay_envelope(path, settings)
    assert output.result.outcome.value == "DRAFT"
    sent = _query(model)
    assert str(sent["query"]).startswith(FLATTENED)
    assert str(sent["asked_at"]).startswith("2026-11-28T10:07:00")  # the alert's ts
    assert any("thread_ts=1795860420.000200" in p for p in output.posts)
    assert any("No confirmed cause" in p for p in output.posts)
    [record] = [r for r in audit_records(tmp_path) if r.get("kind") == "replay"]
    assert record["trigger"] == "replay"


async def test_an_alert_replays_with_its_evidence_links(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    settings = settings_for(
        model,
        tmp_path,
        DIAG_LOGS_SOURCE="http://127.0.0.1:9",  # Loki unreachable: the check fails, no link
        DIAG_GRAFANA_URL="https://grafana.example.com",
        DIAG_GRAFANA_LOKI_UID="loki",
        DIAG_CACHE_DIR=str(tmp_path / "c"),
    )
    output = await replay_envelope(ALERT, settings)
    assert output.result.outcome.value in {"DRAFT", "FAILED"}
    assert not any("grafana.example.com" in p for p in output.posts)  # nothing READY to link


async def test_the_replay_command_prints_an_alert_thread(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "k",
        "DIAG_MODEL": "scripted",
        "DIAG_CACHE_DIR": str(tmp_path / "c"),
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
    }
    env.pop("DIAG_MYSQL_DSN", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "replay", str(ALERT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "[chat.postMessage thread_ts=1795860420.000200]" in text
    assert json.loads(text.strip().splitlines()[-1])["outcome"] == "DRAFT"


@pytest.mark.parametrize(
    "envelope",
    [
        {"type": "event_callback", "event": {"type": "message", "text": "a person", "ts": "1.2",
                                              "channel": "C0ADMIN01", "user": "U1"}},
        {"type": "event_callback", "event": {"type": "message", "bot_id": "B1", "ts": "x",
                                              "channel": "C0ADMIN01"}},
        {"type": "message_action", "callback_id": "something_else", "channel": {"id": "C1"}},
        {"type": "message_action", "callback_id": "diagnose_message"},
        {"type": "block_actions"},
        [],
    ],
)  # fmt: skip
async def test_other_envelopes_are_refused(
    model_server: StartServer, tmp_path: Path, envelope: object
) -> None:
    model = await model_server([])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(envelope), encoding="utf-8")
    with pytest.raises(ReplayError) as refused:
        await replay_envelope(bad, settings_for(model, tmp_path))
    assert refused.value.code == "INVALID_ENVELOPE"
    assert model.request_count == 0


async def test_an_edit_of_an_alert_replays_nothing(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    envelope = json.loads(ALERT.read_text(encoding="utf-8"))
    envelope["event"]["subtype"] = "message_changed"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(envelope), encoding="utf-8")
    with pytest.raises(ReplayError) as refused:
        await replay_envelope(edited, settings_for(model, tmp_path))
    assert refused.value.code == "IGNORED_EVENT" and "EDITED" in str(refused.value)
