"""LogQL built from the typed ``query_logs`` input, every value escaped as a string literal.

``{service="<service>"} | json | __error__="" | level="<LEVEL>" | message=~"(?s).*<c>.*"``:
the service is a stream label matcher, a line the parser refuses is dropped, ``level`` a field
of the parsed line (``| json``, or ``| logfmt`` matched case-insensitively), ``contains`` (``c``)
a matcher on the parsed message (``msg`` or ``message`` for logfmt). ``contains`` means what it
means for the folder source: the message, decoded (so however a JSON encoder escaped it), holds
it under Unicode case folding (``str.casefold``: "straße" is in "STRASSE", "échoué" in
"ÉCHOUÉ"). RE2's ``(?i)`` folds one character to one character only, so
:func:`casefold_regex` spells every character of the folded needle as the class of characters
that fold to it, and the characters that fold to several (``ß`` → ``ss``, ``ﬁ`` → ``fi``) as
alternatives. :func:`build_count_logql` wraps the same query in ``count_over_time``.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta

from sre_diag.tools.logs.summary import Grid
from sre_diag.tools.schemas import LogsInput

__all__ = [
    "LABEL_NAME",
    "LINE_FORMATS",
    "build_count_logql",
    "build_edge_count_logql",
    "build_logql",
    "casefold_regex",
    "contains_regex",
    "logql_string",
    "re2_escape",
    "unix_ns",
]

_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def logql_string(value: str) -> str:
    """A LogQL double-quoted string literal: backslash, quote and control characters escaped."""
    out = []
    for char in value:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def re2_escape(value: str) -> str:
    """Escape RE2 metacharacters so ``value`` matches literally."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


_SHORT_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "\b": "b",
    "\f": "f",
    "\n": "n",
    "\r": "r",
    "\t": "t",
}


def _json_spellings(char: str) -> list[str]:
    """How a JSON encoder may write ``char`` inside a string: itself, ``\\uXXXX`` (a surrogate
    pair beyond the BMP) and a short escape where one exists."""
    code = ord(char)
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escaped = f"\\u{high:04x}\\u{low:04x}"
    else:
        escaped = f"\\u{code:04x}"
    spellings = [char, escaped]
    if char in _SHORT_ESCAPES:
        spellings.append("\\" + _SHORT_ESCAPES[char])
    return spellings


def contains_regex(contains: str) -> str:
    """An RE2 pattern matching ``contains`` in a raw line however a JSON encoder escaped it.

    Loki's line filter sees the raw line, where ``<`` may be ``\\u003c`` (Go), ``é`` may be
    ``\\u00e9`` (``ensure_ascii``) and ``/`` may be ``\\/``. ASCII letters, digits and spaces
    are never escaped by encoders and stay literal; every other character matches any of its
    spellings (``(?i)`` also covers the hex digits' case).
    """
    parts = []
    for char in contains:
        if char.isascii() and (char.isalnum() or char == " "):
            parts.append(char)
        else:
            parts.append("(?:" + "|".join(re2_escape(s) for s in _json_spellings(char)) + ")")
    return "(?i)" + "".join(parts)


# Characters whose case folding differs from themselves lie below U+1F000 (the last, Adlam, at
# U+1E921); the table of what folds to what is read once, on the first ``contains``.
_FOLDING_END = 0x1F000
# A needle whose alternatives would make a longer regex is matched on its one-character folds
# only (a needle of many ``ss``/``fi`` pairs grows its alternatives exponentially).
MAX_REGEX_CHARS = 16_000


@functools.cache
def _folds() -> tuple[dict[str, tuple[str, ...]], tuple[tuple[str, str], ...]]:
    """What folds to each single character, and the characters that fold to several."""
    single: dict[str, list[str]] = {}
    multi: list[tuple[str, str]] = []
    for code in range(_FOLDING_END):
        char = chr(code)
        folded = char.casefold()
        if len(folded) == 1:
            if folded != char:
                single.setdefault(folded, []).append(char)
        else:
            multi.append((char, folded))
    return {k: tuple(v) for k, v in single.items()}, tuple(multi)


def _re2_char(char: str) -> str:
    if char.isascii() and char.isalnum():
        return char
    return f"\\x{{{ord(char):x}}}"


