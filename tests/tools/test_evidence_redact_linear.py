"""Redaction stays linear on hostile text, and bounding before redaction never leaks a secret.

Item 1 of issue 10: a key/value pattern was quadratic on ``a.a.a.…`` (a 16 KB log line held the
event loop ~7 s). Every pattern of :mod:`sre_diag.tools.redact` is timed here on runs of the
characters
its quantifiers can repeat, each 64 KB, with several tails (a run that ends in a character a
pattern then needs is the backtracking trigger). A quadratic pattern needs seconds on these; a
linear one a few milliseconds. The second half checks :func:`redact_prefix`: whatever the cut,
no fragment of a secret survives.
"""

from __future__ import annotations

import re
import string
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sre_diag.tools import redact as redaction
from sre_diag.tools.redact import HEADROOM, MARK, redact, redact_prefix

pytestmark = pytest.mark.solo  # per-byte timings: the serial phase (scripts/test)

SIZE = 64 * 1024
# Runs a quantifier can repeat over, and pieces a pattern starts at.
UNITS = [
    "a.", "a-", "a_", "a+", "a/", "1.", "eyJ-", "eyJ", "eyJaaaaa.", "eyJaaaaa.bbbbb.",
    "key-", "key=", "key ", "key:", "hmac-", "token:", "token-", "password=", "a.password=",
    'password="', 'password="\\"', "pass:'", "api_key=\"", "é_password=", "x-api-key ",
    "://a:", "a://", "a://b:c", "Bearer ", "Bearer", "Authorization: ", "authorization=\"",
    "Cookie:", "Cookie: ", "#", " ", "# ", " #", "\t", "-----BEGIN A ", "-----BEGIN ",
    "-----BEGIN PRIVATE KEY-----", "-----END A ", "-----END ", "AKIA", "AKIA1234567890ABCDEF ",
    "xoxb-", "xoxb", "ghp_", "github_pat_", "\\", '"', "'", "=", "@", ":", "a:", "a@", "/",
    "x" * 39 + " ", "AAAA", "\n", "\r\n",
    "sk_live_", "sk-", "sk-ant-", "AIza", "glpat-", "npm_", "SG.", "SG.aaaa.", "hvs.", "a@",
    "a.a@", "a@b.", "@a.", "4111 ", "4-", "4", "1 ", "mysql -p", "mysql ", "-p", "-p-",
    "password ", "password is ", "with password a", "cvv ", "cvv: 1", "hooks.slack.com/",
    "Authorization: Digest ", "x=", "&", ",", ";",
]  # fmt: skip
TAILS = ["", "===", "=x", "@", "\n", '"']
RULES = [
    (name, value)
    for name, value in vars(redaction).items()
    if name.startswith("_") and isinstance(value, re.Pattern)
]


