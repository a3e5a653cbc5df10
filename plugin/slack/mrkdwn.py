"""mrkdwn for untrusted text: how everything the model wrote, and the check ids and scopes taken
from its tool arguments, is shown in Slack without faking the layout or acting there.

- a single-line field goes through :func:`mrkdwn_escape`: folded onto one line (line breaks
  and controls become spaces, zero-width/bidi/format characters are dropped), ``& < >``
  escaped — the only escaping mrkdwn needs (so ``<!here>``, ``<@U…>``, ``<#C…>``, links and
  ``&lt;`` entities show as typed) — ``@here``/``@channel``/``@everyone`` defused, and in every
  word that carries a mrkdwn mark (``* _ ~``) the identifier put inside a code span, where
  nothing formats, with the punctuation around it left outside (``(ord_1),`` is ``(``, the
  span ``ord_1``, ``),``; a ``key=value`` is one span): the text is kept as written, so
  ``ord_10290`` or ``ERR_DB_POOL`` copied from the answer or the Evidence view is
  byte-identical (and shown as code). A backtick, which a code span cannot hold, is the one
  character shown as a look-alike (``ˋ``); it is never part of an identifier. Text that
  belongs together (an Evidence row's ``key=value`` cell) is one span (:func:`inert_unit`); a
  runbook's own inline code is a span of ours (:func:`markdown_code`). :func:`escape` is the
  same without the code spans, for text Slack reads with
  mrkdwn off (the plain fallback answer), where no mark formats anything;
- a multi-line field (summary, statement) keeps its lines, each escaped the same way and
  quoted (``> ``, :func:`quoted`);
- a code of ours (tool name, status, error code) stays as it is (:func:`ident`).

Times the bot itself shows (a log check's window, when the question was asked, a log line's
timestamp in the Evidence view) are Slack date tokens (:func:`slack_date`) with a UTC fallback,
so every reader sees local time, and a message says so once (:data:`ZONE_NOTE`); times inside
model text stay text. :func:`as_shown` reads our mrkdwn back as a reader sees it (``replay``).
Lengths are measured in UTF-16 code units (:func:`width`), which is
never less than the code-point count slack_sdk checks; :func:`fit` and :func:`cut` trim with a
visible ``…`` and never inside an entity or a code span.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime

from sre_diag.contract.text import BLANK, one_line

__all__ = [
    "BLANK_MARK",
    "IDENT",
    "ID_MAX",
    "QUOTE",
    "ZONE_NOTE",
    "Window",
    "as_shown",
    "check_title",
    "cut",
    "escape",
    "fit",
    "ident",
    "inert_unit",
    "line",
    "markdown_code",
    "more",
    "mrkdwn_escape",
    "quoted",
    "slack_date",
    "spaced",
    "width",
    "window_text",
]

Window = tuple[datetime, datetime]
"""A log check's window (start, end), aware datetimes."""

ZONE_NOTE = "times in your time zone"
"""Said once a message: every time the bot shows is a Slack date token in the reader's zone."""

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
_WINDOW = re.compile(r"\s*·\s*\d{2}:\d{2}–\d{2}:\d{2} UTC$")


