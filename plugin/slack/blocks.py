"""Block Kit for Slack: the limits every message stays inside, the building blocks (sections,
context, header, the message with its fallback text), and the two views that are not a final
answer — the live status message of a run (with its Cancel button) and the Evidence view (the
observations behind an answer's citations, with their links). The final answer is ``render``.

Untrusted text — log lines, rows, runbook snippets, check scopes — goes through ``mrkdwn``
before it reaches a block; the bot's own structure (``*#1*``, ``_No items._``) is formatted,
which escaped text can never be. Every message stays inside the Block Kit limits whatever the
observations hold: long texts are trimmed with a visible ``…`` and overflow is marked
``(n more not shown)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from sre_diag.contract.text import EvidenceCheck, one_line
from sre_diag.slack.evidence_items import check_lines
from sre_diag.slack.links import Link, safe_url
from sre_diag.slack.mrkdwn import (
    ID_MAX,
    IDENT,
    ZONE_NOTE,
    Window,
    as_shown,
    check_title,
    cut,
    fit,
    more,
    width,
)

__all__ = [
    "BUTTON_TEXT_MAX",
    "BUTTON_VALUE_MAX",
    "CANCEL_ACTION_ID",
    "CONTEXT_ELEMENTS_MAX",
    "EVIDENCE_ACTION_ID",
    "FALLBACK_TEXT_MAX",
    "FEEDBACK_DOWN_ACTION_ID",
    "FEEDBACK_UP_ACTION_ID",
    "HEADER_TEXT_MAX",
    "MAX_BLOCKS",
    "SECTION_TEXT_MAX",
    "SlackMessage",
    "StatusView",
    "blocks_text",
    "context",
    "header",
    "message",
    "pack",
    "render_evidence",
    "render_status",
    "section",
    "sections",
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

# Our own budgets (escaped widths).
_PACK_MAX = SECTION_TEXT_MAX - 40  # room left in a section for the "(n more not shown)" mark
_LABEL_MAX = 120
_NOTE_MAX = 1000
_EVIDENCE_CHECKS_MAX = 12
_EVIDENCE_LINE_MAX = 600
_LINK_URL_MAX = SECTION_TEXT_MAX - 200  # one link in one context element, with its label
_EVIDENCE_CHARS_MAX = 36_000  # the whole evidence message, well under Slack's message size


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


# --------------------------------------------------------------------------- blocks


def pack(title: str, lines: Sequence[str], *, max_blocks: int) -> list[str]:
    """Group ``lines`` (each shorter than ``_PACK_MAX``) into at most ``max_blocks`` texts."""
    chunks: list[str] = [title]
    for shown, line in enumerate(lines):
        if width(chunks[-1]) + 1 + width(line) <= _PACK_MAX:
            chunks[-1] += "\n" + line
        elif len(chunks) < max_blocks:
            chunks.append(line)
        else:
            chunks[-1] += "\n" + more(len(lines) - shown)
            break
    return chunks


def section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


def sections(texts: Iterable[str]) -> list[Block]:
    return [section(t) for t in texts]


def context(*texts: str) -> ContextBlock:
    return ContextBlock(elements=[MarkdownTextObject(text=t) for t in texts])


def header(text: str) -> HeaderBlock:
    return HeaderBlock(text=PlainTextObject(text=text[:HEADER_TEXT_MAX], emoji=True))


_TERMINAL_ZONE = "times in UTC"
"""A terminal shows each date token's fallback: UTC."""


def blocks_text(blocks: Iterable[Mapping[str, Any]]) -> str:
    """Serialised blocks as a reader sees them, one block after another (``replay``'s text
    rendering): mrkdwn read as shown (``as_shown``), buttons as ``[label]``."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        found = block.get("text")
        text: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        elements = [e for e in block.get("elements") or [] if isinstance(e, Mapping)]
        if kind == "header":
            lines += ["", str(text.get("text", ""))]
        elif kind == "section":
            lines.append(as_shown(str(text.get("text", ""))))
        elif kind == "context":
            shown = " · ".join(as_shown(str(e.get("text", ""))) for e in elements)
            lines.append("  " + shown.replace(ZONE_NOTE, _TERMINAL_ZONE))
        elif kind == "actions":
            labels = [str((e.get("text") or {}).get("text", "")) for e in elements]
            lines.append("[" + "] [".join(labels) + "]")
        elif kind == "divider":
            lines.append("─" * 40)
    return "\n".join(lines).strip("\n")


def message(text: str, blocks: Sequence[Block]) -> SlackMessage:
    """``text`` is the fallback, already escaped."""
    fallback = cut(text, FALLBACK_TEXT_MAX)
    return SlackMessage(text=fallback, blocks=tuple(b.to_dict() for b in blocks[:MAX_BLOCKS]))


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
    """The first line of the status message, in the engineer's words."""
    if view.state == "QUEUED":
        ahead = (view.queue_position or 1) - 1
        if ahead <= 0:
            return "Starting: next in line"
        return f"Queued · Waiting: {_count(ahead, 'diagnosis', 'diagnoses')} ahead"
    if view.state == "RUNNING":
        if view.current_check:
            return f"Step {view.checks_done + 1} · {_doing(view.current_check)}"
        if view.checks_done == 0:
            return "Starting: reading the question"
        return "Weighing what the checks found"
    return fit(view.final_note, _NOTE_MAX) if view.final_note else "Finished"


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


