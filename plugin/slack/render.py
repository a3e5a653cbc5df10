"""Block Kit rendering of Execution Results and live status views for Slack threads.

Untrusted text — everything the model wrote (summary, statements, scopes, list items) and the
check ids and scopes taken from its tool arguments — cannot fake the layout or act in Slack:

- a single-line field goes through :func:`mrkdwn_escape`: folded onto one line (line breaks
  and controls become spaces, zero-width/bidi/format characters are dropped), ``& < >``
  escaped — the only escaping mrkdwn needs (so ``<!here>``, ``<@U…>``, ``<#C…>``, links and
  ``&lt;`` entities show as typed) — ``@here``/``@channel``/``@everyone`` defused, and every
  word that carries a mrkdwn mark (``* _ ~``) put inside a code span, where nothing formats:
  the text is kept as written, so ``ord_10290`` or ``ERR_DB_POOL`` copied from the answer or
  the Evidence view is byte-identical (and shown as code). A backtick, which a code span
  cannot hold, is the one character shown as a look-alike (``ˋ``); it is never part of an
  identifier. :func:`escape` is the same without the code spans, for text Slack reads with
  mrkdwn off (the plain fallback answer), where no mark formats anything;
- a multi-line field (summary, statement) keeps its lines, each escaped the same way and
  quoted (``> ``);
- the bot's own structure is always formatted (``*Conclusion*``, ``*1. Finding:*``,
  ``_Evidence:_``, citations and check lines as ``*#1*``), which escaped text can never be.

So every line of a section begins with the bot's own text or a quote mark, and no text from the
model can look like a heading, a citation or a check line. The evidence view (the observations
behind an answer's citations: log lines, rows, runbook snippets) is untrusted the same way.

Times the bot itself produced (a log check's window, when the question was asked) are Slack
date tokens (``<!date^UNIX^{date_short_pretty} {time}|2026-11-28 10:00 UTC>``), so every
reader sees local time; times inside model or evidence text stay text.

A final answer's first screen is short (conclusion, confidence, the top findings and the
Evidence / feedback buttons); the rest follows a divider, each scope said once (under
*Checked*).

Every message stays inside the Block Kit limits for any Draft the schema allows: long texts are
trimmed with a visible ``…`` and list overflow is marked ``(n more not shown)``. Lengths are
measured in UTF-16 code units, which is never less than the code-point count slack_sdk checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from plugin.contract.draft import AnalysisItem, CitedEvidence, Conclusion, DiagnosisDraft
from plugin.contract.result import Check, ExecutionResult, Outcome
from plugin.contract.text import (
    BLANK,
    STOP_EXPLANATIONS,
    EvidenceCheck,
    distinct_scopes,
    evidence_lines,
    one_line,
)
from plugin.slack.links import Link, safe_url

__all__ = [
    "CANCEL_ACTION_ID",
    "EVIDENCE_ACTION_ID",
    "FEEDBACK_DOWN_ACTION_ID",
    "FEEDBACK_UP_ACTION_ID",
    "MAX_BLOCKS",
    "AnswerExtras",
    "SlackMessage",
    "StatusView",
    "escape",
    "mrkdwn_escape",
    "render_evidence",
    "render_result",
    "render_status",
    "slack_date",
]

CANCEL_ACTION_ID = "diag_cancel"
EVIDENCE_ACTION_ID = "diag_evidence"
FEEDBACK_UP_ACTION_ID = "diag_feedback_up"
FEEDBACK_DOWN_ACTION_ID = "diag_feedback_down"

# Block Kit limits.
MAX_BLOCKS = 50
SECTION_TEXT_MAX = 3000
HEADER_TEXT_MAX = 150
CONTEXT_ELEMENTS_MAX = 10
BUTTON_TEXT_MAX = 75
BUTTON_VALUE_MAX = 2000
FALLBACK_TEXT_MAX = 3000

# Our own budgets (escaped widths). Together they keep a maximum Draft well under MAX_BLOCKS.
_PACK_MAX = SECTION_TEXT_MAX - 40  # room left in a section for the "(n more not shown)" mark
_SUMMARY_MAX = 1500
_STATEMENT_MAX = 1500
_EVIDENCE_MAX = 1400
_LABEL_MAX = 120
_LIST_ITEM_MAX = 700
_LIST_BLOCKS_MAX = 3
_CHECK_LINE_MAX = 400
_CHECK_BLOCKS_MAX = 10
_ID_MAX = 200
_NOTE_MAX = 1000
_FIRST_SCREEN_FINDINGS = 2
_EVIDENCE_CHECKS_MAX = 12
_EVIDENCE_LINE_MAX = 600
_LINK_URL_MAX = SECTION_TEXT_MAX - 200  # one link in one context element, with its label
_EVIDENCE_CHARS_MAX = 36_000  # the whole evidence message, well under Slack's message size
_WINDOW = re.compile(r"\s*·\s*\d{2}:\d{2}–\d{2}:\d{2} UTC$")

_ELLIPSIS = "…"
_MENTION = re.compile(r"@(?=(?:channel|here|everyone))", re.IGNORECASE)
_ZWJ = "\u200d"
# mrkdwn has no escape for its marks; a code span formats nothing, but cannot hold a backtick.
_MARKS = frozenset("*_~`")
_BACKTICK = "`"
_BACKTICK_LOOKALIKE = "\u02cb"
_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")
_QUOTE = "> "
_IDENT = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*")
_BLANK = f"_{BLANK}_"

WORKER_LOST_DETAIL = "WORKER_LOST"
QUEUE_LOST_DETAIL = "QUEUE_LOST"
"""A queued run whose worker vanished (``plugin.service.worker``)."""
REPLAY_NOTE = ":repeat: Replay of this thread's question with the current version"


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """What ``chat.postMessage`` / ``chat.update`` get: fallback text and serialised blocks."""

    text: str
    blocks: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class StatusView:
    """The live status message of one run (``run_key`` is the Cancel button's value)."""

    run_key: str
    state: Literal["QUEUED", "RUNNING", "FINISHED"]
    queue_position: int | None = None
    current_check: str | None = None
    rounds_used: int = 0
    max_rounds: int = 0
    checks_done: int = 0
    final_note: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.run_key) <= BUTTON_VALUE_MAX:
            raise ValueError(f"run_key must be 1..{BUTTON_VALUE_MAX} characters")


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


