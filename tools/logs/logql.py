"""LogQL built from the typed ``query_logs`` input, every value escaped as a string literal.

``{service="<service>"} |~ "(?i)<regex-escaped contains>" | json | level="<LEVEL>"``: the
service is a stream label matcher, ``contains`` a case-insensitive line filter before the
parser, ``level`` a field of the parsed line (``| json``, or ``| logfmt`` matched
case-insensitively). :func:`build_count_logql` wraps the same query in ``count_over_time``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sre_diag.tools.logs.summary import Grid
from sre_diag.tools.schemas import LogsInput

__all__ = [
    "LABEL_NAME",
    "LINE_FORMATS",
    "build_count_logql",
    "build_logql",
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
    if q.contains is not None:
        query += " |~ " + logql_string(contains_regex(q.contains))
    if q.level is not None:
        if line_format == "logfmt":
            query += " | logfmt | level=~" + logql_string(_LOGFMT_LEVELS[q.level.value])
        else:
            query += " | json | level=" + logql_string(q.level.value)
    return query


def build_count_logql(q: LogsInput, grid: Grid, label: str, line_format: str) -> str:
    """Matching lines per bucket: ``sum(count_over_time(<query> [<width>s]))``."""
    selector = build_logql(q, label, line_format)
    return f"sum(count_over_time({selector} [{grid.width_seconds}s]))"


def unix_ns(ts: datetime) -> str:
    delta = ts.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return str((delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000)
