"""Block Kit rendering of a finished run's Execution Result: the final answer in its thread.

Untrusted text — everything the model wrote (summary, statements, scopes, list items) and the
check ids and scopes taken from its tool arguments — goes through ``mrkdwn`` (escaped, inert,
identifiers kept as written); the bot's own structure is always formatted (``*1. Finding:*``,
``_Evidence:_``, citations and check lines as ``*#1*``), which escaped text can never be. So
every line of a section begins with the bot's own text or a quote mark, and no text from the
model can look like a heading, a citation or a check line.

The header says what the answer is and how sure, once (``Diagnosis · HIGH confidence``, ``No
confirmed cause``, ``Stopped before a conclusion``, ``Diagnosis failed · no conclusion``); the
body does not repeat it. The first screen is short (the conclusion — or, without one, what is
missing — the top findings and the Evidence / feedback buttons); the rest follows a divider,
each check's scope said once (under *Checked*, from the run's own record). Times the bot shows
are Slack date tokens, the zone said once; the operator's numbers (run id, model calls, tokens)
sit in the last, quiet context line.

Every message stays inside the Block Kit limits (``blocks``) for any Draft the schema allows:
long texts are trimmed with a visible ``…`` and list overflow is marked ``(n more not shown)``.
The status message and the Evidence view are ``blocks``; the untrusted-text rules ``mrkdwn``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    DividerBlock,
    PlainTextObject,
    SectionBlock,
)

from sre_diag.contract.draft import AnalysisItem, CitedEvidence, Conclusion, DiagnosisDraft
from sre_diag.contract.result import Check, ExecutionResult, Outcome
from sre_diag.contract.text import STOP_EXPLANATIONS
from sre_diag.slack.blocks import (
    BUTTON_VALUE_MAX,
    EVIDENCE_ACTION_ID,
    FEEDBACK_DOWN_ACTION_ID,
    FEEDBACK_UP_ACTION_ID,
    MAX_BLOCKS,
    SlackMessage,
    context,
    header,
    message,
    pack,
    section,
    sections,
)
from sre_diag.slack.mrkdwn import (
    ID_MAX,
    ZONE_NOTE,
    check_title,
    fit,
    ident,
    more,
    mrkdwn_escape,
    quoted,
    slack_date,
    width,
)

__all__ = [
    "QUEUE_LOST_DETAIL",
    "REPLAY_NOTE",
    "WORKER_LOST_DETAIL",
    "AnswerExtras",
    "render_result",
]

# Our own budgets (escaped widths). Together they keep a maximum Draft well under MAX_BLOCKS.
_SUMMARY_MAX = 1500
_STATEMENT_MAX = 1500
_EVIDENCE_MAX = 1400
_LIST_ITEM_MAX = 700
_LIST_BLOCKS_MAX = 3
_CHECK_LINE_MAX = 400
_CHECK_BLOCKS_MAX = 10
_FIRST_SCREEN_FINDINGS = 2

NO_CONCLUSION_HEADER = "No confirmed cause"
STOPPED_HEADER = "Stopped before a conclusion"
FAILED_HEADER = "Diagnosis failed · no conclusion"

WORKER_LOST_DETAIL = "WORKER_LOST"
QUEUE_LOST_DETAIL = "QUEUE_LOST"
"""A queued run whose worker vanished (``sre_diag.service.worker``)."""
REPLAY_NOTE = ":repeat: Replay of this thread's question with the current version"


@dataclass(frozen=True, slots=True)
class AnswerExtras:
    """What a final answer shows besides its result: log check windows (by tool call id) and
    when the question was asked (as Slack dates), and which buttons it carries."""

    windows: Mapping[str, tuple[datetime, datetime]] = field(default_factory=dict)
    asked_at: datetime | None = None
    evidence: bool = False
    """The Evidence button (the answer cites checks whose observations are kept)."""
    feedback: bool = True
    """The 👍 / 👎 buttons."""


# --------------------------------------------------------------------------- checks


class _Checks:
    """The run's checks, each with a short 1-based index for citations."""

    def __init__(
        self,
        result: ExecutionResult,
        windows: Mapping[str, tuple[datetime, datetime]] | None = None,
    ) -> None:
        self.all: tuple[Check, ...] = result.progress.checks if result.progress else ()
        self.windows = windows or {}
        self._index: dict[str, int] = {}
        for n, check in enumerate(self.all, 1):
            self._index.setdefault(check.tool_call_id, n)

    def number(self, check: Check) -> int:
        return self._index[check.tool_call_id]

    def cite(self, tool_call_id: str) -> str:
        """``#1 query_logs``: the scope is said once, in the check list (``line``)."""
        n = self._index.get(tool_call_id)
        if n is None:
            return f"_not a check of this run:_ {fit(tool_call_id, 60)}"
        return f"*#{n}* {ident(self.all[n - 1].tool, 40)}"

    def cite_all(self, ids: Sequence[str]) -> str:
        return _fit_joined([self.cite(i) for i in ids], "; ", _EVIDENCE_MAX)

    def line(self, check: Check) -> str:
        window = self.windows.get(check.tool_call_id)
        label = check_title(check.tool, check.scope, window, _CHECK_LINE_MAX - 150)
        return f"*#{self.number(check)}* {label} — {_outcome(check)}"


