"""Block Kit rendering: limits for any schema-valid Draft, escaping, outcomes and status views."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sre_diag.contract.draft import DiagnosisDraft
from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import STOP_EXPLANATIONS
from sre_diag.errors import StopReason
from sre_diag.slack.blocks import CANCEL_ACTION_ID, SlackMessage, StatusView, render_status
from sre_diag.slack.mrkdwn import escape, mrkdwn_escape
from sre_diag.slack.render import render_result

HOSTILE = "<!channel> <@U123ABC> @here <https://evil|click> & *bold* @everyone <!here>"
RAW_MARKERS = ("<!channel>", "<@U123ABC>", "<https://evil|click>", "<!here>")


# --------------------------------------------------------------------------- builders


def _check(n: int, *, status: str = "READY", scope: str | None = None) -> dict[str, Any]:
    return {
        "tool_call_id": f"call-{n}",
        "tool": "query_logs",
        "status": status,
        "item_count": n,
        "evaluation": "GAINED",
        "scope": scope if scope is not None else f"payment-api · ERROR · scope {n}",
        "error_code": "TIMEOUT" if status == "ERROR" else None,
    }


def _usage() -> dict[str, Any]:
    return {
        "model_calls": 4,
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "tool_calls": 3,
        "bytes": 5000,
        "elapsed_ms": 12345,
    }


def _result(
    outcome: str = "DRAFT",
    *,
    draft: dict[str, Any] | None = None,
    checks: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> ExecutionResult:
    data: dict[str, Any] = {
        "run_id": "run-42",
        "session_id": "sess-1",
        "outcome": outcome,
        "draft": None if draft is None else _draft(draft),
        "progress": None if checks is None else {"checks": checks},
        "usage": _usage(),
        **extra,
    }
    return ExecutionResult.model_validate(data)


def _draft(data: dict[str, Any]) -> DiagnosisDraft:
    """The Draft record is strict (tuples, enums); its JSON form is what the model writes."""
    return DiagnosisDraft.model_validate_json(json.dumps(data))


def _small_draft(text: str = "Disk full on db-1") -> dict[str, Any]:
    return {
        "conclusion": {"summary": text, "confidence": "HIGH", "evidence_tool_call_ids": ["call-1"]},
        "analysis": [
            {
                "kind": "FINDING",
                "statement": text,
                "evidence": {"status": "CITED", "tool_call_ids": ["call-1", "call-2"]},
            },
            {
                "kind": "NEGATIVE_OBSERVATION",
                "statement": text,
                "evidence": {"status": "NO_EVIDENCE", "scope": text},
            },
        ],
        "action_plan": [text],
        "recommendations": [text],
        "limitations": {"checked_scope": [text], "missing_info": [text]},
    }


def _max_draft(char: str = "x") -> dict[str, Any]:
    ids = [f"call-{n}" for n in range(1, 11)]
    statement = char * 500
    item = char * 300
    return {
        "conclusion": {"summary": statement, "confidence": "LOW", "evidence_tool_call_ids": ids},
        "analysis": [
            {
                "kind": "FINDING",
                "statement": statement,
                "evidence": {"status": "CITED", "tool_call_ids": ids},
            }
            for _ in range(10)
        ],
        "action_plan": [item] * 10,
        "recommendations": [item] * 10,
        "limitations": {"checked_scope": [item] * 10, "missing_info": [item] * 10},
    }


# --------------------------------------------------------------------------- limit checks


def _texts(obj: Any) -> list[str]:
    """Every ``text`` string inside a block dict, at any depth."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "text" and isinstance(value, str):
                found.append(value)
            else:
                found += _texts(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _texts(value)
    return found


def _all_text(msg: SlackMessage) -> str:
    return "\n".join(t for block in msg.blocks for t in _texts(block))


def _assert_limits(msg: SlackMessage) -> None:
    assert msg.text.strip()
    assert len(msg.text) <= 3000
    assert 0 < len(msg.blocks) <= 50
    json.dumps(msg.blocks)  # serialisable
    for block in msg.blocks:
        kind = block["type"]
        if kind == "header":
            assert block["text"]["type"] == "plain_text"
            assert 0 < len(block["text"]["text"]) <= 150
        elif kind == "section":
            assert 0 < len(block["text"]["text"]) <= 3000
            assert len(block["text"]["text"].encode("utf-16-le")) // 2 <= 3000
        elif kind == "context":
            assert 0 < len(block["elements"]) <= 10
            for element in block["elements"]:
                assert 0 < len(element["text"]) <= 3000
        elif kind == "actions":
            for element in block["elements"]:
                assert 0 < len(element["text"]["text"]) <= 75
                assert len(element["value"]) <= 2000
        else:
            assert kind == "divider"


# --------------------------------------------------------------------------- escape


@pytest.mark.parametrize("inert", [escape, mrkdwn_escape])
def test_escape_makes_control_sequences_inert(inert: Callable[[str], str]) -> None:
    out = inert(HOSTILE)
    for marker in RAW_MARKERS:
        assert marker not in out
    assert "&lt;!channel&gt;" in out
    assert "&lt;@U123ABC&gt;" in out
    assert "&lt;https://evil|click&gt;" in out
    assert " &amp; " in out
    assert "@here" not in out and "@\u200dhere" in out
    assert "@everyone" not in out and "@\u200deveryone" in out
    assert "@channel" not in inert("ping @Channel now").lower()
    # The marks are kept as typed: inside a code span in mrkdwn, as they are with mrkdwn off.
    assert ("`*bold*`" if inert is mrkdwn_escape else "*bold*") in out
    assert "\u2217" not in out


# --------------------------------------------------------------------------- draft


def test_draft_shows_conclusion_analysis_lists_and_footer() -> None:
    checks = [_check(1), _check(2), _check(3)]
    msg = render_result(_result(draft=_small_draft(), checks=checks))
    _assert_limits(msg)
    text = _all_text(msg)
    assert msg.blocks[0]["type"] == "header"
    assert "HIGH" in msg.blocks[0]["text"]["text"]
    assert "> Disk full on db-1" in text  # model text is quoted
    assert "*#1* query_logs · payment-api · ERROR · scope 1" in text
    assert "*#2* query_logs" in text
    assert "_No evidence found in:_ Disk full on db-1" in text
    for title in ("Action plan", "Recommendations", "Checked", "Still missing"):
        assert title in text
    # Two quiet lines: when and how long for the responder, then the operator's numbers.
    when, cost = msg.blocks[-2], msg.blocks[-1]
    assert when["type"] == cost["type"] == "context"
    assert when["elements"][0]["text"] == "answered in 12.3 s · times in your time zone"
    cost_text = cost["elements"][0]["text"]
    assert cost_text == "Run run-42 · 4 model calls · 1,500 tokens · 3 tool calls"
    assert "prompt" not in _all_text(msg) and "completion" not in _all_text(msg)
    assert "Disk full on db-1" in msg.text and "run-42" in msg.text
    assert "Replay" not in text


def test_draft_without_conclusion_says_so() -> None:
    draft = _small_draft()
    draft["conclusion"] = None
    msg = render_result(_result(draft=draft, checks=[_check(1), _check(2)]))
    _assert_limits(msg)
    assert msg.blocks[0]["text"]["text"] == "No confirmed cause"
    assert msg.text.startswith("No confirmed cause")
    # Without a conclusion, what is missing is on the first screen, before the buttons.
    kinds = [b["type"] for b in msg.blocks]
    assert "*Still missing*" in msg.blocks[2]["text"]["text"]
    assert kinds.index("actions") > 2


def test_replay_is_marked() -> None:
    msg = render_result(_result(draft=_small_draft(), checks=[_check(1), _check(2)]), replay=True)
    _assert_limits(msg)
    assert "Replay of this thread's question with the current version" in _all_text(msg)
    assert msg.text.startswith("Replay")


@pytest.mark.parametrize("char", ["x", "&", "<", "é", "😀"])
def test_maximum_draft_stays_within_limits_and_marks_trims(char: str) -> None:
    checks = [_check(n, scope=char * 2000) for n in range(1, 13)]
    msg = render_result(
        _result(draft=_max_draft(char), checks=checks, run_id=char * 5000), replay=True
    )
    _assert_limits(msg)
    text = _all_text(msg)
    # every analysis item, every citation index and every list is present
    for n in range(1, 11):
        assert f"*{n}. Finding:*" in text
        assert f"*#{n}* query_logs" in text
    for title in ("Action plan", "Recommendations", "Checked", "Still missing"):
        assert title in text
    assert "…" in text  # check scopes (2000 chars) are trimmed visibly
    if char in "&<😀":
        # escaping/UTF-16 growth forces trims, and every trim is visible
        assert "…" in text or "more not shown" in text
    bullets = text.count("• ")
    # 10 + 10 + 10: Checked lists the run's checks, never the model's restatement of them
    assert bullets + sum(_hidden_counts(text)) == 30


def _hidden_counts(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"\((\d+) more not shown\)", text)]


