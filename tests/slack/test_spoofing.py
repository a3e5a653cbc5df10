"""Layout spoofing: model and evidence text cannot fake the bot's structure or act in Slack.

Every model-written field (summary, statements, scopes, action plan, recommendations, checked
scope, missing info) and every evidence-derived one (check scopes, model-invented tool call ids,
the check in flight) is filled with hostile text; the rendering must keep exactly the structure
it has for harmless text ("skeleton"), and nothing in it may mention, link or format.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sre_diag.contract.draft import DiagnosisDraft, DraftDefect
from sre_diag.contract.result import ExecutionResult, FailureCode
from sre_diag.contract.text import render_text
from sre_diag.errors import StopReason
from sre_diag.slack.blocks import SlackMessage, StatusView, render_status
from sre_diag.slack.mrkdwn import escape, mrkdwn_escape
from sre_diag.slack.render import render_result
from sre_diag.tools.base import ToolName
from tests.slack.test_render import _assert_limits

# --------------------------------------------------------------------------- hostile text

BOT_LINES = [
    "*Conclusion* (confidence: *HIGH*)",
    "*No confirmed conclusion.* See what is still missing below.",
    "*Analysis*",
    "*1. Finding:*",
    "*2. Negative observation:*",
    "_Evidence:_ *#1* query_logs · payment-api · ERROR · 10:00–10:30 UTC",
    "_No evidence found in:_ orders table",
    "*#3* query_mysql · fake check — READY · 42 items",
    "#3 query_mysql · fake check — READY · 42 items",
    "*Action plan*",
    "*Limitations — still missing*",
    "• rollback everything",
    "_(3 more not shown)_",
    "Run run-42",
    "Conclusion [HIGH]:",
    "  evidence: #1 query_logs · payment-api",
    "  1. FINDING:",
    "     no evidence found in: everything",
    "Checks:",
    "  #1 query_logs · x → READY (3 items, GAINED) [id call-1]",
    "Usage: 1 model calls, 1+1 tokens, 0 tool calls, 0 bytes, 0 ms",
]
BREAKS = ["\n", "\r\n", "\r", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\x1c", "\x1e", "\t"]
INVISIBLE = [
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad",  # zero-width, BOM, soft hyphen
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",  # bidi embeddings and overrides
    "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c",  # isolates, marks
    "\U000e0041",  # a tag character
]  # fmt: skip
SLACK_MARKUP = [
    "<!channel>", "<!here>", "<!everyone>", "<!here|here>", "<@U123ABC>", "<@W0ADMIN|boss>",
    "<#C0123ABC|general>", "<!subteam^S0123|@oncall>", "<!date^1392734382^{date}|x>",
    "<https://evil.example|https://good.example>", "<mailto:a@evil.example|security>",
    "&lt;!channel&gt;", "&lt;@U123ABC&gt;", "&amp;lt;!here&amp;gt;", "&#60;!here&#62;",
    "@here", "@channel", "@everyone", "@Here", "@\u200bchannel", "@\u2060everyone",
]  # fmt: skip
MARKDOWN = [
    "*bold*", "_italic_", "~strike~", "`code`", "```block```", "> quote", ">>> rest",
    "*_~`all`~_*", "**", "__", "1. numbered", "• bullet", "- dash", "#1", "#12 query_logs",
    ":rotating_light:", "\\*escaped\\*", "[link](https://evil.example)",
]  # fmt: skip
LOOKALIKES = [
    "＊Conclusion＊ (confidence: ＊HIGH＊)", "＃1 query_logs", "１．Finding", "＞ quote",
    "＜!channel＞", "﹡bold﹡", "∗Conclusion∗", "‹!here›", "＿italic＿", "｀code｀",
]  # fmt: skip
CONTROLS = ["\x00", "\x07", "\x08", "\x1b[2J\x1b[1;1H", "\x1b]8;;https://evil\x07x\x1b]8;;\x07"]


def _spoofs() -> list[str]:
    """Hostile texts: each bot line behind every kind of break, plus markup of every kind."""
    found: list[str] = []
    for n, line in enumerate(BOT_LINES):
        brk = BREAKS[n % len(BREAKS)]
        found += [f"ok{brk}{line}", f"{line}{brk}ok", f"{brk}{line}{brk}"]
    found += [f"a{c}b{c}*Conclusion*{c}" for c in INVISIBLE]
    found += [f"ping {m} now" for m in SLACK_MARKUP]
    found += [f"x {m} y\n{m}" for m in MARKDOWN]
    found += [f"\n{m}" for m in LOOKALIKES]
    found += [f"a{c}b\n{c}*Analysis*" for c in CONTROLS]
    found.append("\n".join(BOT_LINES))
    found.append("".join(BREAKS) + "".join(SLACK_MARKUP) + "".join(MARKDOWN))
    return found


SPOOFS = _spoofs()


# --------------------------------------------------------------------------- builders


def _draft(text: Callable[[str], str], ids: list[str]) -> dict[str, Any]:
    """A Draft using every text field; ``text(name)`` gives each field's text."""
    return {
        "conclusion": {
            "summary": text("summary"),
            "confidence": "LOW",
            "evidence_tool_call_ids": ids[:2],
        },
        "analysis": [
            {
                "kind": "FINDING",
                "statement": text("finding"),
                "evidence": {"status": "CITED", "tool_call_ids": ids},
            },
            {
                "kind": "NEGATIVE_OBSERVATION",
                "statement": text("negative"),
                "evidence": {"status": "NO_EVIDENCE", "scope": text("scope")},
            },
            {
                "kind": "NEGATIVE_OBSERVATION",
                "statement": text("cited negative"),
                "evidence": {"status": "CITED", "tool_call_ids": [*ids, "call-not-run"]},
            },
        ],
        "action_plan": [text("plan"), "restart payment-api"],
        "recommendations": [text("recommendation")],
        "limitations": {
            "checked_scope": [text("checked")],
            "missing_info": [text("missing"), text("missing 2")],
        },
    }


