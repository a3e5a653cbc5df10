"""The ``summary`` of a ``query_logs`` window (CONTRACTS §4): counts, buckets, top patterns.

A :class:`Tally` sees every matching line once (``add``) and can be merged with another (a scan
split over hours or processes). What it keeps per line is constant: the matched count, the
first and last instant, one bucket counter, and one entry per distinct *pattern key*.

Pattern mining is a masker, not a clustering algorithm: variable parts of a message (numbers
with their sign or comparator, durations with an attached or spelled unit, byte sizes, hex,
UUIDs, IPv4/IPv6/MAC addresses, host names and ``host:port``, ids mixing letters and digits,
dates and times in ISO, syslog, ctime, RFC 2822, Apache and US forms with month and weekday
names abbreviated, full or in capitals, quoted values, an empty ``()`` where a value stands)
become ``<*>``; wildcards joined by punctuation (``<*>,<*>``) and a run of one masked token
repeated (a list of values of varying length) become one. Then a Drain-like step
(:func:`plugin.tools.logs.variants.variant_targets`) merges patterns equal but for one word
that takes many values, or one literal word beside the same pattern with ``<*>`` in its place
(``bench/patterns.py`` compares it with Drain3 on the Loghub samples, the bundled incident and
a mix of 20 message shapes). Its cost is kept off the per-line path:

* the per-line key is the message's first :data:`KEY_CHARS` characters as UTF-8 with every digit
  turned into ``0`` (``bytes.translate``, a few tens of nanoseconds). The masker treats all
  digits alike, so messages differing only in their digits share a key and a pattern;
* a key becomes a pattern once, when the summary is built: redacted first
  (:func:`plugin.tools.redact.redact_prefix`: patterns are evidence, i.e. attacker data), then
  masked
  (:func:`full_pattern`);
* keys that mask to the same full pattern are merged, so counts are per pattern; only the five
  shown are then bounded to :data:`PATTERN_CHARS` characters and :data:`PATTERN_BYTES` bytes of
  JSON (cutting before grouping merged long messages that differ past the cut).

Why every key is masked, not only the top ones: keys are counted cheaply, but a key is not a
group. One event usually spreads over many keys (an id with letters, a host name, a user: the
split Loghub scores), each rare, so the most frequent keys are not the most frequent patterns,
and a pattern's count is only exact once every key that masks to it is known; the variant
merge also needs every pattern of the window. Masking only the top keys would show the wrong
top five with undercounts. So the cost is bounded differently: once per distinct key, never per
line (6 k keys for 240 k lines on the busiest hour); most frequent first under the run's budget
(out of time: the patterns so far, ``exact: false``); cached across queries; and each rule runs
only on keys holding a needle its every match contains.

At most :data:`MAX_KEYS` distinct keys are tracked; lines with a further new key still count in
``matched`` and the buckets, but the summary then says ``exact: false``.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from plugin.tools.logs.variants import MERGE_VARIANTS, STOP_EVERY, WILDCARD, variant_targets
from plugin.tools.redact import HEADROOM, redact_prefix
from plugin.tools.schemas import LogBuckets, LogPattern, LogSummary
from plugin.tools.threads import NEVER, OutOfTime, Stop, Stopped

__all__ = [
    "BUCKET_WIDTHS",
    "KEY_CHARS",
    "MAX_BUCKETS",
    "MAX_KEYS",
    "MERGE_VARIANTS",
    "PATTERN_BYTES",
    "PATTERN_CHARS",
    "TOP_MESSAGES",
    "Grid",
    "Tally",
    "bound_pattern",
    "format_ts",
    "full_pattern",
    "mask_message",
    "message_pattern",
    "pattern_key",
    "pattern_keys",
    "pattern_of",
    "variant_targets",
    "window_patterns",
]

BUCKET_WIDTHS = (60, 300, 900, 1800, 3600)
MAX_BUCKETS = 60
TOP_MESSAGES = 5
PATTERN_CHARS = 160
PATTERN_BYTES = 320  # one pattern as a JSON string, worst case (escapes, CJK)
KEY_CHARS = PATTERN_CHARS + HEADROOM
MAX_KEYS = 20_000
PATTERN_CACHE = 65_536
_MARK = "…"
_STOP_EVERY = STOP_EVERY  # keys masked between two looks at the stop flag (~1 ms)
_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def format_ts(ts: datetime) -> str:
    """RFC 3339 in UTC with millisecond precision and a ``Z`` suffix."""
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Grid:
    """Fixed-width buckets from the window's start: the smallest width of
    :data:`BUCKET_WIDTHS` that covers the window in at most :data:`MAX_BUCKETS` buckets."""

    start: datetime
    width_seconds: int
    count: int

    @classmethod
    def for_window(cls, start: datetime, end: datetime) -> Grid:
        start = start.astimezone(UTC)
        span = (end.astimezone(UTC) - start).total_seconds()
        for width in BUCKET_WIDTHS:
            count = max(1, -int(-span // width))
            if count <= MAX_BUCKETS:
                return cls(start, width, count)
        raise ValueError("window longer than the largest bucket grid")

    def index(self, ts: datetime) -> int:
        """The bucket of ``ts`` (a UTC instant inside the window)."""
        return (ts - self.start) // timedelta(seconds=self.width_seconds)


def pattern_key(message: str) -> bytes:
    """The per-line key: the message's head with every digit as ``0`` (see module docs)."""
    return message[: KEY_CHARS + 1].encode("utf-8", "surrogatepass").translate(_DIGITS)


