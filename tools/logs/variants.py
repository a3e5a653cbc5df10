"""The second, Drain-like step of pattern mining: merging a window's pattern *variants*.

The masker (:mod:`sre_diag.tools.logs.summary`) turns what it recognises as variable into
``<*>``; what it cannot recognise (a user name, a table, a host without a known suffix) stays a
literal word and splits one event into several patterns. Two patterns are *variants* of each
other when they are equal but for ONE space-separated token; the pattern with ``<*>`` in that
token's place (its trailing ``,``, ``;`` or ``:`` kept: ``LOCAL(<*>),`` -> ``<*>,``) is their
*target*. A pattern is merged into a target when either

* the position is wide: at least :data:`MERGE_VARIANTS` distinct patterns share the target (the
  token takes many values in this window: a variable), or
* the target is itself a pattern of the window, as frequent at least as the variant, and the
  variant is the only literal word seen in that place (the masker already saw variable values
  there, the variant is one more value it did not recognise: ``csdnimg.cn:<*> open through
  proxy <*>`` beside ``<*> open through proxy <*>``; but ``payment failed for order`` and
  ``payment succeeded for order`` beside ``payment <*> for order`` all stay apart).

In a wide place, words that each hold more than 1/:data:`MERGE_VARIANTS` of its lines stay apart
when there are two or more of them (a few one-off words cannot merge two frequent events).
Fewer distinct words in one place, with no masked form beside them, stay apart (``succeeded`` /
``failed`` are more likely two events, and merging two events is worse than splitting one).
The rest of the pattern must keep :data:`MERGE_CONTEXT` literal tokens (a one-word message is
never merged into ``<*>``). A pattern that could join several targets joins the one with the
most lines behind it (ties: the most variants, then the smaller text).

Merging is decided on the full patterns (never on their display cut). Bounded: patterns over
:data:`MERGE_MAX_TOKENS` tokens or :data:`MERGE_MAX_CHARS` characters are left as they are (a
pattern costs at most a few tens of kilobytes of copying), and the table of positions holds at
most :data:`MERGE_MAX_ENTRIES` entries, each a small integer pair keyed by the target's
``hash`` (Python's per-process randomised string hash: a window's text cannot choose a
collision) — the target strings themselves are never kept. Patterns are visited most frequent
first, so a window with more positions than the table holds still merges its largest
patterns. ``stop`` is checked every :data:`STOP_EVERY` patterns (a spent budget raises
:class:`~sre_diag.tools.threads.OutOfTime`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping

from sre_diag.tools.threads import NEVER, Stop

__all__ = [
    "MERGE_CONTEXT",
    "MERGE_MAX_CHARS",
    "MERGE_MAX_ENTRIES",
    "MERGE_MAX_TOKENS",
    "MERGE_VARIANTS",
    "STOP_EVERY",
    "WILDCARD",
    "variant_targets",
]

WILDCARD = "<*>"
MERGE_VARIANTS = 6  # distinct patterns sharing a target that make its position wide
MERGE_CONTEXT = 2  # literal tokens (no <*>) the rest of a merged pattern must keep
MERGE_MAX_TOKENS = 64  # patterns with more tokens, or more characters, are left as they are
MERGE_MAX_CHARS = 512
MERGE_MAX_ENTRIES = 262_144  # positions tracked per window (two ints each)
STOP_EVERY = 32  # patterns between two looks at the stop flag
_TRAILING = ",;:"


def _targets(pattern: str) -> Iterator[str]:
    """Each target of ``pattern``: the pattern with one literal token as ``<*>``, for every
    token whose replacement leaves :data:`MERGE_CONTEXT` literal tokens around it."""
    if len(pattern) > MERGE_MAX_CHARS:
        return
    tokens = pattern.split(" ")
    if len(tokens) > MERGE_MAX_TOKENS:
        return
    literal = sum(1 for token in tokens if WILDCARD not in token)
    start = 0
    for token in tokens:
        end = start + len(token)
        core = token.rstrip(_TRAILING)  # a word's trailing punctuation is kept around <*>
        if core and core != WILDCARD and literal - (WILDCARD not in token) >= MERGE_CONTEXT:
            yield pattern[:start] + WILDCARD + pattern[start + len(core) :]
        start = end + 1


def variant_targets(patterns: Mapping[str, int], stop: Stop = NEVER) -> dict[str, str]:
    """The target each mergeable pattern of a window joins (see module docs); ``patterns``
    maps each distinct full pattern to its line count. Patterns left as they are have no
    entry."""
    ranked = sorted(patterns.items(), key=lambda kv: (-kv[1], kv[0]))
    hashes, ends = _target_hashes(ranked, stop)
    positions = _positions(ranked, hashes, ends, stop)
    known = {hash(pattern) for pattern in patterns}
    chosen: dict[str, str] = {}
    start = 0
    for done, ((pattern, count), end) in enumerate(zip(ranked, ends, strict=True)):
        if done % STOP_EVERY == 0:
            stop.check()
        target = _best_target(pattern, count, hashes[start:end], patterns, positions, known)
        if target is not None:
            chosen[pattern] = target
        start = end
    return {pattern: _final(chosen, target) for pattern, target in chosen.items()}


def _target_hashes(ranked: list[tuple[str, int]], stop: Stop) -> tuple[array[int], list[int]]:
    """``hash`` of every target of every pattern, once (the target strings are not kept), in
    one flat array: pattern ``i``'s are ``hashes[ends[i - 1]:ends[i]]``. At most
    :data:`MERGE_MAX_TOKENS` a pattern, 8 bytes each."""
    hashes = array("q")
    ends: list[int] = []
    for done, (pattern, _) in enumerate(ranked):
        if done % STOP_EVERY == 0:
            stop.check()
        hashes.extend(map(hash, _targets(pattern)))
        ends.append(len(hashes))
    return hashes, ends


def _positions(
    ranked: list[tuple[str, int]], hashes: array[int], ends: list[int], stop: Stop
) -> dict[int, list[int]]:
    """``hash(target)`` -> [distinct variants, their lines, dominant variants], most frequent
    patterns first, at most :data:`MERGE_MAX_ENTRIES` targets. A variant is *dominant* when it
    holds more than 1/:data:`MERGE_VARIANTS` of its position's lines."""
    positions: dict[int, list[int]] = {}
    for done, ((_, count), end) in enumerate(zip(ranked, ends, strict=True)):
        if done % STOP_EVERY == 0:
            stop.check()
        for target in hashes[ends[done - 1] if done else 0 : end]:
            entry = positions.get(target)
            if entry is not None:
                entry[0] += 1
                entry[1] += count
            elif len(positions) < MERGE_MAX_ENTRIES:
                positions[target] = [1, count, 0]
    for done, ((_, count), end) in enumerate(zip(ranked, ends, strict=True)):
        if done % STOP_EVERY == 0:
            stop.check()
        for target in hashes[ends[done - 1] if done else 0 : end]:
            entry = positions.get(target)
            if entry is not None and _dominant(count, entry[1]):
                entry[2] += 1
    return positions


