"""What a run says in its thread besides the rendered answer: the fixed replies (busy,
unavailable, restarting, input hints), the status message's last word, and the bounded
plain-text fallback posted when Slack refuses the rendered answer.

All pure functions of a result: nothing here calls Slack.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError

from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.contract.text import STOP_EXPLANATIONS
from sre_diag.slack.mrkdwn import escape
from sre_diag.slack.posting import failure_name

__all__ = [
    "BUSY",
    "FAILED_CLOSED",
    "FENCED_NOTE",
    "INPUT_HINTS",
    "LOST_NOTE",
    "NOT_QUEUED",
    "POISON",
    "POISON_NOTE",
    "QUEUE_LOST_NOTE",
    "RESTARTING",
    "UNAVAILABLE",
    "Posted",
    "fallback_text",
    "refusal_of",
    "status_note",
]

INPUT_HINTS = {
    "BLANK_QUERY": "Mention me with a question: the service, the time window and the symptom.",
    "QUERY_TOO_LARGE": "That question is longer than I accept; please shorten it.",
    "PREVIOUS_TURN_TOO_LARGE": "This thread's previous answer is too large to build on; "
    "start a new thread.",
    "INPUT_TOO_LARGE": "Question plus previous answer exceed what I accept; shorten the question "
    "or start a new thread.",
}
BUSY = "A diagnosis is already running in this thread; I will answer here when it ends."
UNAVAILABLE = (
    "I cannot take this request right now: my shared run state is unreachable. "
    "Please ask again in a few minutes."
)
RESTARTING = "I am restarting; please ask again in a minute."
LOST_NOTE = "Failed closed: the worker running this diagnosis was lost; see the message below."
QUEUE_LOST_NOTE = "Failed closed: the run queue lost this request; see the message below."
POISON = (
    "I could not run this request: it reached the diagnosis worker in a form it cannot read "
    "({reason}). Nothing was run; please ask again."
)
POISON_NOTE = "Failed closed: the request could not be read by the worker."
FENCED_NOTE = "Fenced: another worker answers this run."
NOT_QUEUED = "Not started: the run queue is unreachable."
FAILED_CLOSED = (
    "The diagnosis failed closed: it ended without an answer I can show. Nothing was "
    "concluded; please ask again."
)
_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")
_CODE = re.compile(r"[A-Za-z0-9_-]+")
_GIST_MAX = 700
_FALLBACK_MAX = 1200


@dataclass(frozen=True, slots=True)
class Posted:
    """Where the outcome ended up: the full answer, the plain fallback, or nowhere."""

    full: bool
    plain: bool
    refusal: str = ""
    """Why the full answer is not in the thread (see ``refusal_of``)."""
    fallback_error: str | None = None


def refusal_of(exc: BaseException) -> str:
    """Why the full answer could not be posted, in words (Slack's code, or our own failure)."""
    if isinstance(exc, SlackApiError):
        return f"Slack refused the full answer ({failure_name(exc)})"
    return f"The full answer could not be rendered or posted ({failure_name(exc)})"


def _bounded(text: str, limit: int) -> str:
    """Untrusted text escaped onto one inert line, cut to ``limit`` without splitting an entity.

    A code (``HTTP_500``, a run id) stays as it is: the fallback is posted with mrkdwn off, so
    its underscores format nothing and there is nothing else in it to neutralise.
    """
    if _CODE.fullmatch(text) and len(text) <= limit:
        return text
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    return _PARTIAL_ENTITY.sub("", escaped[: limit - 1]) + "…"


def _cut(text: str, limit: int) -> str:
    """Raw text cut to ``limit`` (for the status note, which the renderer escapes itself)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _gist(result: ExecutionResult, clean: Callable[[str, int], str] = _bounded) -> str:
    """The outcome in a phrase: the conclusion, the stop reason or the failure code."""
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        return f"{result.stop_reason.value}. {STOP_EXPLANATIONS[result.stop_reason]}"
    if result.failure is not None:
        return f"{result.failure.code.value} {clean(result.failure.detail, 80)}."
    draft = result.draft
    if draft is None:
        return "no answer was produced."
    if draft.conclusion is not None:
        confidence = draft.conclusion.confidence.value
        return f"conclusion ({confidence}): {clean(draft.conclusion.summary, _GIST_MAX)}"
    missing = draft.limitations.missing_info
    first = f" Missing: {clean(missing[0], 300)}" if missing else ""
    return f"no conclusion: the evidence did not support one.{first}"


def fallback_text(result: ExecutionResult, refusal: str) -> str:
    """The plain-text answer for when Slack refuses the rendered one: no blocks, no metadata,
    every model-written part escaped and the whole bounded (``refusal`` is ours, see
    ``refusal_of``)."""
    text = (
        f"Diagnosis {result.outcome.value} — {_gist(result)}\n"
        f"{refusal}; this is a plain-text summary. Run {_bounded(result.run_id, 100)}."
    )
    if len(text) <= _FALLBACK_MAX:
        return text
    return _PARTIAL_ENTITY.sub("", text[: _FALLBACK_MAX - 1]) + "…"


def _verdict(result: ExecutionResult) -> str:
    return {Outcome.DRAFT: "Done", Outcome.STOPPED: "Stopped"}.get(result.outcome, "Failed closed")


def status_note(result: ExecutionResult, posted: Posted) -> str:
    """The status message's last word: what actually reached the thread."""
    if posted.full:
        return _final_note(result)
    # The renderer shows Slack's codes (``invalid_blocks``) as they are, inert.
    refusal = posted.refusal
    if posted.plain:
        return f"{_verdict(result)}: {refusal}; a plain-text summary is posted below."
    fallback = posted.fallback_error or "unknown"
    return (
        f"Could not post the answer: {refusal}, and the plain-text summary too ({fallback}). "
        f"Outcome {result.outcome.value} — {_gist(result, _cut)} Run {result.run_id}."
    )


def _final_note(result: ExecutionResult) -> str:
    if result.outcome is Outcome.DRAFT:
        return "Done: the diagnosis is posted below."
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        return STOP_EXPLANATIONS[result.stop_reason]
    return "Failed closed: see the message below."
