"""Pattern quality (issue 20 item 6): one event, one pattern, across the variable parts that
split events before — signed numbers, host names and ``host:port``, short ids of letters and
digits, dates and times in syslog, RFC 2822, Apache and US forms — and never two events in one
pattern (a merged pattern is worse than a split one). Also: grouping is on the full masked
form, the display cut comes after it.

The events are written in the shapes of common systems' logs (HDFS, OpenSSH, syslog, Apache,
Kubernetes, Java services); each generator draws its variable parts at random, so a split on
any value shows as a second pattern."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from sre_diag.tools.logs.masking import _GATES, _MASKS, _ZERO_NEEDLES, mask_key_text
from sre_diag.tools.logs.summary import (
    MERGE_VARIANTS,
    PATTERN_CHARS,
    Grid,
    Tally,
    mask_message,
    message_pattern,
    window_patterns,
)

Rng = random.Random
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
DAYS = "Mon Tue Wed Thu Fri Sat Sun".split()


def _host(rng: Rng) -> str:
    name = rng.choice(["node", "web", "db-replica", "k8s-worker", "ip"]) + f"-{rng.randint(1, 99)}"
    return name + rng.choice([".prod.example.com", ".us-east-1.compute.internal", ".svc", ".lan"])


def _id(rng: Rng) -> str:
    return "".join(
        rng.choice("abcdefghjkmnpqrstuvwxyz0123456789") for _ in range(rng.randint(4, 5))
    )


def _short_id(rng: Rng) -> str:
    letters, digits = "abcdefghjkmnpqrstuvwxyz", "0123456789"
    return rng.choice(letters) + rng.choice(digits) + rng.choice(letters) + rng.choice(digits)


def _syslog_ts(r: Rng) -> str:
    return f"{r.choice(MONTHS)} {r.randint(1, 28):>2} {r.randint(0, 23):02d}:{_n(r, 59):02d}:00"


def _n(r: Rng, top: int) -> int:
    return r.randint(0, top)


def _blk(r: Rng) -> str:
    return f"blk_{r.choice(['-', ''])}{r.randint(10**17, 10**19)}"


def _ip(r: Rng) -> str:
    return f"10.{_n(r, 255)}.{_n(r, 255)}.{r.randint(1, 254)}"


def _clock(r: Rng) -> str:
    return f"{_n(r, 23):02d}:{_n(r, 59):02d}"


EVENTS: dict[str, Callable[[Rng], str]] = {
    "hdfs-receive": lambda r: f"Receiving block {_blk(r)} src: /{_ip(r)}:{r.randint(1024, 65535)}",
    "hdfs-delete": lambda r: f"Deleting block {_blk(r)} file /data/current/subdir{_n(r, 63)}/blk",
    "offset": lambda r: (
        f"clock offset {r.choice(['-', '+', ''])}{_n(r, 900)}.{_n(r, 999)} s from peer {_n(r, 9)}"
    ),
    "host-down": lambda r: f"connection to {_host(r)}:{r.randint(1024, 65535)} refused",
    "host-ok": lambda r: f"heartbeat from {_host(r)} ok after {r.randint(1, 999)}ms",
    "hostport": lambda r: (
        f"dial tcp {r.choice(['db-primary', 'cache-main', 'queue-a'])}:{_n(r, 9999)}: i/o timeout"
    ),
    "session": lambda r: f"session {_short_id(r)} opened for user root by (uid=0)",
    "job": lambda r: f"job {_id(r)}{r.randint(10, 99)} finished in {r.randint(1, 99)}s",
    "syslog": lambda r: f"{_syslog_ts(r)} combo sshd[{_n(r, 30000)}]: Accepted publickey for admin",
    "rfc2822": lambda r: (
        f"{r.choice(DAYS)}, {r.randint(1, 28)} {r.choice(MONTHS)} 2026 {_clock(r)}:00 GMT renewed"
    ),
    "apache": lambda r: (
        f"[{r.randint(1, 28):02d}/{r.choice(MONTHS)}/2026:{_clock(r)}:00 +0000] GET /index.html"
    ),
    "ctime": lambda r: (
        f"{r.choice(DAYS)} {r.choice(MONTHS)} {r.randint(1, 28)} {_clock(r)}:12 2026 kernel: reset"
    ),
    "us-date": lambda r: (
        f"backup of {r.randint(1, 12):02d}/{r.randint(1, 28):02d}/2026 "
        f"{r.randint(1, 12)}:{_n(r, 59):02d} {r.choice(['AM', 'PM'])} complete"
    ),
    # Events that differ from each other only in a constant word: never merged.
    "login-ok": lambda r: f"user {r.randint(1, 999)} login succeeded from {_ip(r)}",
    "login-failed": lambda r: f"user {r.randint(1, 999)} login failed from {_ip(r)}",
    "npe": lambda r: f"NullPointerException at com.acme.Billing.charge(Billing.java:{_n(r, 900)})",
    "npe-other": lambda r: (
        f"NullPointerException at com.acme.Ledger.post(Ledger.java:{_n(r, 900)})"
    ),
    "stripe": lambda r: f"POST https://api.stripe.com/v1/charges 200 in {r.randint(1, 900)}ms",
    "adyen": lambda r: f"POST https://api.adyen.com/v1/charges 200 in {r.randint(1, 900)}ms",
    "may": lambda r: f"May retry {r.randint(1, 5)} times",
    "month-word": lambda r: f"March deploy train {r.randint(1, 5)} rolled out",
}


def _corpus(seed: int = 20, per_event: int = 40) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(name, make(rng)) for name, make in EVENTS.items() for _ in range(per_event)]


def test_each_event_is_one_pattern_and_no_pattern_holds_two_events() -> None:
    patterns: dict[str, set[str]] = defaultdict(set)
    events: dict[str, set[str]] = defaultdict(set)
    for event, line in _corpus():
        pattern = message_pattern(line)
        patterns[event].add(pattern)
        events[pattern].add(event)
    split = {event: sorted(found)[:3] for event, found in patterns.items() if len(found) > 1}
    mixed = {pattern: sorted(found) for pattern, found in events.items() if len(found) > 1}
    assert split == {}
    assert mixed == {}


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("offset=-12 delta +5 range 3-4", "offset=<*> delta <*> range <*>"),
        ("Receiving block blk_-1608999687919862906", "Receiving block blk_<*>"),
        ("node-3 ready", "node-<*> ready"),  # a dash inside a name is not a sign
        ("connect to node-7.prod.example.com:8443 failed", "connect to <*> failed"),
        ("at com.acme.Bar.run(Bar.java:123)", "at com.acme.Bar.run(Bar.java:<*>)"),
        ("GET https://api.stripe.com/v1/x", "GET https://api.stripe.com/v<*>/x"),
        (
            "dsn=mysql://app:***@db-primary.internal:3306/x",
            "dsn=mysql://app:***@db-primary.internal:<*>/x",
        ),
        ("ipv6 up, log4j loaded, id a1b2 x9y8", "ipv<*> up, log<*>j loaded, id <*>"),
        ("Jun  4 03:02:01 host1 CRON[12]: job", "<*> host<*> CRON[<*>]: job"),
        ("May be slow", "May be slow"),
        ("at 10:05 PM done", "at <*> done"),
    ],
)
def test_the_classes_that_split_events(line: str, pattern: str) -> None:
    assert message_pattern(line) == pattern


def test_two_long_messages_differing_past_the_display_cut_stay_two_groups() -> None:
    head = "request failed while calling the downstream inventory service " * 3
    start = datetime(2026, 11, 28, 10, tzinfo=UTC)
    tally = Tally(Grid.for_window(start, start + timedelta(hours=1)))
    for i in range(30):
        tally.add(start + timedelta(seconds=i), head + "because the cache was cold")
    for i in range(20):
        tally.add(start + timedelta(seconds=i), head + "because the disk was full")
    top = tally.summary(exact=True).top_messages
    assert [p.count for p in top] == [30, 20]  # cut first, they were one group of 50
    assert all(len(p.pattern) <= PATTERN_CHARS for p in top)


def _unguarded(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


PIECES = [
    "a", "Z", "0", "7", " ", ".", ":", "-", "+", "_", "/", "=", '"', "'", "<*>", "x", "0x", "AM",
    "p.m.", "Mon", "Jun", "May ", ".com", ".internal", "node-", "db.", "ab12", "T", "Z",
    # the gates' needles and what stands beside them (issue 20: faster gates, same results)
    "= ", ": ", "X", "0X", "ffff", "FFFF", "abcdef", "-0000-", "0000-", "00:00", ":00", "00.0",
    "1.2.3.4", "fe80::", "a4:5e:", " sec", " seconds", "ms", "%", " B", "B", "K", "KiB",
    " bytes", "PM", "a.m.", "_AB12", "_C6", "-B12", "_ABCDEFGHIJKL", "()", " ()", "(", ")",
    "Thu", "Thursday", "THU", "JAN", "January", "Sept", ",", ".hk", ".co.uk", "blk_", "~", "<",
    ">=", "\u0663", "\uff13", "\u00b5", "\u2217", "\n",
]  # fmt: skip


def test_the_needle_guards_never_change_a_result() -> None:
    """A rule skipped for want of its needle could not have matched: masking with the guards
    equals masking with every rule run, on random texts built from every rule's pieces."""
    rng = random.Random(7)
    for _ in range(6000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
        assert mask_message(text) == _unguarded(text), text
    for event, line in _corpus(per_event=3):
        assert mask_message(line) == _unguarded(line), event


def test_on_a_keys_text_the_zero_needles_find_what_the_general_ones_find() -> None:
    """A key's text is ASCII digits as 0 (:func:`pattern_key`): there, each needle that starts
    with the literal 0 finds a match exactly when its general form does, and masking a key's
    text (:func:`mask_key_text`) is masking it with the general gates."""
    rng = random.Random(8)
    zero = str.maketrans("123456789", "0" * 9)
    pieces = [piece for piece in PIECES if piece.isascii()]
    for _ in range(6000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))).translate(zero)
        for index, needle in _ZERO_NEEDLES.items():
            general = _GATES[index][1]
            assert general is not None
            assert (needle.search(text) is None) == (general.search(text) is None), text
        assert mask_key_text(text) == mask_message(text) == _unguarded(text), text


