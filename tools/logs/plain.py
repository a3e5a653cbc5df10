"""Reading one plain-text log line: its time (a UTC instant), level and message.

Formats recognised at the start of a line (the first that matches decides):

* RFC 3339 / ISO 8601 (``2026-11-28T10:05:00.123+01:00``, a space for ``T``, ``,`` or ``.``
  before the fraction, ``Z`` or an offset; no zone is UTC), followed by a Python logging
  (``- name - ERROR - msg``), Log4j/Logback (``ERROR [thread] logger - msg``) or plain level
  (``ERROR msg``, ``[error] msg``, ``error: msg``) part, or by nothing recognised (``INFO``);
* syslog (``Nov 28 10:05:00 host prog[pid]: msg``): the year is the window's (see
  :func:`_in_year`), the zone UTC, the level a leading level word of ``msg`` (else ``INFO``);
* nginx/Apache access logs (``… [28/Nov/2026:10:05:00 +0000] "GET / HTTP/1.1" 503 …``): the
  level from the status (5xx ``ERROR``, 4xx ``WARN``, else ``INFO``), the message the line;
* nginx error logs (``2026/11/28 10:05:00 [error] 7#7: msg``): UTC, the bracketed level;
* klog (``E1128 10:05:00.123456   7 file.go:42] msg``): the year is the window's, UTC.

Levels are folded to ``ERROR`` (also ``FATAL``, ``CRITICAL``, ``SEVERE``…), ``WARN``
(``WARNING``), ``INFO`` (``NOTICE``) and ``DEBUG`` (``TRACE``). A line none of these read
(``ERROR:name:msg``, which carries no time, among them) has no time: :func:`parse_plain`
answers ``None``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

__all__ = ["continues", "parse_plain"]

Parsed = tuple[datetime, str, str]  # ts (UTC), level, message

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_LEVELS = {
    "ERROR": "ERROR", "ERR": "ERROR", "FATAL": "ERROR", "CRITICAL": "ERROR", "CRIT": "ERROR",
    "SEVERE": "ERROR", "ALERT": "ERROR", "EMERG": "ERROR", "EMERGENCY": "ERROR",
    "WARN": "WARN", "WARNING": "WARN",
    "INFO": "INFO", "NOTICE": "INFO",
    "DEBUG": "DEBUG", "TRACE": "DEBUG",
}  # fmt: skip
_LEVEL = "|".join(sorted(_LEVELS, key=len, reverse=True))
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
    r"\s?(Z|z|[+-]\d\d(?::?\d\d)?)?(?=\s|$)"
)
_PYTHON = re.compile(rf" - (?:\S.*?) - (?P<level>{_LEVEL}) - (?P<msg>.*)", re.S)
_LOG4J = re.compile(
    rf"\s++(?P<level>{_LEVEL})\s++\[[^\]]*+\]\s++\S++\s++-\s(?P<msg>.*)", re.S | re.I
)
_WORD = re.compile(
    rf"\s*+(?:\[(?P<b>(?i:{_LEVEL}))\][:\s]|(?P<w>{_LEVEL})[:\s]|(?P<c>(?i:{_LEVEL})):\s)\s*"
)
_SYSLOG = re.compile(
    r"([A-Z][a-z]{2}) ([ \d]\d) (\d\d):(\d\d):(\d\d) \S+ [^\s:\[]+(?:\[\d+\])?: (?P<msg>.*)", re.S
)
_ACCESS = re.compile(
    r"\S+ \S+ [^\[]*\[(\d\d)/([A-Z][a-z]{2})/(\d{4}):(\d\d):(\d\d):(\d\d) ([+-]\d{4})\] "
    r"\"[^\"]*\" (\d{3})(?:\s|$)"
)
_NGINX_ERROR = re.compile(
    r"(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d) \[(emerg|alert|crit|error|warn|notice|info"
    r"|debug)\] (?P<msg>.*)",
    re.S,
)
_KLOG = re.compile(r"([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s++\d++ [^\]]*+\] ")
_KLOG_LEVELS = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "ERROR"}
_CONTINUATION = re.compile(
    r"[ \t]|Traceback \(|Caused by:|at |\.\.\. \d+ more|Suppressed:"
    r"|[\w.$]*(?:Exception|Error|Throwable)(?::|$)"
)


def continues(line: str) -> bool:
    """Whether an untimed ``line`` continues the entry above it (a stack trace line)."""
    return _CONTINUATION.match(line) is not None


def _zone(text: str | None) -> timezone:
    if text is None or text in {"Z", "z"}:
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))


def _micros(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _level_word(rest: str) -> tuple[str, str]:
    """A leading level word of ``rest`` and the message after it, else ``INFO`` and ``rest``."""
    word = _WORD.match(rest)
    if word is None:
        return "INFO", rest.strip()
    name = word.group("b") or word.group("w") or word.group("c")
    return _LEVELS[name.upper()], rest[word.end() :]


def _iso(line: str) -> Parsed | None:
    found = _ISO.match(line)
    if found is None:
        return None
    year, month, day, hour, minute, second = map(int, found.groups()[:6])
    ts = datetime(
        year, month, day, hour, minute, second, _micros(found.group(7)), _zone(found.group(8))
    ).astimezone(UTC)
    rest = line[found.end() :]
    for form in (_PYTHON, _LOG4J):
        shaped = form.match(rest)
        if shaped is not None:
            return ts, _LEVELS[shaped.group("level").upper()], shaped.group("msg")
    level, message = _level_word(rest)
    return ts, level, message


def _in_year(month: int, day: int, clock: tuple[int, int, int, int], end: datetime) -> datetime:
    """A yearless time in the year that puts it at most a day after ``end`` (the window's end,
    UTC): a December line read in a January window is last year's."""
    hour, minute, second, micro = clock
    ts = datetime(end.year, month, day, hour, minute, second, micro, tzinfo=UTC)
    if ts > end + timedelta(days=1):
        ts = ts.replace(year=end.year - 1)
    return ts


