"""The six canonical answers, rendered: byte-identical to their golden files, and every rule of
a readable answer checked on them.

The goldens are the Block Kit JSON each answer posts (the answer, its Evidence view, and what
follows it) and the text ``replay`` prints for them. A change that alters what a responder sees
shows up here as a diff to review: ``python -m tests.slack.golden.answers`` rewrites them.
The rules: identifiers spanned alone, one clock, the header says what and how sure once, the
Evidence view in check order with its oldest and latest lines labelled and counted, runbook
tables as rows, each check's scope once, operator numbers only in the last quiet line.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.slack.golden.answers import CANONICAL, GOLDEN, REPO, Canonical, posts_of, rendered

NAMES = list(CANONICAL)
_SPAN = re.compile(r"`([^`\n]*)`")
_TOKEN = re.compile(r"<!date\^(\d+)\^([^|>]*)\|([^>]*)>")
_RAW_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|\b\d{2}:\d{2}(?::\d{2})? UTC\b")


def _mrkdwn(post: dict[str, Any]) -> list[str]:
    texts: list[str] = []
    for block in post.get("blocks") or []:
        text = block.get("text")
        if isinstance(text, dict) and text.get("type") == "mrkdwn":
            texts.append(text["text"])
        texts += [e["text"] for e in block.get("elements", []) if e.get("type") == "mrkdwn"]
    return texts


def _answer(canonical: Canonical) -> dict[str, Any]:
    return posts_of(canonical)[0]


def _evidence(canonical: Canonical) -> dict[str, Any]:
    [evidence] = [p for p in posts_of(canonical)[1:] if p.get("blocks")]
    return evidence


def _header(post: dict[str, Any]) -> str:
    return str(post["blocks"][0]["text"]["text"])


# --------------------------------------------------------------------------- goldens


@pytest.mark.parametrize("name", NAMES)
def test_rendering_matches_its_golden(name: str) -> None:
    for file, content in rendered(CANONICAL[name]).items():
        golden = (GOLDEN / file).read_text(encoding="utf-8")
        assert content == golden, f"{file} changed: review, then python -m {__package__}.answers"


def test_six_canonical_answers() -> None:
    outcomes = {n: (c.result.outcome.value, c.result.draft) for n, c in CANONICAL.items()}
    assert set(outcomes) == {"high-draft", "no-conclusion", "stopped", "failed", "alert",
                             "follow-up"}  # fmt: skip
    high = CANONICAL["high-draft"].result.draft
    assert high is not None and high.conclusion is not None
    assert high.conclusion.confidence.value == "HIGH"
    none = CANONICAL["no-conclusion"].result.draft
    assert none is not None and none.conclusion is None
    assert outcomes["stopped"][0] == "STOPPED" and outcomes["failed"][0] == "FAILED"
    assert CANONICAL["alert"].after  # the pointer a repeat of the alert gets


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("name", NAMES)
def test_code_spans_hold_identifiers_only(name: str) -> None:
    for post in posts_of(CANONICAL[name]):
        for text in _mrkdwn(post):
            for raw in _SPAN.findall(text):
                span = raw.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
                if span == "<*>":  # a message pattern's variable part, ours
                    continue
                assert span == span.strip(), span  # never a space at an edge
                assert not re.match(r"[,.;:!?)\]}'\"»]", span[-1:]), span  # trailing punct
                assert not re.match(r"[(\[{'\"«]", span[:1]), span  # leading punctuation
    answer = "\n".join(_mrkdwn(_answer(CANONICAL["high-draft"])))
    assert "`ord_10231`," in answer or "`ord_10231`)" in answer or "`ord_10231` " in answer
    assert "(pool `max_size=10`, `in_use=10`)'" in answer  # a key=value spanned whole


@pytest.mark.parametrize("name", NAMES)
def test_one_clock(name: str) -> None:
    for post in posts_of(CANONICAL[name]):
        for text in _mrkdwn(post):
            bot_text = _TOKEN.sub("", _strip_model_prose(text))
            assert not _RAW_TIME.search(bot_text), text
            for _epoch, _format, fallback in _TOKEN.findall(text):
                assert fallback.endswith(" UTC")
        zone = [t for t in _mrkdwn(post) if "times in your time zone" in t]
        if post.get("blocks") and _TOKEN.search("\n".join(_mrkdwn(post))):
            assert len(zone) == 1  # the zone said once a message


def _strip_model_prose(text: str) -> str:
    """The bot's own text of a section: quoted lines (model text, evidence) left out."""
    return "\n".join(line for line in text.split("\n") if not line.startswith("> "))


@pytest.mark.parametrize("name", NAMES)
def test_the_header_says_what_and_how_sure_once(name: str) -> None:
    canonical = CANONICAL[name]
    answer = _answer(canonical)
    header = _header(answer)
    body = "\n".join(_mrkdwn(answer))
    draft = canonical.result.draft
    if draft is not None and draft.conclusion is not None:
        confidence = draft.conclusion.confidence.value
        assert header == f"Diagnosis · {confidence} confidence"
        assert confidence not in _strip_model_prose(body).replace("Run ", "")
        assert "*Conclusion*" not in body and "confidence" not in body
    else:
        expected = {
            "DRAFT": "No confirmed cause",
            "STOPPED": "Stopped before a conclusion",
            "FAILED": "Diagnosis failed · no conclusion",
        }
        assert header == expected[canonical.result.outcome.value]
        assert "Stopped:" not in body