USERS = ["admin", "oracle", "test", "guest", "ubuntu", "postgres", "deploy", "git", "ftp", "pi"]


def _ssh(user: str, n: int) -> str:
    return f"Failed password for invalid user {user} from 10.0.{n}.7 port {4000 + n} ssh2"


def test_a_window_merges_a_word_that_takes_many_values_into_one_pattern() -> None:
    lines = [_ssh(user, n) for n, user in enumerate(USERS * 3)]
    assert len({message_pattern(line) for line in lines}) == len(USERS)  # alone: one per user
    assert set(window_patterns(lines)) == {
        "Failed password for invalid user <*> from <*> port <*> ssh<*>"
    }


def test_a_word_with_few_values_is_never_merged() -> None:
    outcomes = ["succeeded", "failed", "denied", "expired", "locked", "queued", "retried"]
    outcomes = outcomes[: MERGE_VARIANTS - 1]
    lines = [f"login {outcome} for user {n}" for n in range(5) for outcome in outcomes]
    assert len(set(window_patterns(lines))) == len(outcomes)


def test_the_corpus_grouped_as_one_window_neither_splits_nor_mixes() -> None:
    corpus = _corpus()
    ssh = [("ssh-failed", _ssh(user, n)) for n, user in enumerate(USERS * 4)]
    lines = corpus + ssh
    patterns: dict[str, set[str]] = defaultdict(set)
    events: dict[str, set[str]] = defaultdict(set)
    for (event, _), pattern in zip(lines, window_patterns([m for _, m in lines]), strict=True):
        patterns[event].add(pattern)
        events[pattern].add(event)
    assert {e: p for e, p in patterns.items() if len(p) > 1} == {}
    assert {p: e for p, e in events.items() if len(e) > 1} == {}


def test_the_summary_counts_merged_variants_as_one_pattern() -> None:
    start = datetime(2026, 11, 28, 10, tzinfo=UTC)
    tally = Tally(Grid.for_window(start, start + timedelta(hours=1)))
    for n, user in enumerate(USERS * 5):
        tally.add(start + timedelta(seconds=n), _ssh(user, n))
    for n in range(20):
        tally.add(start + timedelta(seconds=n), f"disk {n} full")
    top = tally.summary(exact=True).top_messages
    assert [(p.pattern, p.count) for p in top] == [
        ("Failed password for invalid user <*> from <*> port <*> ssh<*>", 50),
        ("disk <*> full", 20),
    ]
