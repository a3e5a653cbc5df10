"""Evidence that links to its source (CONTRACTS §2, §10): the Grafana Explore link of a Loki log
check decodes back to the same LogQL and window; a runbook section's link to its page and
GitHub-style heading anchor (CJK included) decodes back too; links come only from our typed
inputs, our adapter's output and the settings, and only with the settings set."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from sre_diag.contract.text import EvidenceCheck
from sre_diag.slack.blocks import render_evidence
from sre_diag.slack.links import LinkMaker, explore_url, github_anchor, runbook_link, safe_url
from sre_diag.tools.logs import build_logql
from sre_diag.tools.schemas import LogsInput
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, settings_for, tool_step
from tests.slack.support import answer_button, blocks_of, button_payload, slack_rig

GRAFANA = "https://grafana.example.com/"
LINK_ENV = {
    "DIAG_LOGS_SOURCE": "http://loki.internal:3100",
    "DIAG_GRAFANA_URL": GRAFANA,
    "DIAG_GRAFANA_LOKI_UID": "loki-prod",
    "DIAG_RUNBOOK_URL": "https://wiki.example.com/runbooks/{path}#{anchor}",
}
_LINK = re.compile(r"<(https://[^|>]+)\|([^>]*)>")


def _pane(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    assert parts.scheme == "https" and parts.netloc == "grafana.example.com"
    assert parts.path == "/explore"
    query = parse_qs(parts.query, strict_parsing=True)
    assert query["schemaVersion"] == ["1"]
    [panes] = query["panes"]
    [pane] = json.loads(panes).values()
    return dict(pane)


@pytest.mark.parametrize(
    "contains",
    [None, 'pool "exhausted" & #42 | <x>', "订单 ord_10290 失败", "100% ${x} {a} \\d+"],
)
def test_the_explore_link_decodes_back_to_the_same_logql_and_window(contains: str | None) -> None:
    typed = LogsInput.model_validate_json(json.dumps({**LOGS_INPUT, "contains": contains}))
    logql = build_logql(typed, "app", "logfmt")
    url = explore_url(GRAFANA, "loki-prod", logql, typed.start, typed.end)
    assert safe_url(url)
    pane = _pane(url)
    assert pane["datasource"] == "loki-prod"
    [query] = pane["queries"]
    assert query["expr"] == logql and query["datasource"] == {"type": "loki", "uid": "loki-prod"}
    start = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    end = datetime(2026, 11, 28, 10, 30, tzinfo=UTC)
    assert pane["range"] == {
        "from": str(int(start.timestamp() * 1000)),
        "to": str(int(end.timestamp() * 1000)),
    }


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("DB pool exhausted", "db-pool-exhausted"),
        ("Step 1: Roll back v2.14.0!", "step-1-roll-back-v2140"),
        ("数据库连接池耗尽（DB Pool）", "数据库连接池耗尽db-pool"),
        ("步骤 0", "步骤-0"),
        ("Café — résumé", "café--résumé"),
        ("snake_case & `code`", "snake_case--code"),
        ("  trimmed  ", "trimmed"),
    ],
)
def test_github_anchors(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_a_runbook_link_decodes_back_to_its_page_and_heading() -> None:
    template = "https://wiki.example.com/runbooks/{path}#{anchor}"
    url = runbook_link(template, "payment/db pool #2.md", "Payment API > 数据库连接池耗尽")
    assert url is not None and safe_url(url)
    parts = urlsplit(url)
    assert unquote(parts.path) == "/runbooks/payment/db pool #2.md"
    assert unquote(parts.fragment) == "数据库连接池耗尽"
    page = runbook_link(template, "payment.md", "A very long heading cut for display…")
    assert page == "https://wiki.example.com/runbooks/payment.md"
    for bad in ("../secrets.md", "/etc/passwd", "a//b.md", "a\\b.md", ""):
        assert runbook_link(template, bad, "x") is None


def _maker(tmp_path: Path, model: Any, **env: str) -> LinkMaker:
    return LinkMaker(settings_for(model, tmp_path, **env))


async def test_links_only_with_their_settings(model_server: StartServer, tmp_path: Path) -> None:
    model = await model_server([])
    logs = {"items": []}
    sections = {"items": [{"path": "p.md", "heading": "H", "title": "T"}]}
    assert _maker(tmp_path, model).of("query_logs", LOGS_INPUT, logs) == []
    assert _maker(tmp_path, model).of("lookup_knowledge", None, sections) == []
    folder = {**LINK_ENV, "DIAG_LOGS_SOURCE": str(tmp_path)}  # not Loki: nothing to open
    assert _maker(tmp_path, model, **folder).of("query_logs", LOGS_INPUT, logs) == []
    maker = _maker(tmp_path, model, **LINK_ENV)
    assert maker.of("query_logs", {"service": "x"}, logs) == []  # not a valid input: no link
    assert maker.of("query_mysql", {"sql": "SELECT 1"}, logs) == []
    [link] = maker.of("lookup_knowledge", None, sections)
    assert link.url == "https://wiki.example.com/runbooks/p.md#h"


def test_hostile_runbook_paths_and_headings_stay_inert() -> None:
    check = EvidenceCheck(1, "call-1", "lookup_knowledge", "kb", {"items": []})
    from sre_diag.slack.links import Link

    hostile = Link("a|b> <!here> *x*", "https://wiki.example.com/a%7Cb%3E.md")
    spoofed = Link("evil", "https://evil.example/<!channel>|x")
    message = render_evidence("run-1", [check], {"call-1": [hostile, spoofed]})
    text = json.dumps(message.blocks)
    assert "<!here>" not in text and "evil.example" not in text
    assert "https://wiki.example.com/a%7Cb%3E.md|" in text


async def test_the_evidence_view_links_to_grafana_and_the_runbook(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server(
        [
            tool_step(call("call-1", "query_logs", LOGS_INPUT)),
            tool_step(call("call-2", "lookup_knowledge", {"query": "pool"}, ("call-1", "GAINED"))),
            final_step(draft_json(["call-1", "call-2"])),
        ]
    )
    async with slack_rig(model, tmp_path, **LINK_ENV) as rig:
        await rig.mention("<@UDIAG0001> payment-api 5xx", ts="1764300000.000100")
        await rig.handle.manager.wait_idle()
        button = answer_button(rig, "diag_evidence")
        await rig.interact(button_payload("diag_evidence", button["value"]))
        evidence = rig.posts()[-1]
    text = json.dumps(blocks_of(evidence), ensure_ascii=False)
    links = [(url.replace("&amp;", "&"), label) for url, label in _LINK.findall(text)]
    [grafana] = [url for url, label in links if label == "Open in Grafana Explore"]
    pane = _pane(grafana)
    typed = LogsInput.model_validate_json(json.dumps(LOGS_INPUT))
    assert pane["queries"][0]["expr"] == build_logql(typed, "service", "json")
    runbooks = [url for url, label in links if "runbooks" in url]
    assert runbooks and all(
        url.startswith("https://wiki.example.com/runbooks/") for url in runbooks
    )
    assert unquote(urlsplit(runbooks[0]).fragment) == "步骤-0"
    assert unquote(urlsplit(runbooks[0]).path) == "/runbooks/payment-api.zh.md"


_REPEATED = """# Payment API