_RETURNED = {
    "query_logs": ("line returned", "lines returned"),
    "query_mysql": ("row returned", "rows returned"),
    "lookup_knowledge": ("runbook section found", "runbook sections found"),
}


def _outcome(check: Check) -> str:
    """What a check gave, in words: ``20 lines returned``, ``failed (TIMEOUT)``."""
    if check.error_code:
        verb = "not run" if check.status == "REJECTED" else "failed"
        return f"{verb} ({ident(check.error_code, 60)})"
    one, many = _RETURNED.get(check.tool, ("item returned", "items returned"))
    return f"{check.item_count:,} {one if check.item_count == 1 else many}"


def _fit_joined(parts: Sequence[str], sep: str, limit: int) -> str:
    """Join already-escaped parts, dropping trailing ones with a visible mark if needed."""
    for keep in range(len(parts), 0, -1):
        tail = "" if keep == len(parts) else f"{sep}{more(len(parts) - keep)}"
        text = sep.join(parts[:keep]) + tail
        if width(text) <= limit:
            return text
    return more(len(parts))


def _checks_sections(title: str, checks: _Checks, selected: Sequence[Check]) -> list[Block]:
    if not selected:
        return [section(f"{title}\nNothing was checked.")]
    lines = [checks.line(c) for c in selected]
    return sections(pack(title, lines, max_blocks=_CHECK_BLOCKS_MAX))


# --------------------------------------------------------------------------- draft


def _conclusion_section(conclusion: Conclusion | None, checks: _Checks) -> SectionBlock:
    """The conclusion itself (the header already says how sure), and what it rests on."""
    if conclusion is None:
        return section(
            "The checks did not support a conclusion. What is still missing is listed below."
        )
    return section(
        f"{fit(conclusion.summary, _SUMMARY_MAX, quoted)}\n"
        f"_Evidence:_ {checks.cite_all(conclusion.evidence_tool_call_ids)}"
    )


def _analysis_section(n: int, item: AnalysisItem, checks: _Checks) -> SectionBlock:
    kind = "Finding" if item.kind == "FINDING" else "Negative observation"
    if isinstance(item.evidence, CitedEvidence):
        evidence = f"_Evidence:_ {checks.cite_all(item.evidence.tool_call_ids)}"
    else:
        evidence = f"_No evidence found in:_ {fit(item.evidence.scope, _EVIDENCE_MAX)}"
    statement = fit(item.statement, _STATEMENT_MAX, quoted)
    return section(f"*{n}. {kind}:*\n{statement}\n{evidence}")