def _syslog(line: str, end: datetime) -> Parsed | None:
    found = _SYSLOG.match(line)
    if found is None or found.group(1) not in _MONTHS:
        return None
    hour, minute, second = map(int, found.groups()[2:5])
    ts = _in_year(_MONTHS[found.group(1)], int(found.group(2)), (hour, minute, second, 0), end)
    level, message = _level_word(found.group("msg"))
    return ts, level, message


def _access(line: str) -> Parsed | None:
    found = _ACCESS.match(line)
    if found is None or found.group(2) not in _MONTHS:
        return None
    day, _, year, hour, minute, second = found.groups()[:6]
    ts = datetime(
        int(year), _MONTHS[found.group(2)], int(day), int(hour), int(minute), int(second),
        tzinfo=_zone(found.group(7)),
    ).astimezone(UTC)  # fmt: skip
    status = int(found.group(8))
    level = "ERROR" if status >= 500 else "WARN" if status >= 400 else "INFO"
    return ts, level, line


def _nginx_error(line: str) -> Parsed | None:
    found = _NGINX_ERROR.match(line)
    if found is None:
        return None
    year, month, day, hour, minute, second = map(int, found.groups()[:6])
    ts = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    return ts, _LEVELS[found.group(7).upper()], found.group("msg")


def _klog(line: str, end: datetime) -> Parsed | None:
    found = _KLOG.match(line)
    if found is None:
        return None
    month, day, hour, minute, second = map(int, found.groups()[1:6])
    ts = _in_year(month, day, (hour, minute, second, _micros(found.group(7))), end)
    return ts, _KLOG_LEVELS[found.group(1)], line[found.end() :]


def parse_plain(line: str, end: datetime) -> Parsed | None:
    """The time (UTC), level and message of one line (see module docs), or ``None`` when it
    has no readable time; ``end`` (the window's end) gives syslog and klog lines their year."""
    try:
        if line[:1].isdigit():
            return _iso(line) or _nginx_error(line) or _access(line)
        return _syslog(line, end) or _klog(line, end) or _access(line)
    except (ValueError, OverflowError):  # Feb 30, hour 25, an offset past a day, year 10000
        return None
