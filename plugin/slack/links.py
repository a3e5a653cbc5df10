"""Evidence that links to its source (CONTRACTS §2, §10): a Loki log check opens in Grafana
Explore with the same LogQL and window, a cited runbook section opens at its page and heading.

Links are built only from our own typed inputs and settings, never from model text: the LogQL
is :func:`sre_diag.tools.logs.build_logql` of the check's validated ``query_logs`` input (what the
adapter sent to Loki), the window is that input's ``start`` / ``end``; a runbook link is the
``DIAG_RUNBOOK_URL`` template filled with the section's path and heading as our knowledge
adapter returned them, each percent-encoded. Every URL is ASCII without spaces, ``<``, ``>`` or
``|``, so it can sit inside a Slack link (``<url|label>``) as it is.

Grafana Explore is opened with the ``panes`` parameter (Grafana 10 and later): one pane whose
datasource is ``DIAG_GRAFANA_LOKI_UID``, one query (``expr``: the LogQL) and the window as epoch
milliseconds. Anchors are GitHub's: the heading lower-cased, every character that is not a
letter, a digit, a mark, a space, ``-`` or ``_`` dropped, spaces as ``-`` (CJK kept, then
percent-encoded); a heading repeated in one page gets GitHub's ``-1``, ``-2``… suffix, read
from the runbook itself (``DIAG_KNOWLEDGE_DIR``, the same checks as indexing) so the section
whose heading chain the knowledge adapter returned links to its own occurrence.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.tools.logs import build_logql
from sre_diag.tools.runbooks import HEADING_SEPARATOR, heading_chains, read_runbook
from sre_diag.tools.schemas import LogsInput

__all__ = [
    "Link",
    "LinkMaker",
    "explore_url",
    "github_anchor",
    "page_anchors",
    "runbook_link",
]

_log = logging.getLogger(__name__)

_SAFE_URL = re.compile(r"https?://[!#-;=?-\[\]_a-z~]+")
"""Printable ASCII without space, ``"``, ``<``, ``>``, ``\\``, ``^``, backtick, ``{``, ``|``,
``}``: what a percent-encoded URL is made of and a Slack link can hold."""
_LINKS_PER_CHECK = 5
_CUT = "…"
_PANE = "diag"


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a check in the Evidence view: our label, our URL."""

    label: str
    url: str


def safe_url(url: str) -> bool:
    return _SAFE_URL.fullmatch(url) is not None