@pytest.mark.parametrize("name", NAMES)
def test_evidence_in_check_order_with_labelled_lines(name: str) -> None:
    evidence = _evidence(CANONICAL[name])
    sections = [t for t in _mrkdwn(evidence) if t.startswith("*#")]
    numbers = [int(re.match(r"\*#(\d+)\*", t).group(1)) for t in sections]  # type: ignore[union-attr]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    for text in sections:
        if " query_logs " not in text.split("\n")[0]:
            continue
        title = text.split("\n")[0]
        assert re.search(r" — (\d[\d,]* of (about )?[\d,]+ matching lines|no matching lines)$",
                         title), title  # fmt: skip
        assert "items" not in title and "left more out" not in title


def test_the_onset_and_the_latest_lines_are_both_shown() -> None:
    text = "\n".join(_mrkdwn(_evidence(CANONICAL["high-draft"])))
    first, latest = text.index("_First matching lines_"), text.index("_Latest matching lines_")
    assert first < latest
    assert "10:05:00 UTC>" in text[first:latest]  # the onset the conclusion is about
    assert "10:29:57 UTC>" in text[latest:]
    assert "— 11 of 1,167 matching lines" in text


def test_runbook_tables_read_as_rows() -> None:
    text = "\n".join(_mrkdwn(_evidence(CANONICAL["high-draft"])))
    assert "|---|" not in text and "| |" not in text
    assert "日志关键字: `slow query` · 指向: 慢查询长时间占用连接" in text


@pytest.mark.parametrize("name", NAMES)
def test_each_scope_once(name: str) -> None:
    canonical = CANONICAL[name]
    body = "\n".join(_mrkdwn(_answer(canonical)))
    for check in canonical.result.progress.checks if canonical.result.progress else ():
        scope = (check.scope or "").split(" · ")[0]
        assert body.count(scope) <= 1 + _model_mentions(canonical, scope), scope
    draft = canonical.result.draft
    if draft is not None and canonical.result.progress is not None:
        for item in draft.limitations.checked_scope:
            assert f"• {item}" not in body  # the model's restatement of the checks: not again


def _model_mentions(canonical: Canonical, text: str) -> int:
    draft = canonical.result.draft
    if draft is None:
        return 0
    return json.dumps(draft.model_dump(), ensure_ascii=False).count(text)


@pytest.mark.parametrize("name", NAMES)
def test_operator_numbers_only_in_the_quiet_last_line(name: str) -> None:
    answer = _answer(CANONICAL[name])
    blocks = answer["blocks"]
    last = blocks[-1]
    assert last["type"] == "context"
    assert re.fullmatch(r"Run \S+ · [\d,]+ model calls? · [\d,]+ tokens · [\d,]+ tool calls?",
                        last["elements"][0]["text"])  # fmt: skip
    for block in blocks[:-1]:
        text = json.dumps(block, ensure_ascii=False)
        assert "tokens" not in text and "model call" not in text


def test_replay_text_reads_as_shown() -> None:
    text = (GOLDEN / "high-draft.txt").read_text(encoding="utf-8")
    assert "<!date" not in text and "&lt;" not in text and "`" not in text
    assert "Checked\n#1 query_logs · payment-api · ERROR · 2026-11-28 10:00 UTC–10:30 UTC" in text
    assert "times in UTC" in text and "your time zone" not in text


# --------------------------------------------------------------------------- the pictures


def _script() -> ModuleType:
    path = REPO / "scripts" / "render_answers"
    loader = importlib.machinery.SourceFileLoader("render_answers", str(path))
    spec = importlib.util.spec_from_loader("render_answers", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_pages_are_self_contained_and_deterministic(tmp_path: Path) -> None:
    script = _script()
    pages = script.pages()
    assert set(pages) == {*NAMES, "answer"}
    assert pages == script.pages()
    for html in pages.values():
        assert "http://" not in html.replace('href="http', "")
        assert not re.search(r"<(link|img|iframe)\b|@import|url\(|src=", html)
    script.main(["--html-only", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.html" for n in pages)


def test_pages_show_what_slack_shows() -> None:
    page = _script().pages()["high-draft"]
    assert '<div class="h">Diagnosis · HIGH confidence</div>' in page
    assert "<code>ord_10231</code>" in page and "<code>max_size=10</code>," in page
    assert "Nov 28, 2026 10:00–10:30" in page  # a date token as a reader in UTC sees it
    assert "<!date" not in page and "&amp;lt;" not in page
    assert "<blockquote>" in page and '<span class="btn">👍 Helpful</span>' in page
    # Evidence and hostile text stay text in the page too.
    hostile = _script().mrkdwn_html("&lt;script&gt;alert(1)&lt;/script&gt; `&lt;b&gt;`")
    assert "<script>" not in hostile and "<b>" not in hostile
    assert "&lt;script&gt;" in hostile and "<code>&lt;b&gt;</code>" in hostile
