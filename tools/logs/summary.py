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
(:func:`sre_diag.tools.logs.variants.variant_targets`) merges patterns equal but for one word
that takes many values, or one literal word beside the same pattern with ``<*>`` in its place
(``bench/patterns.py`` compares it with Drain3 on the Loghub samples, the bundled incident and
a mix of 20 message shapes). Its cost is kept off the per-line path:

* the per-line key is the message's first :data:`KEY_CHARS` characters as UTF-8 with every digit
  turned into ``0`` (``bytes.translate``, a few tens of nanoseconds). The masker treats all
  digits alike, so messages differing only in their digits share a key and a pattern;
* a key becomes a pattern once, when the summary is built: redacted first
  (:func:`sre_diag.tools.redact.redact_prefix`: patterns are evidence, i.e. attacker data), then
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
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from sre_diag.tools.logs.masking import mask_key_text, mask_message
from sre_diag.tools.logs.variants import MERGE_VARIANTS, STOP_EVERY, WILDCARD, variant_targets
from sre_diag.tools.plain import visible_controls
from sre_diag.tools.redact import HEADROOM, redact_prefix
from sre_diag.tools.schemas import LogBuckets, LogPattern, LogSummary
from sre_diag.tools.threads import NEVER, OutOfTime, Stop, Stopped

__all__ = [
    "BUCKET_WIDTHS",
    "EXAMPLE_CHARS",
    "KEY_CHARS",
    "MAX_BUCKETS",
    "MAX_KEYS",
    "MERGE_VARIANTS",
    "PATTERN_BYTES",
    "PATTERN_CHARS",
    "TOP_MESSAGES",
    "Grid",
    "Tally",
    "WindowPatterns",
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
    """The pattern a key is grouped under: redacted, masked, whitespace runs as one space,
    controls made visible (:func:`sre_diag.tools.plain.visible_controls`) — never cut (two long
    messages that differ only past the display bound stay two groups).
    Pure, so the most recent :data:`PATTERN_CACHE` keys are remembered across queries."""
    text, _ = redact_prefix(key.decode("utf-8", "surrogatepass"), KEY_CHARS)
    # A message's own "<*>" is not the mask: a line cannot pose as a pattern's wildcard form.
    text = text.replace("<*>", "<\u2217>")
    # A key's only digit is 0 (pattern_key), which the masker can search for faster; a caller's
    # own bytes with other digits are masked by the general form.
    masked = mask_key_text(text) if key.translate(_DIGITS) == key else mask_message(text)
    # Terminal and bidi controls are shown, never carried raw (``\x1b``, ``\u202e``): the
    # pattern reaches the model, Slack and an operator's terminal (``sre-diag patterns``).
    return visible_controls(" ".join(_collapse_runs(masked.split())))


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
    window = WindowPatterns()
    window.add(messages)
    window.finish()
    return window.patterns(messages)


EXAMPLE_CHARS = 300  # of the example line ``patterns --counts`` shows, redacted


class WindowPatterns:
    """:func:`window_patterns` over a stream: :meth:`add` every batch of one window's messages
    (the first pass), :meth:`finish`, then :meth:`patterns` of each batch again (a second
    pass) or :meth:`counted`. Memory follows the distinct keys, at most :data:`MAX_KEYS` of
    them (as a summary's): a message with a further new key gets its own pattern, unmerged,
    and is counted by pattern up to :data:`MAX_KEYS` patterns (``uncounted`` after that)."""

    def __init__(self) -> None:
        self.lines: Counter[bytes] = Counter()
        self.examples: dict[bytes, str] = {}
        self.beyond: Counter[str] = Counter()  # messages whose key was not tracked, by pattern
        self.beyond_examples: dict[str, str] = {}
        self.uncounted = 0
        self.grouped: dict[bytes, str] = {}

    def add(self, messages: Sequence[str]) -> None:
        """One batch of the first pass."""
        for key, message in zip(pattern_keys(messages), messages, strict=True):
            if key in self.lines or len(self.lines) < MAX_KEYS:
                self.lines[key] += 1
                if key not in self.examples:
                    self.examples[key] = _example(message)
                continue
            pattern = full_pattern(key)
            if pattern in self.beyond or len(self.beyond) < MAX_KEYS:
                self.beyond[pattern] += 1
                self.beyond_examples.setdefault(pattern, _example(message))
            else:
                self.uncounted += 1

    def finish(self) -> None:
        """Group the tracked keys' patterns (:func:`variant_targets` over all of them)."""
        alone = {key: full_pattern(key) for key in self.lines}
        counts: Counter[str] = Counter()
        for key, count in self.lines.items():
            counts[alone[key]] += count
        targets = variant_targets(counts)
        self.grouped = {key: targets.get(pattern, pattern) for key, pattern in alone.items()}

    def patterns(self, messages: Sequence[str]) -> list[str]:
        """The pattern of each message (after :meth:`finish`)."""
        grouped = self.grouped
        return [
            grouped[key] if key in grouped else full_pattern(key) for key in pattern_keys(messages)
        ]

    def counted(self) -> list[tuple[int, str, str]]:
        """``(count, pattern, example)`` of every pattern, most frequent first (ties in the
        order first seen); the example is the first message grouped under it, redacted."""
        totals: dict[str, list[int | str]] = {}
        for key, count in self.lines.items():  # in the order first seen
            row = totals.setdefault(self.grouped[key], [0, self.examples[key]])
            row[0] = int(row[0]) + count
        for pattern, count in self.beyond.items():
            row = totals.setdefault(pattern, [0, self.beyond_examples[pattern]])
            row[0] = int(row[0]) + count
        rows = [(int(count), pattern, str(example)) for pattern, (count, example) in totals.items()]
        return sorted(rows, key=lambda row: -row[0])


def _example(message: str) -> str:
    text, cut = redact_prefix(message, EXAMPLE_CHARS + HEADROOM)
    text = visible_controls(text)
    if cut or len(text) > EXAMPLE_CHARS:
        return text[:EXAMPLE_CHARS] + "…"
    return text


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