def test_maximum_plain_draft_loses_nothing() -> None:
    checks = [_check(n) for n in range(1, 13)]
    msg = render_result(_result(draft=_max_draft("x"), checks=checks))
    _assert_limits(msg)
    text = _all_text(msg)
    assert "more not shown" not in text
    assert text.count("x" * 500) == 11  # conclusion + 10 statements, untrimmed
    assert text.count("• " + "x" * 300) == 30  # plan, recommendations, missing


def test_hostile_text_is_escaped_in_blocks_and_fallback() -> None:
    checks = [_check(1, scope=HOSTILE), _check(2, scope=HOSTILE)]
    msg = render_result(_result(draft=_small_draft(HOSTILE), checks=checks))
    _assert_limits(msg)
    text = _all_text(msg)
    for out in (text, msg.text):
        for marker in RAW_MARKERS:
            assert marker not in out
        assert "@here" not in out
        assert "@everyone" not in out
        assert "&lt;!channel&gt;" in out
        assert "&amp;" in out
        assert "`*bold*`" in out and "*bold*" not in out.replace("`*bold*`", "")


# --------------------------------------------------------------------------- stopped / failed


@pytest.mark.parametrize("reason", list(StopReason))
def test_stopped_explains_and_lists_checks(reason: StopReason) -> None:
    checks = [_check(1), _check(2, status="ERROR"), _check(3, scope=HOSTILE)]
    msg = render_result(_result("STOPPED", stop_reason=reason.value, checks=checks))
    _assert_limits(msg)
    text = _all_text(msg)
    why = STOP_EXPLANATIONS[reason].removeprefix("Stopped: ")
    assert why[:1].upper() + why[1:] in text  # the header says it stopped; the body says why
    assert "Stopped:" not in text
    assert why[1:] in msg.text
    assert "*#1* query_logs · payment-api · ERROR · scope 1 — 1 line returned" in text
    assert "*#2* query_logs" in text and "— failed (TIMEOUT)" in text
    assert msg.blocks[0]["text"]["text"] == "Stopped before a conclusion"
    assert "<!channel>" not in text
    assert "run-42" in msg.text
    assert msg.blocks[-1]["type"] == "context"