def pattern_keys(messages: Sequence[str]) -> list[bytes]:
    """:func:`pattern_key` of each message; one encode and one translate over all of them when
    no message holds a newline or is longer than the key (the common case)."""
    joined = "\n".join(messages)
    if joined.count("\n") == len(messages) - 1 and max(map(len, messages)) <= KEY_CHARS:
        return joined.encode("utf-8", "surrogatepass").translate(_DIGITS).split(b"\n")
    return list(map(pattern_key, messages))


# Applied in order to redacted text. Every rule is linear: runs are bounded by a character
# they cannot contain, and lookarounds are fixed-width.
_NOT_ALNUM_BEFORE = r"(?<![A-Za-z0-9])"
_NOT_ALNUM_AFTER = r"(?![A-Za-z0-9])"
_NOT_HOST_BEFORE = r"(?<![A-Za-z0-9.@-])(?<!//)"  # a URL's host names the upstream: kept
# Month and weekday names, abbreviated, full or in capitals (Jan, January, JAN; Thu, Thurs,
# Thursday, THU): masked as date parts, i.e. only beside a day, a year or another date part.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH = (
    r"(?=[ADFJMNOS])(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|"
    + "|".join(m.upper() for m in _MONTHS)
    + ")"
)
_WEEKDAY = (
    r"(?=[FMSTW])(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs?(?:day)?)?|Fri(?:day)?"
    r"|Sat(?:urday)?|Sun(?:day)?|" + "|".join(d.upper() for d in _WEEKDAYS) + ")"
)
_HOST_SUFFIX = (
    r"(?:com|net|org|io|dev|app|cloud|local|localdomain|internal|lan|corp|home|svc|cluster|edu|gov"
    r"|info|biz|co|ac)"
)
# A dotted name taken whole (possessive: never given back label by label, which cost a
# backtracking stack as deep as the run), then its last label checked by lookbehinds.
_HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9-]*+(?:\.[A-Za-z0-9][A-Za-z0-9-]*+)++"
_HOST_ENDS = (
    "(?:"
    + "|".join(
        rf"(?<=\.{suffix})|(?<=\.{suffix}\.[a-z][a-z])"
        for suffix in _HOST_SUFFIX.removeprefix("(?:").removesuffix(")").split("|")
    )
    + ")"
)
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    # quoted values after = or : (key="value", "key": "value")
    (re.compile(r"(?P<k>[=:] ?)(?P<q>[\"'])[^\"'\n]{0,200}(?P=q)"), r"\g<k>\g<q><*>\g<q>"),
    # UUIDs
    (
        re.compile(
            _NOT_ALNUM_BEFORE + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
            r"-[0-9a-fA-F]{12}" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # ISO dates and times
    (
        re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"),
        WILDCARD,
    ),
    # times with AM/PM (US): 10:05 PM, 3:04:05 a.m.
    (
        re.compile(r"(?<!\d)\d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)? ?[AaPp]\.?[Mm]\.?(?![A-Za-z])"),
        WILDCARD,
    ),
    # IPv6 and MAC addresses, before clock times (whose digits they may hold): up to 8 groups of
    # hex joined by colons, with a :: or 6+ groups holding a digit (a time has 4 at most)
    # (fe80::1c6a:7dff:fe00:1, a4:5e:60:e2:0b:11, [::1]:80); a run starts only where no letter,
    # digit or colon precedes it, and its length is bounded
    (
        re.compile(
            r"(?<![0-9A-Za-z:])"
            r"(?=[0-9A-Fa-f:]{0,37}::|(?=[0-9A-Fa-f:]{0,39}\d)(?:[0-9A-Fa-f]{1,4}:){5})"
            r"(?:[0-9A-Fa-f]{1,4}:|:){2,7}(?::|[0-9A-Fa-f]{1,4})(?![0-9A-Za-z:])"
        ),
        WILDCARD,
    ),
    (re.compile(r"(?<!\d)\d\d:\d\d:\d\d(?:[.,]\d+)?"), WILDCARD),
    # weekday and month names next to a day or year (syslog, RFC 2822, Apache, Java dates):
    # Mon Jun 14, Jun 14 2023, 14-Jun-2023, 14/Jun/2023:10:00:00; January 5, 2026 is one value
    (
        re.compile(r"(?<![A-Za-z])" + _WEEKDAY + r"\.?,? (?=" + _MONTH + r"|\d)"),
        WILDCARD + " ",
    ),
    (
        re.compile(
            r"(?<![A-Za-z])" + _MONTH + r"\.?(?: {1,2}\d{1,2}, \d{4}(?!\d)"
            r"|(?= {1,2}\d{1,2}(?!\d)| \d{4}(?!\d)|[-/]\d))"
        ),
        WILDCARD,
    ),
    (re.compile(r"(?<=\d[-/ ])" + _MONTH + r"(?=[-/ ]\d)"), WILDCARD),
    # IPv4 with an optional port
    (re.compile(r"\d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\d.])"), WILDCARD),
    # host names: a dotted name under a common suffix (node-7.prod.example.com, *.internal,
    # a.example.co.uk) or of 3+ labels under a country code (proxy.cse.cuhk.edu.hk, x.b.nl),
    # or a name with a dash or two dots before a port (db-primary:3306); a one-dot name before
    # a number is left alone (Bar.java:123 is a source line, not a host), and so is the host
    # of a URL (https://api.stripe.com/… and https://api.adyen.com/… are different events)
    (
        re.compile(
            _NOT_HOST_BEFORE
            + r"(?:"
            + _HOST_NAME
            + _HOST_ENDS
            + r"|(?=(?:[A-Za-z0-9][A-Za-z0-9-]*+\.){2})"
            + _HOST_NAME
            + r"(?<=\.[a-z][a-z]))(?::\d{1,5}(?!\d))?"
        ),
        WILDCARD,
    ),
    (
        re.compile(
            _NOT_HOST_BEFORE + r"[A-Za-z][A-Za-z0-9]*(?:(?:-[A-Za-z0-9]+)+(?:\.[A-Za-z0-9-]+)*"
            r"|(?:\.[A-Za-z0-9-]+){2,}):\d{2,5}(?![\d.]|:\d)"
        ),
        WILDCARD,
    ),
    # hex: 0x…, or a run of 8+ hex characters with a digit and a letter (digits alone are a
    # number, which may still take a unit: 11721005 bytes (11.1 MB) is one size)
    (re.compile(_NOT_ALNUM_BEFORE + r"0[xX][0-9a-fA-F]+" + _NOT_ALNUM_AFTER), WILDCARD),
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"[-+]?(?:(?=[a-fA-F]*\d)(?=\d*[a-fA-F])[0-9a-fA-F]{8,}|[a-f]{8,}|[A-F]{8,})"
            + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # sizes with their byte unit, which a formatter picks by the value: 24 B, 9.2 KB, 3.1GiB
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"(?<![0-9][.,])[-+]?\d+(?:[.,]\d+)* ?(?:[KMGTPE]i?B|B|bytes)"
            + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # durations with a spelled unit after a space are one value, unit and comparator included:
    # <1 sec, 12 seconds, 3 min, 1.5 hours -> <*> (as 00:01 is)
    (
        re.compile(
            r"(?<![A-Za-z0-9<>])(?:[<>]=?|~)?(?<![0-9][.,])\d+(?:[.,]\d+)* "
            r"(?:[mun]?secs?|[mun]?seconds?|mins?|minutes?|hrs?|hours?|days?)" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # numbers with a unit (durations, sizes, percentages) keep the unit: 3000ms -> <*>ms.
    # A number starts only where no digit group ends just before it: started at every group of
    # 1.1.1.… the rule rescanned the rest of the run from each (quadratic).
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"(?<![0-9][.,])[-+]?\d+(?:[.,]\d+)*(?=(?:ns|us|µs|ms|s|m|h|d|[KMGT]i?B|B|%)"
            + _NOT_ALNUM_AFTER
            + ")"
        ),
        WILDCARD,
    ),
    # ids mixing letters and digits: 6+ characters, or 4+ with two digits (pay_MVFKZ6VQPC8Z ->
    # pay_<*>, a1b2 -> <*>; ipv6, log4j keep their letters)
    (
        re.compile(
            _NOT_ALNUM_BEFORE + r"(?=[A-Za-z]*\d)(?=\d*[A-Za-z])"
            r"(?:(?=[A-Za-z0-9]{6})|(?=[A-Za-z]*\d[A-Za-z]*\d))[A-Za-z0-9]{4,}" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # short slot ids after a prefix: one or two capitals and digits (Thunderbird_C6, rack-B12)
    (re.compile(r"(?<=[A-Za-z0-9][_-])[A-Z]{1,2}\d{1,4}" + _NOT_ALNUM_AFTER), WILDCARD),
    # upper-case ids after a prefix, even without a digit: pay_DAMPHFXMULRU -> pay_<*>
    (re.compile(r"(?<=_)[A-Z0-9]{12,}" + _NOT_ALNUM_AFTER), WILDCARD),
    # every remaining digit run (a version's dots included), with its sign where one stands
    # alone before it (offset=-12, blk_-1608…; node-3 keeps its dash): no digit is ever shown
    # (written to start with the class of its first character, so that its pass skips to the
    # candidates in C: a sign not after a letter or digit, or a digit)
    (
        re.compile(r"[-+\d](?:(?<=[-+])(?<![A-Za-z0-9][-+])\d+|(?<=\d)\d*)(?:[.,]\d+)*"),
        WILDCARD,
    ),
    # an empty value in brackets where a value stands: host () vs host (name) -> (<*>)
    (re.compile(r"(?<![^ =:,])\(\)(?![^ ,;.])"), "(" + WILDCARD + ")"),
    # adjacent wildcards joined by punctuation collapse: <*>.<*>, <*>:<*>, a list <*>,<*>, and
    # a value with its other rendering in brackets: 1190 bytes (1.16 KB) -> <*> (<*>) -> <*>
    (re.compile(r"<\*>(?:[.:/,-]<\*>| \(<\*>\))+"), WILDCARD),
)


def _any_of(*needles: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(needle) for needle in needles))


# A rule runs only on text holding its gate: a substring (``""``: any text) and, when given, a
# match of a needle that every match of the rule contains (a cheap search: each needle starts
# with a literal or a small class, so the search skips to its candidates in C). What a message
# cannot match then costs a substring test or one search, not the rule's pass, and a needle
# shared by consecutive rules is searched once while the text is unchanged. Gates only skip
# passes that would find nothing (tests/tools/test_pattern_quality.py compares with every rule
# run); each needle is linear like the rules (tests/tools/test_evidence_mask_linear.py).
_MONTH_NEEDLE = _any_of(*_MONTHS, *(m.upper() for m in _MONTHS))
_HH = "[0-9a-fA-F]"
_GATES: tuple[tuple[str, re.Pattern[str] | None], ...] = (
    ("", re.compile(r"[\"'](?:(?<=[=:][\"'])|(?<=[=:] [\"']))")),  # ="  = '  :"  : '
    ("-", re.compile(rf"-{_HH}{{4}}-{_HH}{{4}}-{_HH}{{4}}-")),  # a UUID's middle groups
    ("-", re.compile(r"-\d\d-\d")),  # 2026-11-28
    (":", re.compile(r":\d\d(?::\d\d)?(?:[.,]\d++)? ?[AaPp]")),  # 10:05 PM
    (":", re.compile(rf":(?::|(?:{_HH}{{1,4}}:){{4}})")),  # a :: or 6+ groups
    (":", re.compile(r":\d\d:\d")),  # 10:05:00
    ("", _any_of(*_WEEKDAYS, *(d.upper() for d in _WEEKDAYS))),
    ("", _MONTH_NEEDLE),
    ("", _MONTH_NEEDLE),
    (".", re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")),  # 10.0.0.1
    (".", re.compile(r"\.[a-z](?<=[A-Za-z0-9-]\.[a-z])")),  # a dotted name
    (":", re.compile(r":\d\d")),  # host:port
    ("", re.compile(r"[xX](?<=0[xX])")),  # 0x…
    ("", re.compile(rf"{_HH}{{8}}")),
    ("", re.compile(r"\d ?[KMGTPEBb]")),  # 24 B, 9.2 KB, 7 bytes
    ("", re.compile(r"\d [numshd]")),  # 12 seconds
    ("", re.compile(r"\d[nuµmshdKMGTB%]")),  # 3000ms
    ("", re.compile(r"\d(?:(?<=[A-Za-z]\d)|[A-Za-z])")),  # a letter beside a digit
    ("", re.compile(r"[_-][A-Z]{1,2}\d")),  # _C6
    ("_", re.compile(r"_[A-Z0-9]{12}")),  # _DAMPHFXMULRU
    ("", None),  # digits: the rule's own pass starts only at a digit or sign
    ("()", None),
    (WILDCARD, None),
)
_GATED: tuple[tuple[re.Pattern[str], str, str, re.Pattern[str] | None], ...] = tuple(
    (pattern, replacement, literal, needle)
    for (pattern, replacement), (literal, needle) in zip(_MASKS, _GATES, strict=True)
)


def mask_message(text: str) -> str:
    """``text`` with its variable parts as ``<*>`` (the rules above, in order)."""
    searched: re.Pattern[str] | None = None  # the needle last searched in this very text
    found = False
    for pattern, replacement, literal, needle in _GATED:
        if literal not in text:
            continue
        if needle is not None:
            if needle is not searched:
                searched, found = needle, needle.search(text) is not None
            if not found:
                continue
        masked = pattern.sub(replacement, text)
        if masked != text:
            text, searched = masked, None
    return text


def bound_pattern(text: str) -> str:
    """At most :data:`PATTERN_CHARS` characters and :data:`PATTERN_BYTES` bytes as a JSON
    string (escapes and multi-byte characters included), cut with a visible mark."""
    if len(text) > PATTERN_CHARS:
        text = text[: PATTERN_CHARS - len(_MARK)] + _MARK
    while len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) > PATTERN_BYTES:
        text = text[: max(len(text) - len(_MARK) - 8, 0)] + _MARK
    return text


@lru_cache(maxsize=PATTERN_CACHE)
def full_pattern(key: bytes) -> str:
    """The pattern a key is grouped under: redacted, masked, whitespace runs as one space —
    never cut (two long messages that differ only past the display bound stay two groups).
    Pure, so the most recent :data:`PATTERN_CACHE` keys are remembered across queries."""
    text, _ = redact_prefix(key.decode("utf-8", "surrogatepass"), KEY_CHARS)
    # A message's own "<*>" is not the mask: a line cannot pose as a pattern's wildcard form.
    text = text.replace("<*>", "<\u2217>")
    return " ".join(_collapse_runs(mask_message(text).split()))


def _collapse_runs(tokens: list[str]) -> list[str]:
    """A run of one masked token repeated is a list of values of varying length, one token:
    ``delete blk_<*> blk_<*> blk_<*>`` -> ``delete blk_<*>``, ``IRQs <*> <*> <*>`` ->
    ``IRQs <*>`` (literal words repeated are kept)."""
    kept: list[str] = []
    for token in tokens:
        if not (kept and token == kept[-1] and WILDCARD in token):
            kept.append(token)
    return kept


def pattern_of(key: bytes) -> str:
    """The shown pattern of a key: :func:`full_pattern` bounded for display."""
    return bound_pattern(full_pattern(key))


def message_pattern(message: str) -> str:
    """The pattern of one message alone (before :func:`variant_targets` merges a window's)."""
    return full_pattern(pattern_key(message))


def window_patterns(messages: Sequence[str]) -> list[str]:
    """What the summary groups each of ``messages`` under when they are one window's matches
    (what ``sre-diag patterns`` prints): :func:`message_pattern`, then :func:`variant_targets`
    over all of them."""
    keys = pattern_keys(messages)
    lines = Counter(keys)  # each distinct key is masked once, its lines counted in C
    alone = {key: full_pattern(key) for key in lines}
    counts: Counter[str] = Counter()
    for key, count in lines.items():
        counts[alone[key]] += count
    targets = variant_targets(counts)
    grouped = {key: targets.get(pattern, pattern) for key, pattern in alone.items()}
    return list(map(grouped.__getitem__, keys))


class _Seen:
    """Count and first/last instant of one key or pattern."""

    __slots__ = ("count", "first", "last")

    def __init__(self, ts: datetime, count: int = 1, last: datetime | None = None) -> None:
        self.count = count
        self.first = ts
        self.last = ts if last is None else last

    def merge(self, other: _Seen) -> None:
        self.count += other.count
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)


def _fold(patterns: dict[str, _Seen], pattern: str, seen: _Seen) -> None:
    mine = patterns.get(pattern)
    if mine is None:
        patterns[pattern] = _Seen(seen.first, seen.count, seen.last)
    else:
        mine.merge(seen)


class Tally:
    """Everything the summary needs, accumulated line by line (see module docs)."""

    __slots__ = ("counts", "first", "grid", "keys", "last", "matched", "overflow")

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.matched = 0
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.counts = [0] * grid.count
        self.keys: dict[bytes, _Seen] = {}
        self.overflow = False

    def add(self, ts: datetime, message: str) -> None:
        """One matching line (``ts`` a UTC instant inside the window)."""
        self.matched += 1
        if self.first is None or ts < self.first:
            self.first = ts
        if self.last is None or ts > self.last:
            self.last = ts
        self.counts[self.grid.index(ts)] += 1
        key = pattern_key(message)
        seen = self.keys.get(key)
        if seen is not None:
            seen.count += 1
            if ts < seen.first:
                seen.first = ts
            elif ts > seen.last:
                seen.last = ts
        elif len(self.keys) < MAX_KEYS:
            self.keys[key] = _Seen(ts)
        else:
            self.overflow = True

    def add_sorted(self, times: Sequence[datetime], keys: Sequence[bytes]) -> None:
        """Many matching lines at once, ``times`` (UTC, inside the window) sorted newest first
        and ``keys`` their :func:`pattern_key` values: the same as ``add`` on each line, with
        the per-line work done by C loops (bisect, ``dict``, ``Counter``)."""
        if not times:
            return
        self.matched += len(times)
        newest, oldest = times[0], times[-1]
        self.first = oldest if self.first is None else min(self.first, oldest)
        self.last = newest if self.last is None else max(self.last, newest)
        ascending = times[::-1]
        edges = [
            bisect_left(ascending, self.grid.start + timedelta(seconds=self.grid.width_seconds * i))
            for i in range(1, self.grid.count)
        ]
        previous = 0
        for i, edge in enumerate([*edges, len(ascending)]):
            self.counts[i] += edge - previous
            previous = edge
        first_seen = dict(zip(keys, times, strict=True))  # the last write is the oldest
        last_seen = dict(zip(reversed(keys), reversed(times), strict=True))
        for key, count in Counter(keys).items():
            self._merge_key(key, count, first_seen[key], last_seen[key])

    def _merge_key(self, key: bytes, count: int, first: datetime, last: datetime) -> None:
        seen = self.keys.get(key)
        if seen is not None:
            seen.merge(_Seen(first, count, last))
        elif len(self.keys) < MAX_KEYS:
            self.keys[key] = _Seen(first, count, last)
        else:
            self.overflow = True

    def add_counts(self, counts: list[int]) -> None:
        """Bucket counts known from elsewhere (a metric query): they replace the matched
        count and the buckets, lines added stay the pattern sample."""
        self.counts = counts[: self.grid.count] + [0] * max(self.grid.count - len(counts), 0)
        self.matched = sum(self.counts)

    def merge(self, other: Tally) -> None:
        """Fold ``other`` (same grid) into this tally."""
        self.matched += other.matched
        for ts in (other.first, other.last):
            if ts is not None:
                self.first = ts if self.first is None else min(self.first, ts)
                self.last = ts if self.last is None else max(self.last, ts)
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.overflow |= other.overflow
        for key, seen in other.keys.items():
            self._merge_key(key, seen.count, seen.first, seen.last)

    def top_patterns(self, stop: Stop = NEVER) -> list[tuple[str, _Seen]]:
        """The :data:`TOP_MESSAGES` most frequent patterns (ties: earliest first seen).

        Keys are masked most frequent first and ``stop`` is checked every
        :data:`_STOP_EVERY` keys: a cancelled caller ends the work (:class:`Stopped`); a spent
        time budget ends it early with the patterns of the keys masked so far, the most
        frequent ones, and the summary then says ``exact: false``."""
        patterns: dict[str, _Seen] = {}
        ranked_keys = sorted(self.keys.items(), key=lambda kv: -kv[1].count)
        for done, (key, seen) in enumerate(ranked_keys):
            if done % _STOP_EVERY == 0 and self._stop_here(stop):
                break
            _fold(patterns, full_pattern(key), seen)
        patterns = self._merge_variants(patterns, stop)
        ranked = sorted(patterns.items(), key=lambda kv: (-kv[1].count, kv[1].first, kv[0]))
        return [(bound_pattern(pattern), seen) for pattern, seen in ranked[:TOP_MESSAGES]]

    def _merge_variants(self, patterns: dict[str, _Seen], stop: Stop) -> dict[str, _Seen]:
        try:
            targets = variant_targets({p: seen.count for p, seen in patterns.items()}, stop)
        except OutOfTime:
            self.overflow = True
            return patterns
        merged: dict[str, _Seen] = {}
        for pattern, seen in patterns.items():
            _fold(merged, targets.get(pattern, pattern), seen)
        return merged

    def _stop_here(self, stop: Stop) -> bool:
        if stop.requested:
            raise Stopped
        if stop.out_of_time():
            self.overflow = True
            return True
        return False

    def summary(self, *, exact: bool, stop: Stop = NEVER) -> LogSummary:
        """The summary model; ``exact`` is further cleared when keys overflowed or the
        masking ran out of time (see :meth:`top_patterns`)."""
        top = self.top_patterns(stop)
        return LogSummary(
            matched=self.matched,
            exact=exact and not self.overflow,
            first_ts=format_ts(self.first) if self.first is not None else None,
            last_ts=format_ts(self.last) if self.last is not None else None,
            buckets=LogBuckets(
                start=format_ts(self.grid.start),
                width_seconds=self.grid.width_seconds,
                counts=list(self.counts),
            ),
            top_messages=[
                LogPattern(
                    pattern=pattern,
                    count=seen.count,
                    first_ts=format_ts(seen.first),
                    last_ts=format_ts(seen.last),
                )
                for pattern, seen in top
            ],
        )