# --------------------------------------------------------------------------- text helpers


def slack_date(moment: datetime, *, with_date: bool = True) -> str:
    """A Slack date token: each reader sees ``moment`` in their own time zone; the fallback
    (older clients, notifications) is UTC text. Only for times the bot itself produced."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    if with_date:
        token, fallback = "{date_short_pretty} {time}", f"{utc:%Y-%m-%d %H:%M} UTC"
    else:
        token, fallback = "{time}", f"{utc:%H:%M} UTC"
    return f"<!date^{int(utc.timestamp())}^{token}|{fallback}>"


def _window_text(window: tuple[datetime, datetime]) -> str:
    start, end = window
    same_day = start.astimezone(UTC).date() == end.astimezone(UTC).date()
    return f"{slack_date(start)}–{slack_date(end, with_date=not same_day)}"


def escape(text: str) -> str:
    """Untrusted text as one inert line for a message posted with mrkdwn off: folded, ``& < >``
    escaped, mass mentions defused, every other character as written; may be empty."""
    return _MENTION.sub("@" + _ZWJ, _entities(one_line(text)))


def mrkdwn_escape(text: str) -> str:
    """Untrusted text as one inert line of mrkdwn (see the module docstring); may be empty."""
    escaped = " ".join(_inert_word(word) for word in one_line(text).split(" "))
    return _MENTION.sub("@" + _ZWJ, escaped)


def _entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inert_word(word: str) -> str:
    """One word: as written (``& < >`` escaped), inside a code span if it carries a mark."""
    if _MARKS.isdisjoint(word):
        return _entities(word)
    pieces = word.split(_BACKTICK)
    return _BACKTICK_LOOKALIKE.join(
        f"`{_entities(p)}`" if not _MARKS.isdisjoint(p) else _entities(p) for p in pieces
    )


def _quoted(text: str) -> str:
    """Untrusted multi-line text: each non-blank line escaped and quoted."""
    lines = [line for line in (mrkdwn_escape(raw) for raw in text.splitlines()) if line]
    return "\n".join(_QUOTE + line for line in lines) if lines else _BLANK


def _line(text: str) -> str:
    """Untrusted single-line text, or a visible placeholder when nothing visible is left."""
    return mrkdwn_escape(text) or _BLANK


def _ident(value: str, limit: int = _ID_MAX) -> str:
    """A code of ours (tool name, status, error code) as it is: ``query_logs`` formats nothing,
    an underscore inside a word is not a mark. Anything else is escaped like untrusted text."""
    if _IDENT.fullmatch(value) and _width(value) <= limit:
        return value
    return _fit(value, limit)


def _width(text: str) -> int:
    """Length in UTF-16 code units (>= the code-point count)."""
    return len(text.encode("utf-16-le")) // 2


def _fit(raw: str, limit: int, render: Callable[[str], str] = _line) -> str:
    """``render(raw)``, or the longest rendered prefix plus ``…`` that fits in ``limit``."""
    full = render(raw)
    if _width(full) <= limit:
        return full
    lo, hi = 0, len(raw)  # invariant: prefix of length lo fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _width(render(raw[:mid]).rstrip() + _ELLIPSIS) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return render(raw[:lo]).rstrip() + _ELLIPSIS


def _cut(escaped: str, limit: int) -> str:
    """Already escaped text cut to ``limit`` with ``…``, never inside an entity."""
    if _width(escaped) <= limit:
        return escaped
    lo, hi = 0, len(escaped)  # invariant: prefix of length lo fits with the ellipsis
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _width(escaped[:mid]) + len(_ELLIPSIS) <= limit:
            lo = mid
        else:
            hi = mid - 1
    head = _PARTIAL_ENTITY.sub("", escaped[:lo])
    if head.count(_BACKTICK) % 2:  # never leave a code span open
        head = head[: head.rindex(_BACKTICK)]
    return head.rstrip() + _ELLIPSIS


def _more(count: int) -> str:
    return f"_({count} more not shown)_"


def _pack(title: str, lines: Sequence[str], *, max_blocks: int) -> list[str]:
    """Group ``lines`` (each shorter than ``_PACK_MAX``) into at most ``max_blocks`` texts."""
    chunks: list[str] = [title]
    for shown, line in enumerate(lines):
        if _width(chunks[-1]) + 1 + _width(line) <= _PACK_MAX:
            chunks[-1] += "\n" + line
        elif len(chunks) < max_blocks:
            chunks.append(line)
        else:
            chunks[-1] += "\n" + _more(len(lines) - shown)
            break
    return chunks


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


def _sections(texts: Iterable[str]) -> list[Block]:
    return [_section(t) for t in texts]


def _context(*texts: str) -> ContextBlock:
    return ContextBlock(elements=[MarkdownTextObject(text=t) for t in texts])


def _header(text: str) -> HeaderBlock:
    return HeaderBlock(text=PlainTextObject(text=text[:HEADER_TEXT_MAX], emoji=True))


def _message(text: str, blocks: Sequence[Block]) -> SlackMessage:
    """``text`` is the fallback, already escaped."""
    fallback = _cut(text, FALLBACK_TEXT_MAX)
    return SlackMessage(text=fallback, blocks=tuple(b.to_dict() for b in blocks[:MAX_BLOCKS]))


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
            return f"_not a check of this run:_ {_fit(tool_call_id, 60)}"
        return f"*#{n}* {_ident(self.all[n - 1].tool, 40)}"

    def cite_all(self, ids: Sequence[str]) -> str:
        return _fit_joined([self.cite(i) for i in ids], "; ", _EVIDENCE_MAX)

    def line(self, check: Check) -> str:
        if check.error_code:
            detail = f"{_ident(check.status, 30)} ({_ident(check.error_code, 60)})"
        else:
            detail = f"{_ident(check.status, 30)} · {check.item_count} items"
        label = _label(check, _CHECK_LINE_MAX - 150, self.windows.get(check.tool_call_id))
        return f"*#{self.number(check)}* {label} — {detail}"


def _label(check: Check, limit: int, window: tuple[datetime, datetime] | None = None) -> str:
    """``query_logs · payment-api · ERROR · 10:00–10:30 UTC``: the tool, then the escaped scope;
    a log check's window (known from its input) as Slack dates instead of UTC text."""
    tool = _ident(check.tool, 40)
    scope = check.scope or ""
    when = ""
    if window is not None and _WINDOW.search(scope):
        scope, when = _WINDOW.sub("", scope), f" · {_window_text(window)}"
    if not one_line(scope):
        return f"{tool}{when}"
    return f"{tool} · {_fit(scope, limit - _width(tool) - 3)}{when}"