def test_stopped_without_checks() -> None:
    msg = render_result(_result("STOPPED", stop_reason="CANCELLED", checks=[]))
    _assert_limits(msg)
    assert "Nothing was checked" in _all_text(msg)


def test_stopped_with_many_checks_marks_overflow() -> None:
    checks = [_check(n, scope="s" * 1000) for n in range(1, 201)]
    msg = render_result(_result("STOPPED", stop_reason="DEADLINE_EXCEEDED", checks=checks))
    _assert_limits(msg)
    text = _all_text(msg)
    shown = len(re.findall(r" — \d+ lines? returned", text))
    assert shown + sum(_hidden_counts(text)) == 200
    assert sum(_hidden_counts(text)) > 0


def test_failed_is_safe_and_lists_ready_checks() -> None:
    checks = [_check(1), _check(2, status="ERROR")]
    msg = render_result(
        _result("FAILED", failure={"code": "INVALID_DRAFT", "detail": "FENCED"}, checks=checks)
    )
    _assert_limits(msg)
    text = _all_text(msg)
    expected = (
        "Failed closed: the model's final answer could not be accepted, so nothing is concluded."
    )
    assert expected in text and expected in msg.text
    assert msg.blocks[0]["text"]["text"] == "Diagnosis failed · no conclusion"
    assert "Code INVALID_DRAFT · FENCED" in text  # the code, quietly, for a report
    assert "run-42" in text and "run-42" in msg.text
    assert "*#1* query_logs" in text
    assert "*#2* query_logs" not in text  # only READY checks


def test_failed_without_progress() -> None:
    msg = render_result(_result("FAILED", failure={"code": "MODEL_ERROR", "detail": "EMPTY"}))
    _assert_limits(msg)
    text = _all_text(msg)
    assert "Code MODEL_ERROR · EMPTY" in text
    assert "checked" not in text.lower().replace("failed closed", "")