Intro.

## Checkout 5xx

Look at the pool.

### Mitigation

Restart checkout.

## Refund 5xx

### Mitigation

Restart refunds.

```
## Mitigation
```

## Mitigation

Page the DBA.

## Mitigation-1

A heading whose own slug was taken by a repeat.
"""


async def test_a_repeated_heading_links_to_its_own_occurrence(
    model_server: StartServer, tmp_path: Path
) -> None:
    """GitHub numbers a repeated heading (``mitigation``, ``mitigation-1``…, a fenced line is no
    heading): each section the knowledge index returns links to its own occurrence."""
    from sre_diag.tools.runbooks import iter_sections

    model = await model_server([])
    runbooks = tmp_path / "runbooks"
    (runbooks / "pay").mkdir(parents=True)
    (runbooks / "pay" / "api.md").write_text(_REPEATED, encoding="utf-8")
    (tmp_path / "elsewhere.md").write_text(_REPEATED, encoding="utf-8")
    (runbooks / "outside.md").symlink_to(tmp_path / "elsewhere.md")  # not served: not read
    maker = _maker(tmp_path, model, **LINK_ENV, DIAG_KNOWLEDGE_DIR=str(runbooks))
    found = {}
    for section in iter_sections(runbooks):
        items = {"items": [{"path": section.path, "heading": section.heading}]}
        [link] = maker.of("lookup_knowledge", None, items)
        found[section.heading] = unquote(urlsplit(link.url).fragment)
    assert found == {
        "Payment API": "payment-api",
        "Checkout 5xx": "checkout-5xx",
        "Checkout 5xx > Mitigation": "mitigation",
        "Refund 5xx > Mitigation": "mitigation-1",
        "Mitigation": "mitigation-2",
        "Mitigation-1": "mitigation-1-1",
    }
    symlinked = {"items": [{"path": "outside.md", "heading": "Refund 5xx > Mitigation"}]}
    [plain] = maker.of("lookup_knowledge", None, symlinked)
    assert plain.url.endswith("outside.md#mitigation")  # the file is not read: GitHub's base slug
    unknown = {"items": [{"path": "pay/api.md", "heading": "Gone > Mitigation"}]}
    [fallback] = maker.of("lookup_knowledge", None, unknown)
    assert fallback.url.endswith("pay/api.md#mitigation")