def _list_sections(title: str, items: Sequence[str]) -> list[Block]:
    if not items:
        return []
    lines = [f"• {fit(item, _LIST_ITEM_MAX)}" for item in items]
    return sections(pack(f"*{title}*", lines, max_blocks=_LIST_BLOCKS_MAX))


def _top_findings(draft: DiagnosisDraft) -> list[int]:
    """The 1-based numbers of the analysis items shown on the first screen."""
    findings = [n for n, i in enumerate(draft.analysis, 1) if i.kind == "FINDING"]
    return findings[:_FIRST_SCREEN_FINDINGS]


def _checked_sections(draft: DiagnosisDraft, checks: _Checks) -> list[Block]:
    """*Checked*: each check of the run once, with its scope, from the run's own record. The
    model's own list of what it checked only restates them; it is shown when nothing was."""
    lines = [checks.line(c) for c in checks.all]
    if not lines:
        lines = [f"• {fit(item, _LIST_ITEM_MAX)}" for item in draft.limitations.checked_scope]
    if not lines:
        return []
    return sections(pack("*Checked*", lines, max_blocks=_LIST_BLOCKS_MAX))


def _draft_blocks(draft: DiagnosisDraft, checks: _Checks, buttons: Sequence[Block]) -> list[Block]:
    """First screen: conclusion (or, without one, what is missing), top findings, buttons.
    Below a divider: the rest."""
    top = _top_findings(draft)
    missing = _list_sections("Still missing", draft.limitations.missing_info)
    blocks: list[Block] = [_conclusion_section(draft.conclusion, checks)]
    if draft.conclusion is None:
        blocks += missing
    blocks += [_analysis_section(n, draft.analysis[n - 1], checks) for n in top]
    blocks += buttons
    rest = [
        _analysis_section(n, item, checks)
        for n, item in enumerate(draft.analysis, 1)
        if n not in top
    ]
    lists = (
        *_list_sections("Action plan", draft.action_plan),
        *_list_sections("Recommendations", draft.recommendations),
        *_checked_sections(draft, checks),
        *(missing if draft.conclusion is not None else ()),
    )
    if rest or lists:
        blocks.append(DividerBlock())
    if rest:
        blocks += [section("*More analysis*"), *rest]
    blocks += lists
    return blocks


def _draft_headline(draft: DiagnosisDraft) -> tuple[str, str]:
    """(header text, fallback summary) of a Draft: what it is and how sure, once."""
    c = draft.conclusion
    if c is None:
        return NO_CONCLUSION_HEADER, f"{NO_CONCLUSION_HEADER}: the checks did not support one"
    head = f"Diagnosis · {c.confidence.value} confidence"
    return head, f"{head}: {fit(c.summary, 2500)}"


# --------------------------------------------------------------------------- results


def _footer(result: ExecutionResult, asked_at: datetime | None = None) -> list[Block]:
    """Two quiet lines: when it was asked and how long it took (times in the reader's zone,
    said once); then the run id and what it cost, for the operator."""
    u = result.usage
    asked = [f"Asked {slack_date(asked_at)}"] if asked_at is not None else []
    when = " · ".join([*asked, f"answered in {_seconds(u.elapsed_ms)}", ZONE_NOTE])
    tokens = u.prompt_tokens + u.completion_tokens
    cost = (
        f"Run {fit(result.run_id, ID_MAX)} · {_plural(u.model_calls, 'model call')} · "
        f"{tokens:,} tokens · {_plural(u.tool_calls, 'tool call')}"
    )
    return [context(when), context(cost)]


def _seconds(elapsed_ms: int) -> str:
    seconds = elapsed_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _stop_text(result: ExecutionResult) -> str:
    if result.stop_reason is None:
        return "Stopped before a diagnosis was written."
    # The header already says it stopped: the body says why.
    why = STOP_EXPLANATIONS[result.stop_reason].removeprefix("Stopped: ")
    return mrkdwn_escape(why[:1].upper() + why[1:])


