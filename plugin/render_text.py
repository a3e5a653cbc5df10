"""A plain-text rendering of an Execution Result, for the terminal (demo, replay).

Untrusted text — everything the model wrote, and the check ids and scopes taken from its tool
arguments — cannot fake this layout. A single-line field is folded onto one line by
:func:`one_line` (line breaks, tabs and other control characters become spaces; zero-width,
bidi and other format characters are dropped, so neither a terminal escape nor a reordered line
survives). A multi-line field (summary, statement) keeps its lines, each behind ``> ``, a prefix
none of the bot's own lines uses. So every line of the output begins with the bot's own text.
"""

from __future__ import annotations

import unicodedata

from plugin.draft import CitedEvidence, DiagnosisDraft
from plugin.errors import StopReason
from plugin.result import Check, ExecutionResult, Outcome

__all__ = [
    "BLANK",
    "STOP_EXPLANATIONS",
    "check_label",
    "one_line",
    "render_text",
    "text_lines",
]

STOP_EXPLANATIONS = {
    StopReason.INFORMATION_SATURATED: (
        "Stopped: further checks were not adding information, and the model did not write "
        "its final answer when asked to."
    ),
    StopReason.MODEL_CALL_BUDGET_EXHAUSTED: "Stopped: the run used all of its model rounds.",
    StopReason.TOKEN_BUDGET_EXHAUSTED: "Stopped: the run used all of its token budget.",
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
        return f"#{n} {check_label(self.checks[n - 1])}"

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
        ("Checked", draft.limitations.checked_scope),
        ("Still missing", draft.limitations.missing_info),
    ):
        if items:
            lines.append(f"{title}:")
            lines += [f"  - {one_line(text) or BLANK}" for text in items]
    return lines