def _fit_joined(parts: Sequence[str], sep: str, limit: int) -> str:
    """Join already-escaped parts, dropping trailing ones with a visible mark if needed."""
    for keep in range(len(parts), 0, -1):
        tail = "" if keep == len(parts) else f"{sep}{_more(len(parts) - keep)}"
        text = sep.join(parts[:keep]) + tail
        if _width(text) <= limit:
            return text
    return _more(len(parts))


def _checks_sections(title: str, checks: _Checks, selected: Sequence[Check]) -> list[Block]:
    if not selected:
        return [_section(f"{title}\nNothing was checked.")]
    lines = [checks.line(c) for c in selected]
    return _sections(_pack(title, lines, max_blocks=_CHECK_BLOCKS_MAX))


# --------------------------------------------------------------------------- draft


def _conclusion_section(conclusion: Conclusion | None, checks: _Checks) -> SectionBlock:
    if conclusion is None:
        return _section("*No confirmed conclusion.* See what is still missing below.")
    return _section(
        f"*Conclusion* (confidence: *{conclusion.confidence.value}*)\n"
        f"{_fit(conclusion.summary, _SUMMARY_MAX, _quoted)}\n"
        f"_Evidence:_ {checks.cite_all(conclusion.evidence_tool_call_ids)}"
    )