_DOING = {
    "query_logs": "reading {} logs",
    "query_mysql": "querying the database: {}",
    "lookup_knowledge": "searching the runbooks: {}",
}


def _doing(label: str) -> str:
    """The check in flight (``tool · scope``) as what is happening: ``reading payment-api
    logs``. The tool is ours; the scope (from the model's arguments) is escaped."""
    tool, sep, scope = label.partition(" · ")
    phrase = _DOING.get(tool) if sep and IDENT.fullmatch(tool) else None
    if phrase is None:
        return f"running {fit(label, _NOTE_MAX)}"
    if tool == "query_logs":
        service, _, detail = scope.partition(" · ")
        text = phrase.format(fit(service, 120))
        return f"{text} ({fit(detail, _NOTE_MAX - 150)})" if one_line(detail) else text
    return phrase.format(fit(scope, _NOTE_MAX - 50))


def render_status(view: StatusView) -> SlackMessage:
    """The live status message of a run; QUEUED and RUNNING carry the Cancel button."""
    line = _status_line(view)
    blocks: list[Block] = [section(line)]
    if view.state == "RUNNING" and view.checks_done:
        blocks.append(context(f"{_count(view.checks_done, 'check', 'checks')} done"))
    if view.state != "FINISHED":
        blocks.append(_cancel_button(view.run_key))
    return message(line, blocks)


# --------------------------------------------------------------------------- evidence


def _within(lines: Sequence[str], max_chars: int) -> list[str]:
    """The leading ``lines`` whose widths add up to at most ``max_chars``, then a mark."""
    kept: list[str] = []
    used = 0
    for shown, line in enumerate(lines):
        used += width(line) + 1
        if used > max_chars:
            return [*kept, more(len(lines) - shown)]
        kept.append(line)
    return kept


def _evidence_check_blocks(
    check: EvidenceCheck, window: Window | None, max_blocks: int, max_chars: int
) -> list[Block]:
    shown = check_lines(check.observation)
    title = f"*#{check.number}* {check_title(check.tool, check.scope, window, _LABEL_MAX)}"
    title += f" — {shown.count}"
    lines = _within([cut(x, _EVIDENCE_LINE_MAX) for x in shown.lines], max_chars)
    return sections(pack(title, lines or ["_Nothing matched._"], max_blocks=max_blocks))


def _links_block(links: Sequence[Link]) -> ContextBlock | None:
    """A check's links to its source (ours: ``sre_diag.slack.links``), labels escaped."""
    parts = [
        f"<{link.url.replace('&', '&amp;')}|{fit(link.label, _LABEL_MAX)}>"
        for link in links[:CONTEXT_ELEMENTS_MAX]
        if safe_url(link.url) and len(link.url) <= _LINK_URL_MAX
    ]
    return context(*parts) if parts else None


def render_evidence(
    run_id: str,
    checks: Sequence[EvidenceCheck],
    links: Mapping[str, Sequence[Link]] | None = None,
    windows: Mapping[str, Window] | None = None,
) -> SlackMessage:
    """The evidence view of an answer: each cited check's observation as the model saw it, in
    the order the checks ran, and under it the check's links to its source, if any (Grafana
    Explore, runbook pages). ``windows`` are the log checks' windows (shown as Slack dates).

    Log lines, rows and runbook snippets are quoted and escaped like model text; the message
    stays within the Block Kit limits whatever the observations hold.
    """
    ordered = sorted(checks, key=lambda c: c.number)
    shown = ordered[:_EVIDENCE_CHECKS_MAX]
    kept, spans = links or {}, windows or {}
    link_blocks = {c.tool_call_id: _links_block(kept.get(c.tool_call_id, ())) for c in shown}
    blocks: list[Block] = [
        header("Evidence"),
        context(f"What the model saw for the checks the answer cites · {ZONE_NOTE}"),
    ]
    if not shown:
        blocks.append(section("No cited check kept evidence."))
    room = MAX_BLOCKS - len(blocks) - 2 - sum(b is not None for b in link_blocks.values())
    per_check = max(room // max(len(shown), 1), 1)
    chars = _EVIDENCE_CHARS_MAX // max(len(shown), 1)
    for check in shown:
        window = spans.get(check.tool_call_id)
        blocks += _evidence_check_blocks(check, window, per_check, chars)
        link_block = link_blocks[check.tool_call_id]
        if link_block is not None:
            blocks.append(link_block)
    if len(ordered) > len(shown):
        blocks.append(context(more(len(ordered) - len(shown))))
    blocks.append(context(f"Run {fit(run_id, ID_MAX)}"))
    text = f"Evidence of run {fit(run_id, ID_MAX)}: {len(shown)} cited checks"
    return message(text, blocks)
