"""The pattern masker stays linear on hostile message shapes (issue 20 item 3).

Every rule of :data:`sre_diag.tools.logs.masking._MASKS` is timed on 32 KB runs of the
characters its quantifiers repeat over, with several tails (a run ending where a rule then needs
something is the backtracking trigger). The number-with-unit rule started at every digit group of
``1.1.1.…`` and scanned the rest of the run from each: quadratic (~10 ms for 1.2 KB, the
size of one pattern key; seconds for 32 KB). A linear rule needs a few milliseconds here.
"""

from __future__ import annotations

import gc
import re
import time

import pytest

from sre_diag.tools.logs.masking import _GATES, _MASKS, _ZERO_NEEDLES
from sre_diag.tools.logs.summary import KEY_CHARS, full_pattern, mask_message, pattern_key

pytestmark = pytest.mark.solo  # per-byte timings: the serial phase (scripts/test)

SIZE = 32 * 1024
UNITS = [
    "1.", ".1", "1,", "1:", "1-", "-1", "1 ", "1a", "a1", "a1.", "1a.", "aa", "a", "A", "_A",
    "A_", "0x", "0xa", "ab12", "=\"", "= '", ":'", "=", ":", "\"", "'", "<*>.", "<*>:", "<*>",
    "1.2.3.", "1.2.3.4:", "2026-11-28T", "12:00:", "12:", "1ms ", "1.5", "1s", "1K", "1Ki",
    "deadbeef", "deadbee", "-", "ffff-", "aaaaaaaa-aaaa-", "\u00b5", "1\u00b5",
    "Jun ", "Jun", "Mon ", "Mon, ", "1 Jun ", "1-Jun-", "1/Jun/", "a-", "a.", "a.a-", "a-a.",
    "a.com.", "a-com.", "x.internal", "a-a:", "a.a.a:", "a:1", "1:1 ", "1:1 P", "1:11 a.m.",
    "+1", "-+", "blk_-", "a1b", "a1b2", "1a1a",
    "::", "a:", "1a:", "fe80::", "ab:cd:", "a1::", ":1", "[::1]:", "ffff", "FFFF", "fF",
    "1 K", "1 Ki", "1 KiB ", "1 B", "1.5 ", "1 by", "1 bytes", "a.b.", "a.b.c.hk", "a.b.c",
    "a.co.", "_A1", "-AB1", "a_A", "<*> (<*>)", "<*> (", " (<*>", "<*> (<*>) ",
    "<1 sec ", "<1", "<", "1 se", "1 secs", "1.5 m", "~1 h", ">=1 ", "1 1 ", "()", " ()", "( )",
    "<*>,", "<*>,<*> ", "January ", "Thurs, ", "1 JAN ", "Sept. 1",
    # the gates' needles (masking._GATES)
    "= \"", ": '", "'", "-0000-", "-ffff-", "-00-0", ":00:00.0 ", ":00.0", ":00 ", "a:a:a:",
    "0x", "xX", ".0.0.", ".1.", ".a", "a.a", "0 K", "0 s", "0m", "a0", "0a", "_A0", "-AB1",
    "_AAAAAAAAAAA", "_A", "0", "0 ", "a0", "0a", "a0a0", "0 m", "0m", "0 K",
]  # fmt: skip
TAILS = ["", "ms", "x", "1", '"', ".", ":", "-1"]


def _run(unit: str, tail: str, size: int = SIZE) -> str:
    return (unit * (size // len(unit) + 1))[:size] + tail


def _seconds(pattern: re.Pattern[str], replacement: str, text: str) -> float:
    started = time.perf_counter()
    pattern.sub(replacement, text)
    return time.perf_counter() - started


def test_every_rule_is_audited() -> None:
    assert len(_MASKS) == 23  # a new rule must be added knowingly: it is timed below
    assert len(_GATES) == len(_MASKS)  # and so is each gate's needle


NEEDLES = [needle for _, needle in _GATES if needle is not None] + list(_ZERO_NEEDLES.values())


@pytest.mark.parametrize("needle", NEEDLES, ids=[needle.pattern[:24] for needle in NEEDLES])
def test_gate_needle_is_fast_on_hostile_runs(needle: re.Pattern[str]) -> None:
    # A needle is searched once per text; ``sub`` tries it at every start, the worst case.
    slowest = max(
        ((_seconds(needle, "", _run(unit, tail)), unit, tail) for unit in UNITS for tail in TAILS),
        key=lambda found: found[0],
    )
    if slowest[0] >= 0.1:  # one retry: a scheduler hiccup is not a blow-up
        slowest = (_seconds(needle, "", _run(*slowest[1:])), *slowest[1:])
    assert slowest[0] < 0.1, (needle.pattern, slowest)


@pytest.mark.parametrize("index", range(len(_MASKS)))
def test_rule_is_fast_on_hostile_runs(index: int) -> None:
    pattern, replacement = _MASKS[index]
    slowest = max(
        (
            (_seconds(pattern, replacement, _run(unit, tail)), unit, tail)
            for unit in UNITS
            for tail in TAILS
        ),
        key=lambda found: found[0],
    )
    if slowest[0] >= 0.1:  # one retry: a scheduler hiccup is not a blow-up
        slowest = (_seconds(pattern, replacement, _run(*slowest[1:])), *slowest[1:])
    assert slowest[0] < 0.1, (pattern.pattern, slowest)


def _seconds_mask(text: str) -> float:
    gc.disable()  # a collection of what earlier tests left is not the masker's time
    try:
        started = time.perf_counter()
        mask_message(text)
        return time.perf_counter() - started
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "unit", ["1.", ".1", '="', "1:", "a1.", "<*>.", "1.2.3.4:", "a1:", "1 K", "ffff"]
)
def test_masking_time_grows_linearly_per_byte(unit: str) -> None:
    small = min(_seconds_mask(_run(unit, "ms", SIZE // 4)) for _ in range(5))
    large = min(_seconds_mask(_run(unit, "ms", SIZE)) for _ in range(5))
    # 4x the input: ~4x the time when linear, ~16x when quadratic.
    assert large < max(small, 0.002) * 9, (small, large)


def test_one_hostile_key_costs_about_what_a_plain_one_does() -> None:
    plain = pattern_key("db pool exhausted: timed out after 3000ms waiting " * 40)
    hostile = pattern_key(".1" * KEY_CHARS)
    assert len(hostile.decode()) > KEY_CHARS
    cost = [
        min(_timed(lambda k=key: full_pattern.__wrapped__(k)) for _ in range(5))
        for key in (plain, hostile)
    ]
    assert cost[1] < max(cost[0], 0.0005) * 10, cost


def _timed(action: object) -> float:
    assert callable(action)
    started = time.perf_counter()
    action()
    return time.perf_counter() - started