# --------------------------------------------------------------------------- status


def _buttons(msg: SlackMessage) -> list[dict[str, Any]]:
    return [e for b in msg.blocks if b["type"] == "actions" for e in b["elements"]]


def test_status_queued() -> None:
    msg = render_status(StatusView(run_key="key-1", state="QUEUED", queue_position=3))
    _assert_limits(msg)
    assert _all_text(msg).startswith("Queued · Waiting: 2 diagnoses ahead")
    assert msg.text == "Queued · Waiting: 2 diagnoses ahead"
    one = render_status(StatusView(run_key="key-1", state="QUEUED", queue_position=2))
    assert one.text == "Queued · Waiting: 1 diagnosis ahead"
    # "Queued" only when something is ahead.
    for position in (1, None):
        first = render_status(StatusView(run_key="key-1", state="QUEUED", queue_position=position))
        assert first.text == "Starting: next in line"
        assert "Queued" not in _all_text(first)
    [button] = _buttons(msg)
    assert button["action_id"] == CANCEL_ACTION_ID == "diag_cancel"
    assert button["value"] == "key-1"


def test_status_running() -> None:
    label = "query_logs · payment-api · ERROR · 10:00–10:30 UTC <!channel>"
    view = StatusView(
        run_key="key-2",
        state="RUNNING",
        current_check=label,
        rounds_used=2,
        max_rounds=8,
        checks_done=5,
    )
    msg = render_status(view)
    _assert_limits(msg)
    text = _all_text(msg)
    assert msg.text.startswith("Step 6 · reading payment-api logs (ERROR · 10:00–10:30 UTC")
    assert "5 checks done" in text
    assert "round" not in text and "Current check" not in text
    assert "<!channel>" not in text
    [button] = _buttons(msg)
    assert button["action_id"] == CANCEL_ACTION_ID
    assert button["value"] == "key-2"


@pytest.mark.parametrize(
    ("changes", "expected", "done"),
    [
        ({}, "Starting: reading the question", None),
        ({"checks_done": 1, "rounds_used": 2}, "Weighing what the checks found", "1 check done"),
        ({"checks_done": 1, "current_check": "query_mysql · deployments around 10:00"},
         "Step 2 · querying the database: deployments around 10:00", "1 check done"),
        ({"current_check": "lookup_knowledge · db pool exhausted"},
         "Step 1 · searching the runbooks: db pool exhausted", None),
        ({"checks_done": 2, "current_check": "query_logs · payment-api"},
         "Step 3 · reading payment-api logs", "2 checks done"),
    ],
)  # fmt: skip
def test_status_says_what_is_happening(
    changes: dict[str, Any], expected: str, done: str | None
) -> None:
    msg = render_status(StatusView(run_key="k", state="RUNNING", max_rounds=8, **changes))
    _assert_limits(msg)
    assert msg.text == expected
    contexts = [b for b in msg.blocks if b["type"] == "context"]
    assert [c["elements"][0]["text"] for c in contexts] == ([done] if done else [])


def test_status_finished_has_no_button() -> None:
    view = StatusView(run_key="key-3", state="FINISHED", final_note="Done: diagnosis posted below")
    msg = render_status(view)
    _assert_limits(msg)
    assert "Done: diagnosis posted below" in _all_text(msg)
    assert _buttons(msg) == []


def test_status_rejects_unusable_run_key() -> None:
    with pytest.raises(ValueError):
        StatusView(run_key="", state="QUEUED")
    with pytest.raises(ValueError):
        StatusView(run_key="k" * 2001, state="QUEUED")


# --------------------------------------------------------------------------- property


_TEXT = st.lists(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["&", "<", ">", "@here", "@channel", "<!channel>", "😀", "*", "\n"]),
    ),
    min_size=1,
).map("".join)
_IDS = st.lists(st.sampled_from([f"call-{n}" for n in range(1, 13)]), min_size=1, max_size=10)


def _bounded(max_size: int) -> st.SearchStrategy[str]:
    return _TEXT.map(lambda s: s[:max_size]).filter(lambda s: bool(s.strip()))


def _statement() -> st.SearchStrategy[str]:
    return st.one_of(_bounded(500), st.sampled_from(["&" * 500, "<" * 500, "😀" * 500]))


