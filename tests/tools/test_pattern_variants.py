"""The masker's value classes added with the variant merge, and the merge itself
(:mod:`sre_diag.tools.logs.variants`): what merges, what never does, and its bounds."""

from __future__ import annotations

import random
import time

import pytest

from sre_diag.tools.logs import variants
from sre_diag.tools.logs.summary import message_pattern, window_patterns
from sre_diag.tools.logs.variants import MERGE_MAX_ENTRIES, MERGE_VARIANTS, variant_targets


@pytest.mark.parametrize(
    ("lines", "pattern"),
    [
        # signed numbers: the sign is part of the value, a dash inside a word is not
        (["offset=-12 ok", "offset=+7 ok", "offset=3 ok"], "offset=<*> ok"),
        (["node-3 down", "node-12 down"], "node-<*> down"),
        # host:port, with a dash, 3+ labels under a country code, or a known suffix
        (
            ["to db-primary:3306 lost", "to cache-7:6380 lost", "to 10.0.0.1:80 lost"],
            "to <*> lost",
        ),
        (["proxy.cse.cuhk.edu.hk:5070 open", "gw.lab.uni.pl:80 open"], "<*> open"),
        # month and weekday names, abbreviated, full or in capitals, as date parts
        (
            [
                "at Mon Jun 14 10:00:01 2023 up",
                "at Monday, January 5, 2026 up",
                "at THU DEC 3 10:00:01 2026 up",
                "at Sept. 3 2023 up",
                "at 14 June 2023 up",
            ],
            None,
        ),
        # durations with a spelled unit, comparator included, are one value like a clock
        (["lifetime <1 sec", "lifetime 00:01", "lifetime 12 seconds", "lifetime ~3 min"], None),
        # an empty value in brackets where a value stands is a value
        (
            ["connection from 1.2.3.4 () at x", "connection from 1.2.3.4 (host.example.com) at x"],
            "connection from <*> at x",
        ),
        # a comma-joined list of values, and a run of one masked token, are one value
        (["from 10.0.0.1,10.0.0.2 GET", "from 10.0.0.9 GET"], "from <*> GET"),
        (["delete blk_1 blk_2 blk_3 now", "delete blk_7 now"], "delete blk_<*> now"),
    ],
)
def test_one_class_is_one_pattern(lines: list[str], pattern: str | None) -> None:
    found = {message_pattern(line) for line in lines}
    assert len(found) == 1, found
    if pattern is not None:
        assert found == {pattern}


@pytest.mark.parametrize(
    "line",
    [
        "May I retry",
        "Marching band started",
        "Sun Microsystems driver loaded",
        "Mondays are slow",
        "call f() twice",
        "a->b moved",
        "done 3 times",
    ],
)
def test_words_like_a_class_are_kept(line: str) -> None:
    assert message_pattern(line).split() == [
        "<*>" if any(c.isdigit() for c in word) else word for word in line.split()
    ]


def test_literal_repeats_are_kept() -> None:
    assert message_pattern("very very slow 3") == "very very slow <*>"


def test_a_high_cardinality_position_merges() -> None:
    lines = [f"session opened for user u{chr(97 + i)}x by cron" for i in range(MERGE_VARIANTS)]
    assert set(window_patterns(lines * 2)) == {"session opened for user <*> by cron"}


def test_two_low_cardinality_words_never_merge() -> None:
    lines = ["backup job succeeded on shard"] * 40 + ["backup job failed on shard"] * 3
    assert set(window_patterns(lines)) == set(lines)


@pytest.mark.parametrize(
    ("first", "second", "masked"),
    [
        ("failed", "succeeded", "402"),
        ("declined", "captured", "E1042"),
        ("timeout", "ok", "10.0.0.7"),
    ],
)
def test_two_words_beside_their_wildcard_form_stay_two_events(
    first: str, second: str, masked: str
) -> None:
    # a masked value in the same place (a status code, an id, an address) must not pull two
    # different words into one group
    lines = [f"payment {w} for order" for w in (first, second, masked) for _ in range(3)]
    groups = set(window_patterns(lines))
    assert f"payment {first} for order" in groups and f"payment {second} for order" in groups