def _char_class(folded: str) -> str:
    chars = [folded, *_folds()[0].get(folded, ())]
    if len(chars) == 1:
        return _re2_char(folded)
    return "[" + "".join(_re2_char(c) for c in chars) + "]"


def casefold_regex(needle: str, *, multi: bool = True) -> str:
    """An RE2 pattern matching exactly the texts whose case folding contains ``needle``'s
    (see module docs); unanchored (wrap it in ``.*`` for a label matcher)."""
    target = needle.casefold()
    expansions = _folds()[1] if multi else ()
    size = len(target)
    tails = [""] * (size + 1)  # tails[i]: the pattern of target[i:]
    for i in range(size - 1, -1, -1):
        alternatives = [_char_class(target[i]) + tails[i + 1]]
        for char, folded in expansions:
            if target.startswith(folded, i):  # the character is a whole run of the target
                alternatives.append(_re2_char(char) + tails[i + len(folded)])
            elif folded.startswith(target[i:]):  # it ends the target, folding to more
                alternatives.append(_re2_char(char))
        tails[i] = _group(alternatives)
        if len(tails[i]) > MAX_REGEX_CHARS and multi:
            return casefold_regex(needle, multi=False)
    starts = [tails[0]]
    for char, folded in expansions:  # it starts the target, folding to something before it
        for cut in range(1, len(folded)):
            if target.startswith(folded[cut:]) or folded[cut:].startswith(target):
                rest = min(len(folded) - cut, size)
                starts.append(_re2_char(char) + tails[rest])
                break
    pattern = _group(starts)
    if multi and len(pattern) > MAX_REGEX_CHARS:
        return casefold_regex(needle, multi=False)
    return pattern


def _group(alternatives: list[str]) -> str:
    unique = list(dict.fromkeys(alternatives))
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LINE_FORMATS = ("json", "logfmt")
# logfmt writers use lower case and ``warning``; LogQL regex matchers are anchored.
_LOGFMT_LEVELS = {
    "ERROR": "(?i)(?:error|err)",
    "WARN": "(?i)(?:warn|warning)",
    "INFO": "(?i)info",
    "DEBUG": "(?i)(?:debug|dbg)",
}


def build_logql(q: LogsInput, label: str = "service", line_format: str = "json") -> str:
    """The LogQL for a typed input (see module docs for the shape and why): ``label`` names
    the service's stream label; the level is read from ``json`` (exact) or ``logfmt`` lines
    (case-insensitive, ``warning`` for ``WARN``)."""
    query = "{" + label + "=" + logql_string(q.service) + "}"
    if q.level is None and q.contains is None:
        return query
    # A line the parser refuses is dropped (the folder source skips it as malformed): Loki
    # answers a metric query over lines carrying a parser error with an error.
    query += ' | logfmt | __error__=""' if line_format == "logfmt" else ' | json | __error__=""'
    if q.level is not None:
        if line_format == "logfmt":
            query += " | level=~" + logql_string(_LOGFMT_LEVELS[q.level.value])
        else:
            query += " | level=" + logql_string(q.level.value)
    if q.contains is not None:
        matcher = logql_string("(?s).*" + casefold_regex(q.contains) + ".*")
        if line_format == "logfmt":  # the message is ``msg``, else ``message``
            query += f' | (msg=~{matcher} or (msg="" and message=~{matcher}))'
        else:
            query += " | message=~" + matcher
    return query


def build_count_logql(q: LogsInput, grid: Grid, label: str, line_format: str) -> str:
    """Matching lines per bucket: ``sum(count_over_time(<query> [<width>s]))``."""
    selector = build_logql(q, label, line_format)
    return f"sum(count_over_time({selector} [{grid.width_seconds}s]))"


def build_edge_count_logql(q: LogsInput, span: timedelta, label: str, line_format: str) -> str:
    """Matching lines in the ``span`` before an instant (a bucket cut by the window's end),
    the range in whole milliseconds (LogQL's smallest unit)."""
    selector = build_logql(q, label, line_format)
    return f"sum(count_over_time({selector} [{span // timedelta(milliseconds=1)}ms]))"


def unix_ns(ts: datetime) -> str:
    delta = ts.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return str((delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000)