def slack_date(moment: datetime, *, with_date: bool = True, seconds: bool = False) -> str:
    """A Slack date token: each reader sees ``moment`` in their own time zone; the fallback
    (older clients, notifications) is UTC text. Only for times the bot itself shows, built
    from a parsed time (never from text)."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    token, clock = ("{time_secs}", "%H:%M:%S") if seconds else ("{time}", "%H:%M")
    if with_date:
        token, clock = "{date_short_pretty} " + token, "%Y-%m-%d " + clock
    return f"<!date^{int(utc.timestamp())}^{token}|{utc.strftime(clock)} UTC>"


def check_title(tool: str, scope: str | None, window: Window | None, limit: int) -> str:
    """``query_logs · payment-api · ERROR · <dates>``: our tool name, then the escaped scope;
    a log check's window (known from its input) as Slack dates instead of the scope's UTC
    text."""
    shown_tool = ident(tool, 40)
    text = scope or ""
    when = ""
    if window is not None and _WINDOW.search(text):
        text, when = _WINDOW.sub("", text), f" · {window_text(window)}"
    if not one_line(text):
        return f"{shown_tool}{when}"
    return f"{shown_tool} · {fit(text, limit - width(shown_tool) - 3)}{when}"


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
    """One word: as written (``& < >`` escaped); the identifier in it inside a code span if it
    carries a mark, its leading and trailing punctuation outside (``(ord_1),`` shows the span
    ``ord_1`` between ``(`` and ``),``)."""
    if _MARKS.isdisjoint(word):
        return _entities(word)
    return _BACKTICK_LOOKALIKE.join(_spanned(piece) for piece in word.split(_BACKTICK))


def _spanned(piece: str) -> str:
    """A backtick-free piece: its marked core in a code span, the punctuation around outside."""
    if _MARKS.isdisjoint(piece):
        return _entities(piece)
    start, end = 0, len(piece)
    while start < end and _is_edge(piece[start]):
        start += 1
    while end > start and _is_edge(piece[end - 1]):
        end -= 1
    lead, core, trail = piece[:start], piece[start:end], piece[end:]
    return f"{_entities(lead)}`{_entities(core)}`{_entities(trail)}"


def _is_edge(char: str) -> bool:
    """Punctuation, a symbol or a space that is not a mrkdwn mark: it may stand outside a
    span, where it formats nothing (and a span never begins or ends with a space)."""
    return char not in _MARKS and (char == " " or unicodedata.category(char)[0] in "PS")


def inert_unit(text: str, limit: int) -> str:
    """Untrusted one-line text that belongs together (a ``key=value`` cell, spaces and all):
    inside ONE code span when it carries a mark (the punctuation around it outside), else
    escaped; trimmed to ``limit`` with ``…``."""
    return fit(text, limit, _unit)


def _unit(text: str) -> str:
    folded = one_line(text)
    if _MARKS.isdisjoint(folded):
        return mrkdwn_escape(folded) or BLANK_MARK
    spanned = _BACKTICK_LOOKALIKE.join(_spanned(p) for p in folded.split(_BACKTICK))
    return _MENTION.sub("@" + _ZWJ, spanned)


_MARKDOWN_CODE = re.compile(r"`([^`]+)`")


def markdown_code(text: str) -> str:
    """Untrusted one-line Markdown (a runbook snippet): its inline code (`` `x` ``) as a code
    span of ours holding ``x`` as written; the rest as :func:`mrkdwn_escape`."""
    folded = one_line(text)
    parts: list[str] = []
    position = 0
    for code in _MARKDOWN_CODE.finditer(folded):
        parts.append(spaced(folded[position : code.start()]))
        inner = one_line(code.group(1))
        parts.append(f"`{_MENTION.sub('@' + _ZWJ, _entities(inner))}`" if inner else "")
        position = code.end()
    parts.append(spaced(folded[position:]))
    return "".join(parts).strip() or BLANK_MARK


def spaced(text: str) -> str:
    """``text`` escaped, keeping one space at either end where it had one."""
    lead = " " if text[:1] == " " else ""
    trail = " " if text[-1:] == " " and text.strip() else ""
    return f"{lead}{mrkdwn_escape(text)}{trail}"


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


_DATE_TOKEN = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")
_LINK = re.compile(r"<(https?://[^|>\s]+)\|([^>]*)>")
_CODE_SPAN = re.compile(r"`([^`\n]*)`")
_EMPHASIS = re.compile(r"(?<![\w*_~])([*_~])(?=\S)(.+?)(?<=\S)\1(?!\w)")
_ENTITY = re.compile(r"&(amp|lt|gt);")
_DECODED = {"amp": "&", "lt": "<", "gt": ">"}


def as_shown(mrkdwn: str) -> str:
    """Our mrkdwn as a reader sees it, for a terminal: a date token as its UTC fallback, a
    link as ``label (url)``, a code span's content as it is, the bot's bold and italics
    without their marks, the three entities decoded (once)."""
    text = _DATE_TOKEN.sub(lambda m: m.group(1), mrkdwn)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", text)
    shown: list[str] = []
    position = 0
    for span in _CODE_SPAN.finditer(text):
        shown.append(_plain_marks(text[position : span.start()]))
        shown.append(_decode(span.group(1)))
        position = span.end()
    shown.append(_plain_marks(text[position:]))
    return "".join(shown)


def _plain_marks(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, _EMPHASIS.sub(lambda m: m.group(2), text)
    return _decode(text)


def _decode(text: str) -> str:
    return _ENTITY.sub(lambda m: _DECODED[m.group(1)], text)


def more(count: int) -> str:
    """The visible overflow mark: ``(n more not shown)``."""
    return f"_({count} more not shown)_"
