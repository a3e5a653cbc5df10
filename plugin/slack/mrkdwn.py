"""mrkdwn for untrusted text: how everything the model wrote, and the check ids and scopes taken
from its tool arguments, is shown in Slack without faking the layout or acting there.

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
  quoted (``> ``, :func:`quoted`);
- a code of ours (tool name, status, error code) stays as it is (:func:`ident`).

Times the bot itself produced (a log check's window, when the question was asked) are Slack
date tokens (:func:`slack_date`), so every reader sees local time; times inside model or
evidence text stay text. Lengths are measured in UTF-16 code units (:func:`width`), which is
never less than the code-point count slack_sdk checks; :func:`fit` and :func:`cut` trim with a
visible ``…`` and never inside an entity or a code span.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from sre_diag.contract.text import BLANK, one_line

__all__ = [
    "BLANK_MARK",
    "IDENT",
    "ID_MAX",
    "QUOTE",
    "cut",
    "escape",
    "fit",
    "ident",
    "line",
    "more",
    "mrkdwn_escape",
    "quoted",
    "slack_date",
    "width",
    "window_text",
]

ID_MAX = 200
"""The widest id (a run id, a tool call id) shown before it is trimmed."""

_ELLIPSIS = "…"
_MENTION = re.compile(r"@(?=(?:channel|here|everyone))", re.IGNORECASE)
_ZWJ = "\u200d"
# mrkdwn has no escape for its marks; a code span formats nothing, but cannot hold a backtick.
_MARKS = frozenset("*_~`")
_BACKTICK = "`"
_BACKTICK_LOOKALIKE = "\u02cb"
_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")
QUOTE = "> "
IDENT = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*")
BLANK_MARK = f"_{BLANK}_"


def slack_date(moment: datetime, *, with_date: bool = True) -> str:
    """A Slack date token: each reader sees ``moment`` in their own time zone; the fallback
    (older clients, notifications) is UTC text. Only for times the bot itself produced."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    if with_date:
        token, fallback = "{date_short_pretty} {time}", f"{utc:%Y-%m-%d %H:%M} UTC"
    else:
        token, fallback = "{time}", f"{utc:%H:%M} UTC"
    return f"<!date^{int(utc.timestamp())}^{token}|{fallback}>"


def window_text(window: tuple[datetime, datetime]) -> str:
    """A time window as two Slack dates; the end without its date when on the same day."""
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


def quoted(text: str) -> str:
    """Untrusted multi-line text: each non-blank line escaped and quoted."""
    lines = [line for line in (mrkdwn_escape(raw) for raw in text.splitlines()) if line]
    return "\n".join(QUOTE + line for line in lines) if lines else BLANK_MARK


def line(text: str) -> str:
    """Untrusted single-line text, or a visible placeholder when nothing visible is left."""
    return mrkdwn_escape(text) or BLANK_MARK


def ident(value: str, limit: int = ID_MAX) -> str:
    """A code of ours (tool name, status, error code) as it is: ``query_logs`` formats nothing,
    an underscore inside a word is not a mark. Anything else is escaped like untrusted text."""
    if IDENT.fullmatch(value) and width(value) <= limit:
        return value
    return fit(value, limit)


def width(text: str) -> int:
    """Length in UTF-16 code units (>= the code-point count)."""
    return len(text.encode("utf-16-le")) // 2


def fit(raw: str, limit: int, render: Callable[[str], str] = line) -> str:
    """``render(raw)``, or the longest rendered prefix plus ``…`` that fits in ``limit``."""
    full = render(raw)
    if width(full) <= limit:
        return full
    lo, hi = 0, len(raw)  # invariant: prefix of length lo fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if width(render(raw[:mid]).rstrip() + _ELLIPSIS) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return render(raw[:lo]).rstrip() + _ELLIPSIS


def cut(escaped: str, limit: int) -> str:
    """Already escaped text cut to ``limit`` with ``…``, never inside an entity."""
    if width(escaped) <= limit:
        return escaped
    lo, hi = 0, len(escaped)  # invariant: prefix of length lo fits with the ellipsis
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if width(escaped[:mid]) + len(_ELLIPSIS) <= limit:
            lo = mid
        else:
            hi = mid - 1
    head = _PARTIAL_ENTITY.sub("", escaped[:lo])
    if head.count(_BACKTICK) % 2:  # never leave a code span open
        head = head[: head.rindex(_BACKTICK)]
    return head.rstrip() + _ELLIPSIS


def more(count: int) -> str:
    """The visible overflow mark: ``(n more not shown)``."""
    return f"_({count} more not shown)_"