def _analysis_section(n: int, item: AnalysisItem, checks: _Checks) -> SectionBlock:
    kind = "Finding" if item.kind == "FINDING" else "Negative observation"
    if isinstance(item.evidence, CitedEvidence):
        evidence = f"_Evidence:_ {checks.cite_all(item.evidence.tool_call_ids)}"
    else:
        evidence = f"_No evidence found in:_ {_fit(item.evidence.scope, _EVIDENCE_MAX)}"
    statement = _fit(item.statement, _STATEMENT_MAX, _quoted)
    return _section(f"*{n}. {kind}:*\n{statement}\n{evidence}")


def _list_sections(title: str, items: Sequence[str]) -> list[Block]:
    if not items:
        return []
    lines = [f"• {_fit(item, _LIST_ITEM_MAX)}" for item in items]
    return _sections(_pack(f"*{title}*", lines, max_blocks=_LIST_BLOCKS_MAX))


def _top_findings(draft: DiagnosisDraft) -> list[int]:
    """The 1-based numbers of the analysis items shown on the first screen."""
    findings = [n for n, i in enumerate(draft.analysis, 1) if i.kind == "FINDING"]
    return findings[:_FIRST_SCREEN_FINDINGS]


def _checked_sections(draft: DiagnosisDraft, checks: _Checks) -> list[Block]:
    """*Checked*: each check once (with its scope), then what the model adds that no check says."""
    lines = [checks.line(c) for c in checks.all]
    extra = distinct_scopes(draft.limitations.checked_scope, checks.all)
    lines += [f"• {_fit(item, _LIST_ITEM_MAX)}" for item in extra]
    if not lines:
        return []
    return _sections(_pack("*Checked*", lines, max_blocks=_LIST_BLOCKS_MAX))


def _draft_blocks(draft: DiagnosisDraft, checks: _Checks, buttons: Sequence[Block]) -> list[Block]:
    """First screen: conclusion, top findings, buttons. Below a divider: the rest."""
    top = _top_findings(draft)
    blocks: list[Block] = [_conclusion_section(draft.conclusion, checks)]
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
        *_list_sections("Still missing", draft.limitations.missing_info),
    )
    if rest or lists:
        blocks.append(DividerBlock())
    if rest:
        blocks += [_section("*More analysis*"), *rest]
    blocks += lists
    return blocks


