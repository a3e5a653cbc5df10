"""A plain-text rendering of an Execution Result, for the terminal (demo, replay).

Untrusted text — everything the model wrote, and the check ids and scopes taken from its tool
arguments — cannot fake this layout. A single-line field is folded onto one line by
:func:`one_line` (line breaks, tabs and other control characters become spaces; zero-width,
bidi and other format characters are dropped, so neither a terminal escape nor a reordered line
survives). A multi-line field (summary, statement) keeps its lines, each behind ``> ``, a prefix
none of the bot's own lines uses. So every line of the output begins with the bot's own text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sre_diag.contract.draft import CitedEvidence, DiagnosisDraft
from sre_diag.contract.result import Check, ExecutionResult, Outcome
from sre_diag.errors import StopReason

__all__ = [
    "BLANK",
    "STOP_EXPLANATIONS",
    "EvidenceCheck",
    "EvidenceLine",
    "check_label",
    "distinct_scopes",
    "evidence_lines",
    "one_line",
    "render_evidence_text",
    "render_text",
    "text_lines",
]

STOP_EXPLANATIONS = {
    StopReason.INFORMATION_SATURATED: (
        "Stopped: further checks were not adding information, and the model did not write "
        "its final answer when asked to."
    ),
    StopReason.MODEL_CALL_BUDGET_EXHAUSTED: "Stopped: the run used all of its model rounds.",
    StopReason.TOOL_CALL_BUDGET_EXHAUSTED: (
        "Stopped: the run used all of its tool calls, and the model did not write its final "
        "answer when asked to."
    ),
    StopReason.TOKEN_BUDGET_EXHAUSTED: (
        "Stopped: the run used all of its token budget (or of its room for evidence)."
    ),
    StopReason.DEADLINE_EXCEEDED: "Stopped: the run reached its time limit.",
    StopReason.CANCELLED: "Stopped: the run was cancelled.",
}

BLANK = "(no visible text)"
"""What stands for untrusted text that has nothing visible left once neutralised."""

_DROPPED = frozenset({"Cf", "Cs"})  # format (zero-width, bidi, BOM, tags) and lone surrogates
_SPACED = frozenset({"Cc", "Zl", "Zp"})  # controls (incl. ESC, NEL) and line/paragraph separators
_QUOTE = "> "


def one_line(text: str) -> str:
    """``text`` as one line: controls and whitespace runs become one space, format characters
    are dropped, the ends are stripped. May be empty."""
    kept = [
        " " if unicodedata.category(c) in _SPACED else c
        for c in text
        if unicodedata.category(c) not in _DROPPED
    ]
    return " ".join("".join(kept).split())


def text_lines(text: str) -> list[str]:
    """The non-blank lines of multi-line ``text``, each made safe by :func:`one_line`."""
    lines = (one_line(line) for line in text.splitlines())
    return [line for line in lines if line]


def check_label(check: Check) -> str:
    """``query_logs · payment-api · ERROR · 10:00–10:30 UTC`` style label of a check (one line)."""
    scope = one_line(check.scope or "")
    tool = one_line(check.tool) or BLANK
    return f"{tool} · {scope}" if scope else tool


def render_text(result: ExecutionResult) -> str:
    run, session = one_line(result.run_id), one_line(result.session_id)
    lines = [f"Diagnosis {run} (session {session}): {result.outcome.value}"]
    checks = _Index(result.progress.checks if result.progress else ())
    if result.outcome is Outcome.DRAFT and result.draft is not None:
        lines += _draft_lines(result.draft, checks)
    elif result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        lines.append(STOP_EXPLANATIONS[result.stop_reason])
    elif result.failure is not None:
        lines.append(
            f"Failed closed ({result.failure.code.value}: {one_line(result.failure.detail)}); "
            "no diagnosis was produced."
        )
    lines += checks.lines()
    u = result.usage
    lines.append(
        f"Usage: {u.model_calls} model calls, {u.prompt_tokens}+{u.completion_tokens} tokens, "
        f"{u.tool_calls} tool calls, {u.bytes} bytes, {u.elapsed_ms} ms"
    )
    return "\n".join(lines)


class _Index:
    """The run's checks, numbered ``#1``… as in Slack; citations name the number."""

    def __init__(self, checks: tuple[Check, ...]) -> None:
        self.checks = checks
        self._number: dict[str, int] = {}
        for n, check in enumerate(checks, 1):
            self._number.setdefault(check.tool_call_id, n)

    def cite(self, ids: tuple[str, ...]) -> str:
        return "; ".join(self._cite_one(i) for i in ids)

    def _cite_one(self, tool_call_id: str) -> str:
        n = self._number.get(tool_call_id)
        if n is None:
            return f"{one_line(tool_call_id) or BLANK} (not a check of this run)"
        return f"#{n} {one_line(self.checks[n - 1].tool) or BLANK}"  # its scope: under Checks

    def lines(self) -> list[str]:
        if not self.checks:
            return ["Checks: none"]
        lines = ["Checks:"]
        for n, check in enumerate(self.checks, 1):
            detail = one_line(check.error_code or "") or f"{check.item_count} items"
            evaluation = f", {one_line(check.evaluation)}" if check.evaluation else ""
            lines.append(
                f"  #{n} {check_label(check)} → {one_line(check.status)} "
                f"({detail}{evaluation}) [id {one_line(check.tool_call_id) or BLANK}]"
            )
        return lines


