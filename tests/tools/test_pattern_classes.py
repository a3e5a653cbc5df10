"""Pattern classes found on real multi-system logs (issue 20, Loghub scoring): each class is
written here with values invented for it, drawn at random, so any value that still splits an
event shows as a second pattern; and the merge step never joins two different events.

Classes: signed numbers, host names and ``host:port``, IPv6 and MAC addresses, short ids of
letters and digits, hex runs without a digit, byte sizes in any unit, dates and times in
weekday/month, syslog and US forms; the variant merge needs literal context (single-word
messages are different events, never one ``<*>``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from sre_diag.tools.logs.summary import MERGE_VARIANTS, message_pattern, window_patterns

Rng = random.Random
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
DAYS = "Mon Tue Wed Thu Fri Sat Sun".split()
HEX = "0123456789abcdef"


def _signed(r: Rng) -> str:
    return r.choice(["-", "+", ""]) + str(r.randint(0, 999)) + r.choice(["", ".5", ".25"])


def _fqdn(r: Rng) -> str:
    label = r.choice(["db", "cache", "edge", "mq"]) + f"-{r.randint(0, 40)}"
    return label + "." + r.choice(["prod", "stage", "eu-west-2"]) + ".example.com"


def _ipv6(r: Rng) -> str:
    prefix = r.choice(["fe80::", "2001:db8::", "::", ""])
    count = r.randint(6, 8) if not prefix else r.randint(1, 8 - prefix.count(":"))
    return prefix + ":".join(f"{r.randint(0, 0xFFFF):x}" for _ in range(count))


def _mac(r: Rng) -> str:
    return ":".join(f"{r.randint(0, 255):02x}" for _ in range(6))


def _alnum(r: Rng) -> str:
    return "".join(r.choice("abcdefghjkmnpqrstuvwxyz0123456789") for _ in range(6)) + "9"


def _word(r: Rng) -> str:
    return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(3, 8)))


def _size(r: Rng) -> str:
    return f"{r.randint(1, 999)}{r.choice(['', '.5'])}{r.choice([' ', ''])}" + r.choice(
        ["B", "KB", "MB", "GiB", "bytes"]
    )


def _hexword(r: Rng) -> str:
    return "".join(r.choice("abcdef") for _ in range(8))


def _ctime(r: Rng) -> str:
    day = f"{r.randint(1, 28):>2}"
    return f"{r.choice(DAYS)} {r.choice(MONTHS)} {day} {r.randint(0, 23):02d}:07:09 2027"


def _syslog(r: Rng) -> str:
    return (
        f"{r.choice(MONTHS)} {r.randint(1, 28):>2} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:31"
    )


def _us(r: Rng) -> str:
    return f"{r.randint(1, 12):02d}/{r.randint(1, 28):02d}/2027 {r.randint(1, 12):02d}:04:05 " + (
        r.choice(["AM", "PM"])
    )


CLASSES: dict[str, Callable[[Rng], str]] = {
    "signed": lambda r: f"drift {_signed(r)} ppm after {_signed(r)} steps",
    "fqdn": lambda r: f"lost lease on {_fqdn(r)}:{r.randint(1, 65535)} renewing",
    "fqdn-bare": lambda r: f"replica {_fqdn(r)} caught up",
    "cctld": lambda r: (
        f"resolved {r.choice(['a', 'mx1', 'edge-4'])}.{_word(r)}.{_word(r)}."
        + r.choice(["hk", "nl", "tw", "de"])
        + " late"
    ),
    "slot": lambda r: f"fan on Frame_{r.choice('ABCDEF')}{r.randint(0, 99)} degraded",
    "size-rendered": lambda r: f"sent {r.randint(1, 9999)} bytes ({r.randint(1, 99)}.5 KB) ok",
    "ipv6": lambda r: f"neighbour {_ipv6(r)} unreachable",
    "ipv6-port": lambda r: f"listen on [{_ipv6(r)}]:{r.randint(1, 65535)} ok",
    "mac": lambda r: f"station {_mac(r)} associated",
    "alnum": lambda r: f"lease {_alnum(r)} expired",
    "size": lambda r: f"flushed {_size(r)} of {_size(r)} to disk",
    "hexword": lambda r: f"checksum {_hexword(r)} verified",
    "ctime": lambda r: f"{_ctime(r)} boot sequence armed",
    "syslog": lambda r: f"{_syslog(r)} gw7 ntpd[{r.randint(1, 9999)}]: synced",
    "us": lambda r: f"report of {_us(r)} mailed",
}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_is_one_pattern_whatever_its_values(name: str) -> None:
    rng = random.Random(name)
    patterns = {message_pattern(CLASSES[name](rng)) for _ in range(200)}
    assert len(patterns) == 1, sorted(patterns)[:4]


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("value -12 then +3.5", "value <*> then <*>"),
        ("connect db-7.prod.example.com:5432 failed", "connect <*> failed"),
        ("bind [::1]:80 refused", "bind [<*>]:<*> refused"),
        ("token a1b2c3 issued", "token <*> issued"),
        ("Mon Dec  2 01:02:03 2026 started", "<*> started"),
        ("Dec  2 01:02:03 host sshd: up", "<*> host sshd: up"),
        ("12/02/2026 01:02:03 PM done", "<*> done"),
        ("bssid 0a:1b:2c:3d:4e:5f seen", "bssid <*> seen"),
        ("size 24 B, free 9.2 KB", "size <*>, free <*>"),
        ("mask=ffffffff ok", "mask=<*> ok"),
        ("relay via mx2.mail.example.co.uk:25 ok", "relay via <*> ok"),
        ("peer gw.lab-3.uni.pl answered", "peer <*> answered"),  # 3+ labels, country code
        ("loaded notes.md and setup.py", "loaded notes.md and setup.py"),  # one dot: a file
        ("slot Frame_C6 and rack-B12 hot", "slot Frame_<*> and rack-<*> hot"),
        ("wrote 1190 bytes (1.16 KB) out", "wrote <*> out"),
        ("UTF-8 and SHA-256 ok", "UTF-<*> and SHA-<*> ok"),
        ("CCFile::captureLog done", "CCFile::captureLog done"),
        # a dotted class name is no host, nor is any prefix of it
        (
            "cast to org.example.server.am.Record failed",
            "cast to org.example.server.am.Record failed",
        ),  # a C++ scope is no address
        ("face value", "face value"),  # short hex-letter words stay
    ],
)
def test_the_class_examples(line: str, pattern: str) -> None:
    assert message_pattern(line) == pattern


def test_classes_never_share_a_pattern() -> None:
    rng = random.Random(5)
    owners: dict[str, set[str]] = {}
    for name, make in CLASSES.items():
        for _ in range(50):
            owners.setdefault(message_pattern(make(rng)), set()).add(name)
    assert {p: n for p, n in owners.items() if len(n) > 1} == {}


WORDS = ["started", "stopped", "paused", "resumed", "failed", "warning", "ready", "idle", "busy"]


def test_single_word_messages_are_never_merged_into_one_wildcard() -> None:
    lines = [f"{word}" for word in WORDS] * 3 + [f"{w} {n}" for w in WORDS for n in range(3)]
    patterns = set(window_patterns(lines))
    assert "<*>" not in patterns
    assert len(patterns) == 2 * len(WORDS)


def test_a_token_with_one_word_of_context_is_not_merged() -> None:
    lines = [f"{word} <{n}>" for word in WORDS for n in range(2)]
    assert len(set(window_patterns(lines))) == len(WORDS)


def test_enough_variants_with_context_merge_and_fewer_do_not() -> None:
    hosts = [f"svc{chr(97 + i)}x" for i in range(MERGE_VARIANTS)]
    many = [f"upstream {h} answered in {n} ms" for h in hosts for n in range(2)]
    assert set(window_patterns(many)) == {"upstream <*> answered in <*> ms"}
    few = many[: 2 * (MERGE_VARIANTS - 1)]
    assert len(set(window_patterns(few))) == MERGE_VARIANTS - 1


@pytest.mark.parametrize("seed", range(5))
def test_two_events_differing_in_a_constant_word_stay_apart(seed: int) -> None:
    """Random event pairs: a shared frame, one constant word each, random variable parts; as
    one window with plenty of lines each, no pattern holds both events."""
    rng = random.Random(seed)
    frame = rng.sample(["queue", "shard", "backup", "socket", "cert", "quota"], 3)
    left, right = rng.sample(WORDS, 2)
    events = {
        left: lambda r: f"{frame[0]} {r.randint(1, 99)} {left} on {frame[1]} {_signed(r)}",
        right: lambda r: f"{frame[0]} {r.randint(1, 99)} {right} on {frame[1]} {_signed(r)}",
    }
    lines = [(name, make(rng)) for name, make in events.items() for _ in range(60)]
    rng.shuffle(lines)
    owners: dict[str, set[str]] = {}
    for (name, _), pattern in zip(lines, window_patterns([m for _, m in lines]), strict=True):
        owners.setdefault(pattern, set()).add(name)
    assert all(len(names) == 1 for names in owners.values()), owners
