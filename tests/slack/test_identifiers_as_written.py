"""Identifiers in Slack text are kept byte-identical, inert, and spanned alone.

An SRE copies ``ord_10290`` or ``ERR_DB_POOL_EXHAUSTED`` from the answer or the Evidence view
into grep, SQL or a ticket: what Slack shows must be exactly what the model or the evidence
wrote. An untrusted word carrying a mrkdwn mark has its identifier inside a code span (nothing
formats there) and the punctuation around it outside (``ord_10231,`` is the span ``ord_10231``
and a comma); a ``key=value`` is spanned whole; only ``& < >`` are escaped, as entities Slack
shows as the characters. Each test reads a rendered message the way Slack shows it — code spans'
content literally, outside them the bot's own marks removed, the three entities decoded — and
finds every identifier in it, byte for byte.
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sre_diag.contract.draft import DiagnosisDraft
from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import EvidenceCheck, one_line, render_evidence_text, render_text
from sre_diag.slack.blocks import SlackMessage, StatusView, render_evidence, render_status
from sre_diag.slack.mrkdwn import escape, mrkdwn_escape
from sre_diag.slack.render import render_result

IDENTIFIERS = [
    "ord_10290", "ERR_DB_POOL_EXHAUSTED", "__init__", "_private", "trailing_", "a__b",
    "payment_api.v2_1", "x-request-id=ab_cd_12", "订单_10290", "ключ_1", "trace*id", "2*3=6",
    "~tilde~", "a~b~c", "snake_case_with_many_parts", "svc_a@corp_b.example", r"C:\tmp\a_b",
    "a&b<c>_d", "emoji_🙂_id", ":rotating_light:", "*starred*", "_italic_", "x_*_~_y",
    "&amp;_lit", "pool-exhausted", "v2.14.0", "SELECT_count(*)",
]  # fmt: skip
INVENTED = "made_up_call*1"  # a cited id that is no check of the run: shown as written
MARKED = [i for i in IDENTIFIERS if set(i) & set("*_~")]
_SPAN = re.compile(r"`([^`\n]*)`")


def _entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _decoded(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _visible(mrkdwn: str) -> str:
    """``mrkdwn`` as Slack shows it: a code span's content as is; outside code spans only the
    bot's own marks are left (``*Conclusion*``, ``_Evidence:_``), which format and vanish."""
    shown: list[str] = []
    position = 0
    for span in _SPAN.finditer(mrkdwn):
        shown.append(mrkdwn[position : span.start()].replace("*", "").replace("_", ""))
        shown.append(span.group(1))
        position = span.end()
    shown.append(mrkdwn[position:].replace("*", "").replace("_", ""))
    return _decoded("".join(shown))


def _mrkdwn_texts(msg: SlackMessage) -> list[str]:
    """Every mrkdwn text of the message: the fallback, sections and context elements."""
    found = [msg.text]
    for block in msg.blocks:
        text = block.get("text")
        if isinstance(text, dict) and text.get("type") == "mrkdwn":
            found.append(text["text"])
        found += [e["text"] for e in block.get("elements", []) if e.get("type") == "mrkdwn"]
    return found


def _is_edge(char: str) -> bool:
    return char not in "*_~" and unicodedata.category(char)[0] in "PS"


def _core(identifier: str) -> str:
    """The part of a word that goes in the span: without the punctuation at either end."""
    start, end = 0, len(identifier)
    while start < end and _is_edge(identifier[start]):
        start += 1
    while end > start and _is_edge(identifier[end - 1]):
        end -= 1
    return identifier[start:end]


def _assert_kept(msg: SlackMessage, identifiers: list[str]) -> None:
    raw = "\n".join(_mrkdwn_texts(msg))
    shown = "\n".join(_visible(t) for t in _mrkdwn_texts(msg))
    for identifier in identifiers:
        assert identifier in shown, identifier  # copied out byte for byte
        if identifier in MARKED:  # and its marks could never format: inside a code span
            assert f"`{_entities(_core(identifier))}`" in raw, identifier
    for look_alike in ("\u02cd", "\u2217", "\u223c"):
        assert look_alike not in raw