def _checks(scope: Callable[[int], str], ids: list[str]) -> list[dict[str, Any]]:
    statuses = ["READY", "ERROR", "READY"]
    return [
        {
            "tool_call_id": call_id,
            "tool": "query_logs" if n != 2 else "query_mysql",
            "status": statuses[n - 1],
            "item_count": 3 if statuses[n - 1] == "READY" else 0,
            "evaluation": "GAINED",
            "scope": scope(n),
            "error_code": "TIMEOUT" if statuses[n - 1] == "ERROR" else None,
        }
        for n, call_id in enumerate(ids, 1)
    ]


def _result(
    outcome: str, draft: dict[str, Any] | None, checks: list[dict[str, Any]], **extra: Any
) -> ExecutionResult:
    usage = {"model_calls": 1, "prompt_tokens": 1, "completion_tokens": 1, "tool_calls": 3}
    return ExecutionResult.model_validate(
        {
            "run_id": "run-42",
            "session_id": "sess-1",
            "outcome": outcome,
            "draft": None
            if draft is None
            else DiagnosisDraft.model_validate_json(json.dumps(draft)),
            "progress": {"checks": checks},
            "usage": {**usage, "bytes": 0, "elapsed_ms": 0},
            **extra,
        }
    )


BENIGN_IDS = ["call-1", "call-2", "call-3"]


def _pair(
    spoof: str, outcome: str = "DRAFT", *, spoof_ids: bool = False, **extra: Any
) -> tuple[ExecutionResult, ExecutionResult]:
    """The same result twice: every untrusted text hostile, and every one harmless."""
    spoof = spoof[:300]  # the schema's bound for scopes and list items
    ids = [f"call-{n}{spoof[:40]}" for n in (1, 2, 3)] if spoof_ids else BENIGN_IDS
    draft = _draft(lambda _: spoof, ids) if outcome == "DRAFT" else None
    benign = _draft(lambda _: "x", BENIGN_IDS) if outcome == "DRAFT" else None
    return (
        _result(outcome, draft, _checks(lambda _: spoof, ids), **extra),
        _result(outcome, benign, _checks(lambda _: "x", BENIGN_IDS), **extra),
    )


# --------------------------------------------------------------------------- Block Kit checks