_FAILURES = {
    "INVALID_DRAFT": "the model's final answer could not be accepted",
    "MODEL_ERROR": "the model did not answer usably",
    "AGENT_ERROR": "the run hit an internal error",
}


def _failure_text(result: ExecutionResult) -> str:
    f = result.failure
    if f is None:
        return "Failed closed: nothing is concluded."
    why = _FAILURES.get(f.code.value, "it could not finish")
    text = f"Failed closed: {why}, so nothing is concluded."
    if f.detail == WORKER_LOST_DETAIL:
        text += (
            " The worker process running it was lost before it answered; nothing was run "
            "again. Use the *Replay diagnosis* shortcut on this message to ask it again."
        )
    elif f.detail == QUEUE_LOST_DETAIL:
        text += (
            " The run queue lost this request before any worker ran it (its Redis restarted "
            "empty or was cleared); nothing was run. Please ask again."
        )
    return text


def _failure_code(result: ExecutionResult) -> str:
    f = result.failure
    if f is None:
        return ""
    return f"Code {ident(f.code.value)} · {ident(f.detail)}"


def _body(
    result: ExecutionResult, checks: _Checks, buttons: Sequence[Block]
) -> tuple[str, str, list[Block]]:
    """(header, fallback summary, body blocks) for the result's outcome."""
    if result.outcome is Outcome.DRAFT and result.draft is not None:
        header, summary = _draft_headline(result.draft)
        return header, summary, _draft_blocks(result.draft, checks, buttons)
    if result.outcome is Outcome.STOPPED:
        stop = _stop_text(result)
        stopped = [
            section(stop),
            *buttons,
            *_checks_sections("*What was checked*", checks, checks.all),
        ]
        return STOPPED_HEADER, stop, stopped
    text = _failure_text(result)
    failed: list[Block] = [section(text)]
    code = _failure_code(result)
    if code:
        failed.append(context(code))
    failed += buttons
    if result.progress is not None:
        ready = [c for c in checks.all if c.status == "READY"]
        failed += _checks_sections("*Checks that completed*", checks, ready)
    return FAILED_HEADER, text, failed


def _answer_buttons(run_id: str, extras: AnswerExtras) -> list[Block]:
    """Evidence, 👍, 👎 (each carrying the run id), or nothing."""
    if not 1 <= len(run_id) <= BUTTON_VALUE_MAX:
        return []
    elements = []
    if extras.evidence:
        elements.append(
            ButtonElement(
                text=PlainTextObject(text="Evidence"), action_id=EVIDENCE_ACTION_ID, value=run_id
            )
        )
    if extras.feedback:
        for label, action_id in (
            (":+1: Helpful", FEEDBACK_UP_ACTION_ID),
            (":-1: Not helpful", FEEDBACK_DOWN_ACTION_ID),
        ):
            elements.append(
                ButtonElement(
                    text=PlainTextObject(text=label, emoji=True), action_id=action_id, value=run_id
                )
            )
    return [ActionsBlock(elements=elements)] if elements else []


def render_result(
    result: ExecutionResult, *, replay: bool = False, extras: AnswerExtras | None = None
) -> SlackMessage:
    """The thread message for a finished run (a Draft, a controlled stop or a closed failure).

    Without ``extras`` the answer carries the feedback buttons only and times as UTC text.
    """
    extras = extras or AnswerExtras()
    checks = _Checks(result, extras.windows)
    buttons = _answer_buttons(result.run_id, extras)
    title, summary, body = _body(result, checks, buttons)
    blocks: list[Block] = [header(title)]
    if replay:
        blocks.append(context(REPLAY_NOTE))
    blocks += body[: MAX_BLOCKS - len(blocks) - 3]  # the budgets above keep this a no-op
    blocks += [DividerBlock(), *_footer(result, extras.asked_at)]
    prefix = "Replay — " if replay else ""
    return message(f"{prefix}{summary} (run {fit(result.run_id, ID_MAX)})", blocks)