def _words(n: int = 0) -> str:
    rotated = IDENTIFIERS[n:] + IDENTIFIERS[:n]
    return " ".join(rotated[:9])


def _result(ids: list[str]) -> ExecutionResult:
    text = {n: f"see {_words(n)} here" for n in range(0, 27, 3)}
    draft = {
        "conclusion": {"summary": f"{text[0]}\n{_words(9)}\n{_words(18)}", "confidence": "HIGH",
                       "evidence_tool_call_ids": ids[:1]},
        "analysis": [
            {"kind": "FINDING", "statement": f"{text[3]}\n{_words(12)}",
             "evidence": {"status": "CITED", "tool_call_ids": ids}},
            {"kind": "FINDING", "statement": text[6],
             "evidence": {"status": "CITED", "tool_call_ids": ids[1:]}},
            {"kind": "NEGATIVE_OBSERVATION", "statement": text[9],
             "evidence": {"status": "NO_EVIDENCE", "scope": _words(15)}},
            {"kind": "FINDING", "statement": text[12],
             "evidence": {"status": "CITED", "tool_call_ids": [ids[0], INVENTED]}},
        ],
        "action_plan": [_words(18), _words(21)],
        "recommendations": [_words(24)],
        "limitations": {"checked_scope": [f"orders {_words(3)}"], "missing_info": [_words(6)]},
    }  # fmt: skip
    checks = [
        {"tool_call_id": call_id, "tool": tool, "status": "READY", "item_count": 2,
         "evaluation": "GAINED", "scope": f"{_words(n * 4)}", "error_code": None}
        for n, (call_id, tool) in enumerate(zip(ids, ["query_logs", "query_mysql"], strict=True))
    ]  # fmt: skip
    return ExecutionResult.model_validate(
        {
            "run_id": "run-7f3a_b2", "session_id": "sess_1", "outcome": "DRAFT",
            "draft": DiagnosisDraft.model_validate_json(json.dumps(draft, ensure_ascii=False)),
            "progress": {"checks": checks},
            "usage": {"model_calls": 3, "prompt_tokens": 1, "completion_tokens": 1,
                      "tool_calls": 2, "bytes": 0, "elapsed_ms": 0},
        }
    )  # fmt: skip


@pytest.mark.parametrize("ids", [["call_1", "call_2"], ["call-a_b*c", "tool_call_~2"]])
def test_every_identifier_of_an_answer_copies_out_byte_identical(ids: list[str]) -> None:
    msg = render_result(_result(ids))
    _assert_kept(msg, [*IDENTIFIERS, INVENTED, "run-7f3a_b2"])


def test_every_identifier_of_the_evidence_view_copies_out_byte_identical() -> None:
    logs = EvidenceCheck(1, "call_1", "query_logs", f"payment_api {_words(2)}", {
        "summary": {"matched": 12, "exact": True, "first_ts": "2026-11-28T10:05:02Z",
                    "last_ts": "2026-11-28T10:29:58Z",
                    "top_messages": [{"pattern": f"pool <*> {_words(5)}", "count": 9}]},
        "items": [{"ts": "2026-11-28T10:05:02Z", "level": "ERROR", "service": "payment_api",
                   "message": f"db pool exhausted {_words(n)}"} for n in range(0, 27, 3)],
    })  # fmt: skip
    rows = EvidenceCheck(2, "call_2", "query_mysql", "orders FAILED", {
        "items": [{"cells": {"order_id": "ord_10290", "error_code": "ERR_DB_POOL_EXHAUSTED",
                             "note": _words(7)}}],
    })  # fmt: skip
    runbook = EvidenceCheck(3, "call_3", "lookup_knowledge", "pool", {
        "items": [{"title": "db_pool", "heading": "step_1", "path": "runbooks/payment_api.md",
                   "score": 1.0, "snippet": f"raise max_pool_size; {_words(11)}"}],
    })  # fmt: skip
    msg = render_evidence("run_7", [logs, rows, runbook])
    _assert_kept(msg, [*IDENTIFIERS, "payment_api", "order_id=ord_10290", "max_pool_size",
                       "runbooks/payment_api.md", "error_code=ERR_DB_POOL_EXHAUSTED"])  # fmt: skip
    raw = "\n".join(_mrkdwn_texts(msg))
    # A row's cell is one unit: key=value spanned whole, never its first word alone.
    assert "`order_id=ord_10290`" in raw and "`error_code=ERR_DB_POOL_EXHAUSTED`" in raw
    assert f"`note={_entities(_words(7))}`" in raw
    plain = render_evidence_text("run_7", [logs, rows, runbook])
    for identifier in IDENTIFIERS:
        assert identifier in plain