def _run(unit: str, tail: str, size: int = SIZE) -> str:
    return (unit * (size // len(unit) + 1))[:size] + tail


def _seconds(pattern: re.Pattern[str], text: str) -> float:
    started = time.perf_counter()
    pattern.sub("X", text)
    return time.perf_counter() - started


def test_every_pattern_is_audited() -> None:
    # A new pattern must be added knowingly: this list is what the timing test covers.
    assert sorted(name for name, _ in RULES) == [
        "_ANY_GATE_WORD", "_AUTH_HEADER", "_AWS_KEY_ID", "_AWS_LINE", "_AWS_SECRET", "_BEARER",
        "_CARD", "_COOKIE_HEADER", "_CVV", "_EMAIL", "_GENERIC", "_GITHUB", "_JWT", "_KEY_VALUE",
        "_PASSWORD_FLAG", "_PASSWORD_FLAG_LINE", "_PEM", "_PROSE", "_SLACK", "_URL_USERINFO",
        "_VENDOR",
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "pattern"), RULES, ids=[name for name, _ in RULES])
def test_pattern_is_fast_on_hostile_runs(name: str, pattern: re.Pattern[str]) -> None:
    slowest = max(
        (
            (_seconds(pattern, _run(unit, tail, SIZE // 2)), unit, tail)
            for unit in UNITS
            for tail in TAILS
        ),
        key=lambda found: found[0],
    )
    if slowest[0] >= 0.1:  # one retry: a scheduler hiccup is not a blow-up
        slowest = (_seconds(pattern, _run(*slowest[1:], SIZE // 2)), *slowest[1:])
    # Linear: ~1-2 ms per 32 KB. The quadratic key/value pattern needed ~30 s here.
    assert slowest[0] < 0.1, (name, slowest)


@pytest.mark.parametrize(
    "unit", ["a.", "a-", "eyJ-", "key-", "://a:", "# ", "a@", "4 ", "mysql -p", "password "]
)
def test_redaction_time_grows_linearly(unit: str) -> None:
    small = min(_seconds_redact(_run(unit, "===", SIZE // 4)) for _ in range(3))
    large = min(_seconds_redact(_run(unit, "===", SIZE)) for _ in range(3))
    # 4x the input: ~4x the time when linear, ~16x when quadratic.
    assert large < max(small, 0.002) * 9, (small, large)


def _seconds_redact(text: str) -> float:
    started = time.perf_counter()
    redact(text)
    return time.perf_counter() - started


# --------------------------------------------------------------------------------------------
# Bound first, then redact: the cut never splits a secret out of recognition

_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJRWjlzZWNyZXQifQ.QZsigQZsigQZsigQZsigQZsigQZsigQZsig"
# (text, the parts that must never appear, even in part). Every secret carries "QZ" runs so a
# fragment of it is recognisable in the output.
SECRETS: list[tuple[str, list[str]]] = [
    (f"session {_JWT} expired", [_JWT[:24], _JWT[-30:]]),
    ("xoxb-" + "QZ12345678QZabcdefghQZ", ["QZ12345678QZabcdefghQZ"]),
    ("ghp_" + "QZ1234567890QZabcdefghQZ", ["QZ1234567890QZabcdefghQZ"]),
    ("key id AKIAQZQZQZQZ12345678 secret QZslashQZ/plusQZ+QZ0123456789abcdefghij", [
        "AKIAQZQZQZQZ12345678", "QZslashQZ/plusQZ+QZ0123456789abcdefghij"]),
    ("secret QZslashQZ/plusQZ+QZ0123456789abcdefghij for AKIAQZQZQZQZ12345678",
     ["QZslashQZ/plusQZ+QZ0123456789abcdefghij", "AKIAQZQZQZQZ12345678"]),
    ("Authorization: Bearer QZbearerQZ0123456789QZ", ["QZbearerQZ0123456789QZ"]),
    ("Cookie: sid=QZcookieQZ; other=QZcookie2QZ value", ["QZcookieQZ", "QZcookie2QZ"]),
    ("connect mysql://app:QZurlQZpw0123QZ@db:3306/x", ["QZurlQZpw0123QZ"]),
    ('password="QZ quoted QZ secret QZ" rest', ["QZ quoted QZ secret QZ"]),
    ("DB_PASSWORD=QZplainQZsecretQZ next", ["QZplainQZsecretQZ"]),
    ("signing key QZ0123456789abcdef0123456789abcdefQZ", ["QZ0123456789abcdef0123456789abcdefQZ"]),
    ("-----BEGIN RSA PRIVATE KEY-----\nQZpemQZline1QZ\nQZpemQZline2QZ\n"
     "-----END RSA PRIVATE KEY-----", ["QZpemQZline1QZ", "QZpemQZline2QZ"]),
    ("DB_PASSWORD=QZamp&QZcomma,QZsemi;QZ rest", ["QZamp&QZcomma,QZsemi;QZ"]),
    ("sk_" + "live_QZ0123456789abcdefQZ", ["QZ0123456789abcdefQZ"]),
    ("mysql -uroot -pQZmysqlQZpw -h db", ["QZmysqlQZpw"]),
    ("with password QZhunterQZ2", ["QZhunterQZ2"]),
]  # fmt: skip


def _fragments(secret: str, width: int = 6) -> set[str]:
    if len(secret) <= width:
        return {secret}
    return {secret[i : i + width] for i in range(len(secret) - width + 1)} - {" " * width}


@pytest.mark.parametrize(("text", "secrets"), SECRETS)
def test_no_cut_position_leaks_a_fragment(text: str, secrets: list[str]) -> None:
    for filler in ("", "log line words ", "x" * 37 + " "):
        full = filler + text + " trailing words " * 3
        for budget in range(1, len(full) + 1):
            shown, cut = redact_prefix(full, budget)
            assert cut == (budget < len(full))
            for secret in secrets:
                leaked = {f for f in _fragments(secret) if "QZ" in f and f in shown}
                assert not leaked, (budget, shown)


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.text(string.ascii_letters + string.digits + ".-_/:=@\"'", max_size=12)),
    which=st.integers(0, len(SECRETS) - 1),
    position=st.integers(0, 30),
    budget=st.integers(1, 400),
)
def test_secret_among_random_words_never_leaks(
    words: list[str], which: int, position: int, budget: int
) -> None:
    text, secrets = SECRETS[which]
    at = min(position, len(words))
    full = " ".join([*words[:at], text, *words[at:]])
    shown, _ = redact_prefix(full, budget)
    for secret in secrets:
        assert not {f for f in _fragments(secret) if "QZ" in f and f in shown}, shown


def test_uncut_text_is_redacted_as_a_whole() -> None:
    text = "retry with password=hunter2 then Bearer abcdefgh12345678"
    assert redact_prefix(text, len(text)) == (redact(text), False)
    assert MARK in redact_prefix(text, len(text))[0]


def test_cut_drops_only_the_split_token() -> None:
    shown, cut = redact_prefix("alpha beta gamma delta", 13)
    assert (shown, cut) == ("alpha beta ", True)
    assert redact_prefix("alpha beta gamma delta", 11) == ("alpha beta ", True)
    # One giant token: nothing of it can be shown safely.
    assert redact_prefix("a." * 5000, HEADROOM) == ("", True)