_BOLD_CITE = re.compile(r"\*#\d+\*")
# A code span: untrusted words carrying a mark sit inside one, where nothing formats.
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_OUR_CODES = re.compile(
    r"\b(?:"
    + "|".join(
        str(code) for enum in (ToolName, StopReason, FailureCode, DraftDefect) for code in enum
    )
    + r"|TIMEOUT|NO_GAIN)\b"
)
_BOT_TOKENS = re.compile(
    r"\*#\d+\*|_not a check of this run:_|_\(\d+ more not shown\)_|_\(no visible text\)_"
    r"|^\*[^*\n]+\*|\(confidence: \*(?:HIGH|MEDIUM|LOW)\*\)$|^_Evidence:_|^_No evidence found in:_",
    re.MULTILINE,
)
_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("QUOTE", re.compile(r"> ")),
    ("BULLET", re.compile(r"• ")),
    ("EVIDENCE", re.compile(r"_Evidence:_ ")),
    ("NO_EVIDENCE", re.compile(r"_No evidence found in:_ ")),
    ("CHECK", re.compile(r"\*#\d+\* ")),
    ("HEADING", re.compile(r"\*[^*]+\*")),
    ("MORE", re.compile(r"_\(\d+ more not shown\)_$")),
    ("BLANK", re.compile(r"_\(no visible text\)_$")),
]


def _kind(line: str) -> str:
    for kind, pattern in _KINDS:
        match = pattern.match(line)
        if match is None:
            continue
        if kind == "HEADING":
            return f"HEADING {match.group(0)}"  # the whole bold heading, verbatim
        if kind in {"EVIDENCE", "CHECK"}:
            # which checks it cites or is (a code span's content formats nothing)
            return f"{kind} {_BOLD_CITE.findall(_CODE_SPAN.sub('', line))}"
        return kind
    return f"TEXT {line[:20]}"  # the bot's own fixed sentences (stop, failure, status)


def _skeleton(msg: SlackMessage) -> list[list[str]]:
    """Each block's type and the kinds of its lines (consecutive quote lines count once)."""
    skeleton: list[list[str]] = []
    for block in msg.blocks:
        kinds = [block["type"]]
        if block["type"] == "section":
            for line in block["text"]["text"].split("\n"):
                kind = _kind(line)
                if not (kind == "QUOTE" and kinds[-1] == "QUOTE"):
                    kinds.append(kind)
        elif block["type"] == "context":
            kinds.append(str(len(block["elements"])))
        skeleton.append(kinds)
    return skeleton


def _texts(msg: SlackMessage) -> list[str]:
    found = [msg.text]
    for block in msg.blocks:
        if block["type"] in {"section", "header"}:
            found.append(block["text"]["text"])
        found += [e["text"] for e in block.get("elements", []) if isinstance(e.get("text"), str)]
        found += [e["text"]["text"] for e in block.get("elements", []) if "type" in e and
                  isinstance(e.get("text"), dict)]  # fmt: skip
    return found


def _assert_inert(msg: SlackMessage) -> None:
    """Nothing in the message mentions, links, formats or hides text, except the bot's own."""
    for text in _texts(msg):
        assert "<" not in text  # no mention, channel, subteam, date or link markup at all
        for word in ("@here", "@channel", "@everyone"):
            assert word not in text.lower()
        assert not re.search(r"&(?!amp;|lt;|gt;)", text)  # only our own entities
        for line in text.split("\n"):
            body = line.removeprefix("> ")
            assert ">" not in body  # a raw > only ever opens our quote
            rest = _OUR_CODES.sub("", _BOT_TOKENS.sub("", _CODE_SPAN.sub("", body)))
            # no mark outside the bot's own tokens and code spans (a stray backtick included)
            assert not set(rest) & set("*_~`"), line
        for c in text:
            category = unicodedata.category(c)
            assert category not in {"Cc", "Zl", "Zp", "Cs"} or c == "\n", repr(c)
            assert category != "Cf" or c == "\u200d", repr(c)  # only our mention defuser
        assert not re.search(r"\u200d(?!(?i:here|channel|everyone))", text)


def _assert_same_layout(hostile: SlackMessage, benign: SlackMessage) -> None:
    _assert_limits(hostile)
    _assert_inert(hostile)
    assert _skeleton(hostile) == _skeleton(benign)


# --------------------------------------------------------------------------- Block Kit tests


@pytest.mark.parametrize("spoof", SPOOFS)
def test_spoofed_draft_keeps_the_bots_layout(spoof: str) -> None:
    hostile, benign = _pair(spoof)
    _assert_same_layout(render_result(hostile), render_result(benign))


@pytest.mark.parametrize("spoof", SPOOFS[::3])
def test_spoofed_tool_call_ids_keep_the_layout(spoof: str) -> None:
    hostile, benign = _pair(spoof, spoof_ids=True)
    _assert_same_layout(render_result(hostile), render_result(benign))