def explore_url(
    base: str, datasource_uid: str, logql: str, start: datetime, end: datetime, org_id: int = 1
) -> str:
    """Grafana Explore at ``base`` (organisation ``org_id``) showing ``logql`` on the Loki
    datasource over the window."""
    pane = {
        _PANE: {
            "datasource": datasource_uid,
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": "loki", "uid": datasource_uid},
                    "expr": logql,
                    "queryType": "range",
                }
            ],
            "range": {"from": str(_epoch_ms(start)), "to": str(_epoch_ms(end))},
        }
    }
    panes = quote(json.dumps(pane, separators=(",", ":"), ensure_ascii=False), safe="")
    return f"{base.rstrip('/')}/explore?schemaVersion=1&orgId={int(org_id)}&panes={panes}"


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (see the module docs)."""
    kept = [
        ch
        for ch in heading.strip().lower()
        if ch in " -_" or unicodedata.category(ch)[0] in {"L", "N", "M"}
    ]
    return "".join(kept).replace(" ", "-")


def page_anchors(rel: str, text: str) -> dict[str, str]:
    """The anchor of each heading chain of one runbook, as GitHub numbers repeated headings
    (``mitigation``, ``mitigation-1``…; a chain seen twice keeps its first occurrence)."""
    seen: dict[str, int] = {}
    anchors: dict[str, str] = {}
    for chain, own, _ in heading_chains(rel, text):
        if own is None:
            continue
        base = slug = github_anchor(own)
        while slug in seen:
            seen[base] += 1
            slug = f"{base}-{seen[base]}"
        seen[slug] = 0
        anchors.setdefault(chain, slug)
    return anchors


def _safe_path(path: str) -> bool:
    parts = path.split("/")
    plain = not path.startswith("/") and "\\" not in path
    return bool(path) and plain and ".." not in parts and "" not in parts


def runbook_link(
    template: str, path: str, heading: str, anchors: Mapping[str, str] | None = None
) -> str | None:
    """The page of a runbook section (``{path}``) at its heading (``{anchor}``: from
    ``anchors``, the page's :func:`page_anchors`, when it knows the chain); None for a path
    that is not a plain relative one. A heading cut for display links to the page."""
    if not _safe_path(path):
        return None
    own = heading.split(HEADING_SEPARATOR)[-1]
    known = (anchors or {}).get(heading)
    slug = known if known is not None else github_anchor(own)
    anchor = "" if own.endswith(_CUT) else quote(slug, safe="")
    url = template.replace("{path}", quote(path, safe="/")).replace("{anchor}", anchor)
    return url.removesuffix("#") if not anchor else url


class LinkMaker:
    """The links of one deployment's settings; a check without any gets none."""

    def __init__(self, settings: Settings) -> None:
        loki = (settings.logs_source or "").strip().lower().startswith(("http://", "https://"))
        self.grafana = (
            (settings.grafana_url, settings.grafana_loki_uid)
            if loki and settings.grafana_url and settings.grafana_loki_uid
            else None
        )
        self.org_id = settings.grafana_org_id
        self.label = settings.loki_service_label
        self.line_format = settings.loki_line_format
        self.runbook = settings.runbook_url
        self.knowledge_dir = settings.knowledge_dir

    @property
    def enabled(self) -> bool:
        return self.grafana is not None or self.runbook is not None

    def of(
        self, tool: str, business_input: Mapping[str, Any] | None, observation: Mapping[str, Any]
    ) -> list[Link]:
        """The links of one READY check: never raises, never reads model text."""
        try:
            if tool == "query_logs":
                return self._logs(business_input)
            if tool == "lookup_knowledge":
                return self._sections(observation.get("items"))
        except Exception as exc:  # a link is a convenience: the evidence shows without it
            log_failure(_log, logging.WARNING, "evidence link not built: %s", exc=exc)
        return []

    def _logs(self, business_input: Mapping[str, Any] | None) -> list[Link]:
        if self.grafana is None or business_input is None:
            return []
        try:
            typed = LogsInput.model_validate_json(json.dumps(dict(business_input), default=str))
        except ValidationError:
            return []
        base, uid = self.grafana
        logql = build_logql(typed, self.label, self.line_format)
        url = explore_url(base, uid, logql, typed.start, typed.end, self.org_id)
        return [Link("Open in Grafana Explore", url)] if safe_url(url) else []

    def _sections(self, items: object) -> list[Link]:
        if self.runbook is None or not isinstance(items, list):
            return []
        links: list[Link] = []
        pages: dict[str, dict[str, str]] = {}
        for item in items:
            if not isinstance(item, dict) or len(links) >= _LINKS_PER_CHECK:
                continue
            path, heading = item.get("path"), item.get("heading")
            if not isinstance(path, str) or not isinstance(heading, str):
                continue
            if path not in pages:
                pages[path] = self._anchors(path)
            url = runbook_link(self.runbook, path, heading, pages[path])
            if url is not None and safe_url(url) and all(url != link.url for link in links):
                links.append(Link(f"{path} › {heading}", url))
        return links

    def _anchors(self, path: str) -> dict[str, str]:
        if self.knowledge_dir is None or not _safe_path(path):
            return {}
        text = read_runbook(self.knowledge_dir, path)
        return page_anchors(path, text) if text is not None else {}


def dump_links(links: Mapping[str, Sequence[Link]]) -> dict[str, list[dict[str, str]]]:
    return {k: [{"label": v.label, "url": v.url} for v in vs] for k, vs in links.items() if vs}


def load_links(data: object) -> dict[str, list[Link]]:
    """Links kept with an answer's evidence; anything not in their shape is dropped."""
    if not isinstance(data, dict):
        return {}
    loaded: dict[str, list[Link]] = {}
    for key, values in data.items():
        kept = [
            Link(v["label"], v["url"])
            for v in values if isinstance(values, list)
            if isinstance(v, dict) and isinstance(v.get("label"), str)
            and isinstance(v.get("url"), str) and safe_url(v["url"])
        ]  # fmt: skip
        if isinstance(key, str) and kept:
            loaded[key] = kept
    return loaded