def _dominant(count: int, lines: int) -> bool:
    return count * MERGE_VARIANTS > lines


def _best_target(
    pattern: str,
    count: int,
    hashes: array[int],
    patterns: Mapping[str, int],
    positions: dict[int, list[int]],
    known: set[int],
) -> str | None:
    """The target ``pattern`` joins: wide, or a pattern of the window at least as frequent;
    the one with the most lines behind it (then the most variants, then the smaller text).
    ``hashes`` are its targets' (:func:`_targets`, in order) and ``known`` the window's
    patterns': a target whose hash is not known is no pattern of the window (nothing behind
    it), so its text is built only when it is wide or may be such a pattern."""
    best: tuple[int, int, str] | None = None
    targets: list[str] | None = None
    for index, target_hash in enumerate(hashes):
        # not in a full table: the pattern alone there (it may still join its wildcard form)
        variants, lines, dominant = positions.get(target_hash, (1, count, 1))
        # Narrow: only a lone literal joins its wildcard form; two or more words there
        # (``failed``, ``succeeded`` beside ``payment <*> for order``) may be two events.
        if variants < MERGE_VARIANTS and (variants > 1 or (count > 0 and target_hash not in known)):
            continue
        # Wide, but two or more of its words hold most lines (``failed`` and ``succeeded``
        # 50 times each beside six one-off words): those words stay apart, the rest join.
        if variants >= MERGE_VARIANTS and dominant > 1 and _dominant(count, lines):
            continue
        if targets is None:
            targets = list(_targets(pattern))
        target = targets[index]
        behind = patterns.get(target, 0) if target_hash in known else 0
        if variants < MERGE_VARIANTS and behind < count:
            continue
        weight = (-(lines + behind), -variants, target)
        if best is None or weight < best:
            best = weight
    return None if best is None else best[2]


def _final(chosen: dict[str, str], target: str) -> str:
    # A target may itself be merged on (each step adds a wildcard, so the walk ends within
    # MERGE_MAX_TOKENS steps): every variant joins the group its target ends in.
    for _ in range(MERGE_MAX_TOKENS):
        further = chosen.get(target)
        if further is None:
            break
        target = further
    return target