@pytest.mark.parametrize("spoof", SPOOFS[::4])
@pytest.mark.parametrize("reason", [StopReason.CANCELLED, StopReason.INFORMATION_SATURATED])
def test_spoofed_scopes_in_a_stop_keep_the_layout(spoof: str, reason: StopReason) -> None:
    hostile, benign = _pair(spoof, "STOPPED", spoof_ids=True, stop_reason=reason.value)
    _assert_same_layout(render_result(hostile), render_result(benign))


@pytest.mark.parametrize("spoof", SPOOFS[1::4])
def test_spoofed_scopes_in_a_failure_keep_the_layout(spoof: str) -> None:
    failure = {"code": "INVALID_DRAFT", "detail": "UNKNOWN_CITATION"}
    hostile, benign = _pair(spoof, "FAILED", spoof_ids=True, failure=failure)
    _assert_same_layout(render_result(hostile), render_result(benign))


@pytest.mark.parametrize("spoof", SPOOFS[::2])
def test_spoofed_check_in_flight_stays_one_line(spoof: str) -> None:
    view = StatusView(
        run_key="k", state="RUNNING", current_check=f"query_mysql · {spoof}", rounds_used=1
    )
    msg = render_status(view)
    _assert_limits(msg)
    _assert_inert(msg)
    [section, _buttons] = msg.blocks
    lines = section["text"]["text"].split("\n")
    assert len(lines) == 1
    assert lines[0].startswith("Step 1 · querying the database: ")


def test_fake_conclusion_heading_in_a_finding_is_plain_quoted_text() -> None:
    fake = "all good\n*Conclusion* (confidence: *HIGH*)\nthe database is fine"
    hostile, _ = _pair(fake)
    msg = render_result(hostile)
    lines = [line for t in _texts(msg) for line in t.split("\n")]
    assert msg.blocks[0]["text"]["text"] == "Diagnosis · LOW confidence"  # the real one
    assert not [line for line in lines if line.startswith("*Conclusion*")]
    # the fake one: quoted, its marks inside code spans (shown as typed, never bold)
    assert "> `*Conclusion*` (confidence: `*HIGH*`)" in lines


def test_scope_cannot_add_a_citation_or_check_line() -> None:
    fake = "payment-api\n*#9* query_logs · orders — READY · 99 items\n#9 query_logs"
    hostile, benign = _pair(fake, "STOPPED", stop_reason="CANCELLED")
    msg = render_result(hostile)
    lines = [line for t in _texts(msg) for line in t.split("\n")]
    check_lines = [line for line in lines if _BOLD_CITE.match(line)]
    assert [line[:4] for line in check_lines] == ["*#1*", "*#2*", "*#3*"]
    assert not any(re.match(r"[^*\w]*#\d", line) for line in lines)  # no unbolded index
    shown = "\n".join(lines)
    assert "*#9*" not in _CODE_SPAN.sub("", shown) and "`*#9*`" in shown  # as typed, not bold
    _assert_same_layout(msg, render_result(benign))


@pytest.mark.parametrize(
    ("markup", "shown"),
    [
        ("<!channel>", "&lt;!channel&gt;"),
        ("<!here>", "&lt;!here&gt;"),
        ("<@U123>", "&lt;@U123&gt;"),
        ("<#C0123ABC|general>", "&lt;#C0123ABC|general&gt;"),
        ("<https://evil.example|https://good.example>",
         "&lt;https://evil.example|https://good.example&gt;"),
        ("&lt;!channel&gt;", "&amp;lt;!channel&amp;gt;"),
        ("@channel", "@\u200dchannel"),
        ("*HIGH*", "`*HIGH*`"),
        ("_x_ ~y~ `z`", "`_x_` `~y~` \u02cbz\u02cb"),
        ("ord_10290 ERR_DB_POOL", "`ord_10290` `ERR_DB_POOL`"),
        ("`ord_10290`", "\u02cb`ord_10290`\u02cb"),
        ("a<b>_&c", "`a&lt;b&gt;_&amp;c`"),
        ("*_~`all`~_*", "`*_~`\u02cball\u02cb`~_*`"),
    ],
)  # fmt: skip
def test_markup_is_shown_as_typed_never_acted_on(markup: str, shown: str) -> None:
    assert mrkdwn_escape(f"a {markup} b") == f"a {shown} b"
    hostile, _ = _pair(markup)
    text = "\n".join(_texts(render_result(hostile)))
    assert shown in text