def _item() -> st.SearchStrategy[str]:
    return st.one_of(_bounded(300), st.sampled_from(["&" * 300, ">" * 300, "@here" * 60]))


_EVIDENCE = st.one_of(
    st.fixed_dictionaries({"status": st.just("CITED"), "tool_call_ids": _IDS}),
    st.fixed_dictionaries({"status": st.just("NO_EVIDENCE"), "scope": _item()}),
)
_ANALYSIS = st.builds(
    lambda statement, evidence, kind: {
        "kind": "NEGATIVE_OBSERVATION" if evidence["status"] == "NO_EVIDENCE" else kind,
        "statement": statement,
        "evidence": evidence,
    },
    _statement(),
    _EVIDENCE,
    st.sampled_from(["FINDING", "NEGATIVE_OBSERVATION"]),
)
_CONCLUSION = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "summary": _statement(),
            "confidence": st.sampled_from(["HIGH", "MEDIUM", "LOW"]),
            "evidence_tool_call_ids": _IDS,
        }
    ),
)
_LIST = st.lists(_item(), max_size=10)
_DRAFTS = st.builds(
    lambda conclusion, analysis, plan, recs, checked, missing: {
        "conclusion": conclusion,
        "analysis": analysis,
        "action_plan": plan,
        "recommendations": recs,
        "limitations": {"checked_scope": checked, "missing_info": missing},
    },
    _CONCLUSION,
    st.lists(_ANALYSIS, max_size=10),
    _LIST,
    _LIST,
    _LIST,
    st.lists(_item(), min_size=1, max_size=10),
)
_SCOPES = st.lists(st.one_of(st.none(), _TEXT), min_size=12, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draft=_DRAFTS, scopes=_SCOPES, replay=st.booleans())
def test_any_valid_draft_stays_within_limits(
    draft: dict[str, Any], scopes: list[str | None], replay: bool
) -> None:
    _draft(draft)
    checks = [_check(n) | {"scope": scope} for n, scope in enumerate(scopes, 1)]
    msg = render_result(_result(draft=draft, checks=checks), replay=replay)
    _assert_limits(msg)
    text = _all_text(msg) + msg.text
    for marker in ("<!", "<@", "<http"):
        assert marker not in text


@settings(max_examples=40, deadline=None)
@given(
    reason=st.sampled_from(list(StopReason)),
    scopes=st.lists(st.one_of(st.none(), _TEXT), max_size=40),
)
def test_any_stop_stays_within_limits(reason: StopReason, scopes: list[str | None]) -> None:
    checks = [_check(n) | {"scope": scope} for n, scope in enumerate(scopes, 1)]
    msg = render_result(_result("STOPPED", stop_reason=reason.value, checks=checks))
    _assert_limits(msg)


def test_the_status_follows_a_run_step_by_step() -> None:
    """What the tracker records reads as what is happening, and a finished check is not named
    as the current step."""
    from typing import cast

    from sre_diag.harness.ledger import Invocation, InvocationStatus
    from sre_diag.harness.state import ModelRound, RunState
    from sre_diag.slack.progress import ProgressTracker
    from sre_diag.tools.base import ToolName

    ctx = cast(RunState, None)  # the hooks read nothing of the run
    tracker = ProgressTracker(view=StatusView(run_key="k", state="QUEUED", queue_position=1))
    seen = [render_status(tracker.view).text]
    tracker.on_model_round(ctx, ModelRound(index=1, started_ms=0))
    seen.append(render_status(tracker.view).text)
    tracker.on_tool_started(ctx, ToolName.QUERY_LOGS, "payment-api · ERROR · 10:00–10:30 UTC")
    seen.append(render_status(tracker.view).text)
    done = Invocation("call-1", "run-1", ToolName.QUERY_LOGS, InvocationStatus.READY)
    tracker.on_tool_invocation(ctx, done)
    seen.append(render_status(tracker.view).text)
    tracker.on_tool_started(ctx, ToolName.QUERY_MYSQL, "deployments around 10:00")
    seen.append(render_status(tracker.view).text)
    assert seen == [
        "Starting: next in line",
        "Starting: reading the question",
        "Step 1 · reading payment-api logs (ERROR · 10:00–10:30 UTC)",
        "Weighing what the checks found",
        "Step 2 · querying the database: deployments around 10:00",
    ]