def _quoted(text: str, indent: str) -> list[str]:
    return [f"{indent}{_QUOTE}{line}" for line in text_lines(text) or [BLANK]]


def _draft_lines(draft: DiagnosisDraft, checks: _Index) -> list[str]:
    """The Draft; its checked scope leaves out what the check list below already says."""
    lines: list[str] = []
    if draft.conclusion is None:
        lines.append("No confirmed conclusion.")
    else:
        c = draft.conclusion
        lines.append(f"Conclusion [{c.confidence.value}]:")
        lines += _quoted(c.summary, "  ")
        lines.append(f"  evidence: {checks.cite(c.evidence_tool_call_ids)}")
    if draft.analysis:
        lines.append("Analysis:")
    for n, item in enumerate(draft.analysis, 1):
        lines.append(f"  {n}. {item.kind}:")
        lines += _quoted(item.statement, "     ")
        if isinstance(item.evidence, CitedEvidence):
            lines.append(f"     evidence: {checks.cite(item.evidence.tool_call_ids)}")
        else:
            lines.append(f"     no evidence found in: {one_line(item.evidence.scope) or BLANK}")
    for title, items in (
        ("Action plan", draft.action_plan),
        ("Recommendations", draft.recommendations),
        ("Also checked", distinct_scopes(draft.limitations.checked_scope, checks.checks)),
        ("Still missing", draft.limitations.missing_info),
    ):
        if items:
            lines.append(f"{title}:")
            lines += [f"  - {one_line(text) or BLANK}" for text in items]
    return lines


# --------------------------------------------------------------------------- scopes said once

_TOKEN = re.compile(r"\w+")
_NOISE_TOKENS = frozenset({"utc", "top"})


def _tokens(text: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(one_line(text).casefold())) - _NOISE_TOKENS


def distinct_scopes(items: Iterable[str], checks: Sequence[Check]) -> list[str]:
    """The model's ``checked_scope`` items that do not repeat a check's scope.

    The run's checks are listed anyway (each scope once, from the ledger); an item is a repeat
    when it carries every word of some check's scope (``payment-api ERROR 日志 10:00–10:30``
    repeats ``payment-api · ERROR · 10:00–10:30 UTC``), or is the same text.
    """
    scopes = [_tokens(c.scope or "") for c in checks]
    scopes = [s for s in scopes if s]
    kept: list[str] = []
    seen: set[str] = set()
    for item in items:
        key, words = one_line(item).casefold(), _tokens(item)
        if key in seen or (words and any(scope <= words for scope in scopes)):
            continue
        seen.add(key)
        kept.append(item)
    return kept


# --------------------------------------------------------------------------- evidence

EvidenceLine = tuple[str, str]
"""(our label, untrusted text): a renderer formats the label and neutralises the text."""

_SPARKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True, slots=True)
class EvidenceCheck:
    """One cited check's READY observation, exactly as the model saw it."""

    number: int
    tool_call_id: str
    tool: str
    scope: str | None
    observation: Mapping[str, Any]

    @property
    def label(self) -> str:
        scope = one_line(self.scope or "")
        tool = one_line(self.tool) or BLANK
        return f"{tool} · {scope}" if scope else tool

    @property
    def truncated(self) -> bool:
        return self.observation.get("truncated") is True


def _plain(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _pairs(cells: Mapping[str, Any]) -> str:
    return " · ".join(f"{key}={_plain(value)}" for key, value in cells.items())


def _item_text(item: object) -> str:
    """One observation item as a readable line (log line, row, runbook snippet, or fields)."""
    if not isinstance(item, Mapping):
        return one_line(_plain(item))
    if {"ts", "level", "message"} <= item.keys():
        service = f" {_plain(item.get('service'))}" if item.get("service") else ""
        text = f"{_plain(item['ts'])} {_plain(item['level'])}{service}: {_plain(item['message'])}"
    elif {"title", "snippet"} <= item.keys():
        where = f" ({_plain(item['path'])})" if item.get("path") else ""
        heading = f" › {_plain(item['heading'])}" if item.get("heading") else ""
        text = f"{_plain(item['title'])}{heading}{where}: {_plain(item['snippet'])}"
    elif isinstance(item.get("cells"), Mapping) and len(item) == 1:
        text = _pairs(item["cells"])
    else:
        text = _pairs(item)
    return one_line(text)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sparkline(counts: Sequence[int]) -> str:
    peak = max(counts, default=0)
    if peak <= 0:
        return _SPARKS[0] * len(counts)
    return "".join(_SPARKS[min(c * (len(_SPARKS) - 1) // peak, len(_SPARKS) - 1)] for c in counts)


def _summary_lines(summary: Mapping[str, Any]) -> list[EvidenceLine]:
    lines: list[EvidenceLine] = []
    matched = _int(summary.get("matched"))
    if matched is not None:
        exact = "" if summary.get("exact") is True else " (estimated)"
        lines.append(("Matching lines", f"{matched}{exact}"))
    first, last = summary.get("first_ts"), summary.get("last_ts")
    if first or last:
        lines.append(("First / last", f"{_plain(first or '-')} / {_plain(last or '-')}"))
    buckets = summary.get("buckets")
    if isinstance(buckets, Mapping):
        counts = [c for c in buckets.get("counts") or [] if _int(c) is not None and c >= 0]
        width = _int(buckets.get("width_seconds"))
        if counts and width:
            lines.append(
                (
                    f"Per {width} s from",
                    f"{_plain(buckets.get('start'))}: {_sparkline(counts)} (peak {max(counts)})",
                )
            )
    for top in summary.get("top_messages") or []:
        if isinstance(top, Mapping):
            lines.append((f"{_int(top.get('count')) or 0}×", one_line(_plain(top.get("pattern")))))
    return lines


def evidence_lines(observation: Mapping[str, Any]) -> tuple[list[EvidenceLine], list[str]]:
    """The log ``summary`` (when present) as labelled lines, and the items, one line each."""
    summary = observation.get("summary")
    head = _summary_lines(summary) if isinstance(summary, Mapping) else []
    items = observation.get("items")
    lines = [_item_text(item) for item in items] if isinstance(items, list) else []
    return head, [line or BLANK for line in lines]


def render_evidence_text(run_id: str, checks: Sequence[EvidenceCheck]) -> str:
    """The evidence view as plain text (every line begins with our own text)."""
    lines = [f"Evidence of run {one_line(run_id)}: what the model saw for the cited checks"]
    if not checks:
        lines.append("  (no cited check kept evidence)")
    for check in checks:
        count = len(check.observation.get("items") or [])
        more = ", more were left out" if check.truncated else ""
        lines.append(f"  #{check.number} {check.label} ({count} items{more})")
        head, items = evidence_lines(check.observation)
        lines += [f"     {label}: {one_line(text)}" for label, text in head]
        lines += [f"     {_QUOTE}{text}" for text in items]
    return "\n".join(lines)