def _draft_headline(draft: DiagnosisDraft) -> tuple[str, str]:
    """(header text, fallback summary) of a Draft."""
    c = draft.conclusion
    if c is None:
        return "Diagnosis: No confirmed conclusion", "Diagnosis: No confirmed conclusion"
    summary = f"Diagnosis ({c.confidence.value} confidence): {_fit(c.summary, 2500)}"
    return f"Diagnosis: conclusion ({c.confidence.value} confidence)", summary


# --------------------------------------------------------------------------- results


def _footer(result: ExecutionResult, asked_at: datetime | None = None) -> ContextBlock:
    u = result.usage
    asked = [f"Asked {slack_date(asked_at)}"] if asked_at is not None else []
    return _context(
        *asked,
        f"Run {_fit(result.run_id, _ID_MAX)}",
        f"{u.model_calls} model calls",
        f"{u.prompt_tokens + u.completion_tokens} tokens "
        f"({u.prompt_tokens} prompt + {u.completion_tokens} completion)",
        f"{u.tool_calls} tool calls",
        f"{u.elapsed_ms / 1000:.1f} s",
    )


def _stop_text(result: ExecutionResult) -> str:
    if result.stop_reason is None:
        return "Stopped before a diagnosis was written."
    return mrkdwn_escape(STOP_EXPLANATIONS[result.stop_reason])


def _failure_text(result: ExecutionResult) -> str:
    f = result.failure
    if f is None:
        return "The diagnosis failed closed; no conclusion was produced."
    text = (
        f"The diagnosis failed closed ({_ident(f.code.value)}: {_ident(f.detail)}); "
        "no conclusion was produced."
    )
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
            _section(stop),
            *buttons,
            *_checks_sections("*What was checked*", checks, checks.all),
        ]
        return "Diagnosis stopped", stop, stopped
    text = _failure_text(result)
    failed: list[Block] = [_section(f"{text}\nRun {_fit(result.run_id, _ID_MAX)}"), *buttons]
    if result.progress is not None:
        ready = [c for c in checks.all if c.status == "READY"]
        failed += _checks_sections("*Checks that completed*", checks, ready)
    return "Diagnosis failed", text, failed


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
    header, summary, body = _body(result, checks, buttons)
    blocks: list[Block] = [_header(header)]
    if replay:
        blocks.append(_context(REPLAY_NOTE))
    blocks += body[: MAX_BLOCKS - len(blocks) - 2]  # the budgets above keep this a no-op
    blocks += [DividerBlock(), _footer(result, extras.asked_at)]
    prefix = "Replay — " if replay else ""
    return _message(f"{prefix}{summary} (run {_fit(result.run_id, _ID_MAX)})", blocks)


# --------------------------------------------------------------------------- status


def _cancel_button(run_key: str) -> ActionsBlock:
    """Cancel, after Slack's own confirmation dialog (the click reaches us only if confirmed)."""
    confirm = ConfirmObject(
        title="Cancel this diagnosis?",
        text="The run stops now and posts what it checked so far. It cannot be resumed.",
        confirm="Cancel the run",
        deny="Keep running",
        style="danger",
    )
    button = ButtonElement(
        text=PlainTextObject(text="Cancel"),
        action_id=CANCEL_ACTION_ID,
        value=run_key,
        style="danger",
        confirm=confirm,
    )
    return ActionsBlock(elements=[button])


def _status_line(view: StatusView) -> str:
    if view.state == "QUEUED":
        if view.queue_position is None:
            return "Queued"
        return f"Queued — position {view.queue_position}"
    if view.state == "RUNNING":
        rounds = f"round {view.rounds_used}"
        if view.max_rounds:
            rounds += f" of {view.max_rounds}"
        return f"Running — {rounds} · {view.checks_done} checks done"
    return _fit(view.final_note, _NOTE_MAX) if view.final_note else "Finished"


def _current(label: str) -> str:
    """``tool · scope`` of the check in flight: the tool is ours, the scope is escaped."""
    tool, sep, scope = label.partition(" · ")
    if sep and _IDENT.fullmatch(tool):
        return f"{_ident(tool, 40)} · {_fit(scope, _NOTE_MAX - 50)}"
    return _fit(label, _NOTE_MAX)