def test_invisible_and_direction_characters_are_removed() -> None:
    for char in INVISIBLE:
        assert escape(f"pay{char}ment") == mrkdwn_escape(f"pay{char}ment") == "payment"
    assert escape("a\u202eb\u2066c") == mrkdwn_escape("a\u202eb\u2066c") == "abc"
    assert escape("\u200b") == mrkdwn_escape("\u200b") == ""
    hostile, _ = _pair("\u200b\u2060")  # nothing visible left: a visible placeholder
    text = "\n".join(_texts(render_result(hostile)))
    assert "> " not in text.replace("&gt; ", "")
    assert "_(no visible text)_" in text


# --------------------------------------------------------------------------- plain text

_TEXT_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("QUOTE", re.compile(r" +> ")),
    ("CONCLUSION", re.compile(r"Conclusion \[(?:HIGH|MEDIUM|LOW)\]:$")),
    ("ITEM", re.compile(r" {2}\d+\. (?:FINDING|NEGATIVE_OBSERVATION):$")),
    ("EVIDENCE", re.compile(r" +evidence: ")),
    ("NO_EVIDENCE", re.compile(r" {5}no evidence found in: ")),
    ("BULLET", re.compile(r" {2}- ")),
    ("CHECK", re.compile(r" {2}#\d+ ")),
    ("TITLE", re.compile(r"(?:Analysis|Action plan|Recommendations|Checked|Still missing):$")),
]


def _text_skeleton(text: str) -> list[str]:
    kinds: list[str] = []
    for line in text.split("\n"):
        kind = next((k for k, p in _TEXT_KINDS if p.match(line)), None)
        if kind in {"TITLE", "ITEM", "CONCLUSION"}:
            kind = line
        elif kind is None:
            kind = line.split(" ")[0]  # the bot's fixed sentences: first word
        if not (kind == "QUOTE" and kinds and kinds[-1] == "QUOTE"):
            kinds.append(kind)
    return kinds


def _assert_plain_inert(text: str) -> None:
    for c in text:
        category = unicodedata.category(c)
        assert category not in {"Cc", "Cf", "Zl", "Zp", "Cs"} or c == "\n", repr(c)


@pytest.mark.parametrize("spoof", SPOOFS)
def test_plain_text_keeps_its_layout(spoof: str) -> None:
    hostile, benign = _pair(spoof, spoof_ids=True)
    out = render_text(hostile)
    _assert_plain_inert(out)
    assert _text_skeleton(out) == _text_skeleton(render_text(benign))
    assert out.count("\n") >= render_text(benign).count("\n")


@pytest.mark.parametrize("spoof", SPOOFS[::5])
def test_plain_text_of_a_stop_keeps_its_layout(spoof: str) -> None:
    hostile, benign = _pair(spoof, "STOPPED", spoof_ids=True, stop_reason="DEADLINE_EXCEEDED")
    out = render_text(hostile)
    _assert_plain_inert(out)
    assert _text_skeleton(out) == _text_skeleton(render_text(benign))


def test_plain_text_quotes_every_model_line() -> None:
    hostile, _ = _pair("fine\nConclusion [HIGH]:\n  evidence: #1 query_logs\nChecks:")
    lines = render_text(hostile).split("\n")
    assert [line for line in lines if line.startswith("Conclusion")] == ["Conclusion [LOW]:"]
    assert [line for line in lines if line == "Checks:"] == ["Checks:"]
    assert "  > Conclusion [HIGH]:" in lines
    assert "  > evidence: #1 query_logs" in lines


# --------------------------------------------------------------------------- property

_PIECES = st.sampled_from(
    [*BOT_LINES, *BREAKS, *INVISIBLE, *SLACK_MARKUP, *MARKDOWN, *LOOKALIKES, *CONTROLS]
)
_HOSTILE = st.lists(st.one_of(_PIECES, st.characters(codec="utf-8")), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=_HOSTILE, spoof_ids=st.booleans())
def test_any_hostile_text_keeps_the_layout(pieces: list[str], spoof_ids: bool) -> None:
    spoof = "x" + "".join(pieces)  # something visible: a blank one renders a placeholder
    hostile, benign = _pair(spoof, spoof_ids=spoof_ids)
    _assert_same_layout(render_result(hostile), render_result(benign))
    out = render_text(hostile)
    _assert_plain_inert(out)
    assert _text_skeleton(out) == _text_skeleton(render_text(benign))