def test_a_message_cannot_pose_as_a_wildcard_form() -> None:
    lines = ["payment failed for order"] * 2 + ["payment <*> for order"] * 5
    groups = window_patterns(lines)
    assert groups.count("payment failed for order") == 2
    assert "payment <*> for order" not in groups  # its own <*> is not the mask
    assert "payment <\u2217> for order" in groups


@pytest.mark.parametrize("junk", [6, 9, 20])
def test_one_off_words_cannot_merge_two_frequent_events_in_a_wide_place(junk: int) -> None:
    words = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}x" for i in range(junk)]
    lines = ["payment failed for order"] * 50 + ["payment succeeded for order"] * 50
    lines += [f"payment {w} for order" for w in words]
    groups = window_patterns(lines)
    assert groups.count("payment failed for order") == 50
    assert groups.count("payment succeeded for order") == 50


def test_a_wide_place_of_spread_values_still_merges() -> None:
    users = ["root"] * 40 + ["cyrus", "news", "test", "zed", "qq", "ww"]
    lines = [f"session opened for user {u} by x" for u in users]
    assert set(window_patterns(lines)) == {"session opened for user <*> by x"}


def test_a_literal_joins_the_same_pattern_with_a_wildcard_there() -> None:
    lines = [f"10.0.0.{n}:80 open through proxy" for n in range(30)] + [
        "wpad:80 open through proxy"
    ]
    assert set(window_patterns(lines)) == {"<*> open through proxy"}


def test_a_literal_more_frequent_than_the_wildcard_form_stays_apart() -> None:
    lines = ["job 7 done on node"] + ["job nightly done on node"] * 5
    assert set(window_patterns(lines)) == {"job <*> done on node", "job nightly done on node"}


def test_a_merge_chain_ends_in_one_group() -> None:
    counts = {"a <*> b <*> c d": 50, "a x b <*> c d": 10, "a x b y c d": 2}
    targets = variant_targets(counts)
    assert targets == {"a x b <*> c d": "a <*> b <*> c d", "a x b y c d": "a <*> b <*> c d"}


def test_one_word_of_context_is_never_merged_into_a_wildcard() -> None:
    assert variant_targets({"<*> started": 100, "nginx started": 1}) == {}


def test_the_position_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "MERGE_MAX_ENTRIES", 50)
    rng = random.Random(5)
    counts = {" ".join(f"w{rng.randrange(10**9)}" for _ in range(8)): 1 for _ in range(500)}
    assert variant_targets(counts) == {}  # all distinct, and the table stopped at 50 entries
    assert MERGE_MAX_ENTRIES >= 100_000  # the real bound leaves real windows unaffected


def test_hostile_windows_stay_fast() -> None:
    """20 000 distinct patterns of 64 tokens (the cap) and of many characters: bounded work."""
    rng = random.Random(9)
    wide = {" ".join(f"t{rng.randrange(10**6)}" for _ in range(64)): 1 for _ in range(2_000)}
    long = {("x" * 600) + str(i): 1 for i in range(20_000)}
    same = {f"a b c {i} d e f g h": 1 for i in range(20_000)}
    for counts in (wide, long, same):
        started = time.perf_counter()
        variant_targets(counts)
        assert time.perf_counter() - started < 5.0


def test_a_long_digit_run_is_a_number_that_keeps_its_unit() -> None:
    assert message_pattern("got 11721005 bytes (11.1 MB) ok") == "got <*> ok"
    assert message_pattern("id deadbeef12 ok") == "id <*> ok"  # hex: letters and digits


def test_a_literal_keeps_its_trailing_punctuation_when_it_joins() -> None:
    lines = [f"synchronized to 10.0.0.{n}, stratum 2" for n in range(20)] + [
        "synchronized to LOCAL(0), stratum 10"
    ]
    assert set(window_patterns(lines)) == {"synchronized to <*>, stratum <*>"}


def test_a_full_table_still_lets_a_literal_join_its_wildcard_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(variants, "MERGE_MAX_ENTRIES", 0)
    counts = {"<*> open through proxy": 30, "wpad:<*> open through proxy": 1}
    assert variant_targets(counts) == {"wpad:<*> open through proxy": "<*> open through proxy"}