def test_the_check_in_flight_and_the_terminal_text_keep_identifiers() -> None:
    view = StatusView(run_key="k", state="RUNNING", current_check=f"query_mysql · {_words(4)}")
    shown = _visible(render_status(view).blocks[0]["text"]["text"])
    for identifier in IDENTIFIERS[4:13]:
        assert identifier in shown
    text = render_text(_result(["call_1", "call_2"]))
    for identifier in IDENTIFIERS:
        assert identifier in text


# -- the property behind it: what Slack shows is the text, folded onto one line ---------------

_SHOWN = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn"), blacklist_characters="`"
    ),
    max_size=80,
).filter(lambda t: not re.search(r"@(?:here|channel|everyone)", t, re.IGNORECASE))


@given(text=_SHOWN)
def test_what_slack_shows_is_the_text_as_written(text: str) -> None:
    folded = one_line(text)
    assert _visible(mrkdwn_escape(text)) == folded
    assert _decoded(escape(text)) == folded  # the plain fallback (mrkdwn off)
    assert "`" not in _SPAN.sub("", mrkdwn_escape(text))  # every code span is closed


@given(text=st.text(max_size=60))
def test_a_backtick_is_the_only_character_shown_as_a_look_alike(text: str) -> None:
    shown = _visible(mrkdwn_escape(text))
    clean = "".join(
        c for c in one_line(text) if unicodedata.category(c) not in {"Cf", "Cs"}
    ).replace("`", "\u02cb")
    if not re.search(r"@(?:here|channel|everyone)", clean, re.IGNORECASE):
        assert shown == clean


# -- spans hold the identifier and nothing else ------------------------------------------------

_ALNUM = "[A-Za-z0-9]{1,6}"
_IDENTIFIER = st.from_regex(
    rf"[_*~]?{_ALNUM}(?:[_*~.=/:-]{_ALNUM}){{0,3}}[_*~]?", fullmatch=True
).filter(lambda i: bool(set(i) & set("*_~")))
_PUNCTUATION = st.text(
    alphabet=st.characters(
        categories=("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"),
        exclude_characters="*_~`",
    ),
    max_size=4,
)


@given(lead=_PUNCTUATION, identifier=_IDENTIFIER, trail=_PUNCTUATION, before=st.booleans())
def test_an_identifier_in_any_punctuation_is_spanned_alone(
    lead: str, identifier: str, trail: str, before: bool
) -> None:
    word = f"{lead}{identifier}{trail}"
    text = f"see {word} now" if before else word
    out = mrkdwn_escape(text)
    assert _visible(out) == text  # byte-identical as shown
    # One span, holding exactly the identifier: no punctuation from around it inside.
    assert [_decoded(span) for span in _SPAN.findall(out)] == [identifier]
    # Outside the span nothing is a mark: it cannot format.
    assert not set(_SPAN.sub("", out)) & set("*_~`")


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("ord_10231, ord_10232, ord_10245).", "`ord_10231`, `ord_10232`, `ord_10245`)."),
        ("DB_POOL_TIMEOUT.", "`DB_POOL_TIMEOUT`."),
        ("(pool max_size=10, in_use=10)'", "(pool `max_size=10`, `in_use=10`)'"),
        ("«trace_id»:", "«`trace_id`»:"),
    ],
)
def test_marked_words_in_prose_read_cleanly(written: str, expected: str) -> None:
    assert mrkdwn_escape(written) == expected