def render_status(view: StatusView) -> SlackMessage:
    """The live status message of a run; QUEUED and RUNNING carry the Cancel button."""
    line = _status_line(view)
    text = line
    if view.state == "RUNNING":
        current = _current(view.current_check) if view.current_check else "starting"
        text += f"\nCurrent check: {current}"
    blocks: list[Block] = [_section(text)]
    if view.state != "FINISHED":
        blocks.append(_cancel_button(view.run_key))
    return _message(line, blocks)


# --------------------------------------------------------------------------- evidence


def _evidence_lines(check: EvidenceCheck) -> list[str]:
    """Our labels, the summary's values and the items escaped; each item a quoted line."""
    head, items = evidence_lines(check.observation)
    lines = [f"_{label}:_ {_fit(text, _EVIDENCE_LINE_MAX)}" for label, text in head]
    lines += [_QUOTE + _fit(text, _EVIDENCE_LINE_MAX) for text in items]
    return lines


def _within(lines: Sequence[str], max_chars: int) -> list[str]:
    """The leading ``lines`` whose widths add up to at most ``max_chars``, then a mark."""
    kept: list[str] = []
    used = 0
    for shown, line in enumerate(lines):
        used += _width(line) + 1
        if used > max_chars:
            return [*kept, _more(len(lines) - shown)]
        kept.append(line)
    return kept


def _evidence_check_blocks(check: EvidenceCheck, max_blocks: int, max_chars: int) -> list[Block]:
    items = check.observation.get("items")
    count = len(items) if isinstance(items, list) else 0
    more = "; the tool left more out" if check.truncated else ""
    title = (
        f"*#{check.number}* {_ident(check.tool, 40)} · "
        f"{_fit(check.scope or '', _LABEL_MAX) if one_line(check.scope or '') else _BLANK}"
        f" — {count} items{more}"
    )
    lines = _within(_evidence_lines(check), max_chars) or ["_No items._"]
    return _sections(_pack(title, lines, max_blocks=max_blocks))


def _links_block(links: Sequence[Link]) -> ContextBlock | None:
    """A check's links to its source (ours: ``plugin.slack.links``), labels escaped."""
    parts = [
        f"<{link.url.replace('&', '&amp;')}|{_fit(link.label, _LABEL_MAX)}>"
        for link in links[:CONTEXT_ELEMENTS_MAX]
        if safe_url(link.url) and len(link.url) <= _LINK_URL_MAX
    ]
    return _context(*parts) if parts else None


def render_evidence(
    run_id: str,
    checks: Sequence[EvidenceCheck],
    links: Mapping[str, Sequence[Link]] | None = None,
) -> SlackMessage:
    """The evidence view of an answer: each cited check's observation as the model saw it,
    and under it the check's links to its source, if any (Grafana Explore, runbook pages).

    Log lines, rows and runbook snippets are quoted and escaped like model text; the message
    stays within the Block Kit limits whatever the observations hold.
    """
    shown = list(checks[:_EVIDENCE_CHECKS_MAX])
    kept = links or {}
    link_blocks = {c.tool_call_id: _links_block(kept.get(c.tool_call_id, ())) for c in shown}
    blocks: list[Block] = [
        _header("Evidence"),
        _context(
            f"What the model saw for the checks the answer cites · run {_fit(run_id, _ID_MAX)}"
        ),
    ]
    if not shown:
        blocks.append(_section("No cited check kept evidence."))
    room = MAX_BLOCKS - len(blocks) - 1 - sum(b is not None for b in link_blocks.values())
    per_check = max(room // max(len(shown), 1), 1)
    chars = _EVIDENCE_CHARS_MAX // max(len(shown), 1)
    for check in shown:
        blocks += _evidence_check_blocks(check, per_check, chars)
        link_block = link_blocks[check.tool_call_id]
        if link_block is not None:
            blocks.append(link_block)
    if len(checks) > len(shown):
        blocks.append(_context(_more(len(checks) - len(shown))))
    text = f"Evidence of run {_fit(run_id, _ID_MAX)}: {len(shown)} cited checks"
    return _message(text, blocks)
