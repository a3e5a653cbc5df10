"""The gates of :mod:`sre_diag.tools.redact` never weaken it: redacting with them is redacting with
every rule run (a gate only skips a rule whose literal words the text does not hold)."""

from __future__ import annotations

import random
import re
import string

import pytest

from sre_diag.tools import redact as redaction
from sre_diag.tools.redact import redact
from tests.tools.test_evidence_redact_linear import SECRETS, UNITS


def _ungated(text: str) -> str:
    for pattern, replacement, _ in redaction._RULES:
        text = pattern.sub(replacement, text)
    return text


# Pieces of every rule (their key words, separators and values), the letters a case-insensitive
# pattern matches outside ASCII, and the marks redaction writes.
PIECES = [
    "-----BEGIN ", "RSA ", "PRIVATE KEY-----", "-----END ", "\n", "eyJ", "eyJhbGciOiJIUzI1NiJ9",
    ".", "QZsigQZsigQZsig", "xoxb-", "xapp-", "1234567890", "ghp_", "gho_", "github_pat_",
    "AKIA", "ASIA", "IOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Authorization", "Proxy-", ": ", ":", "=", "=>", " ", "\t", "Bearer ", "Basic ", "Cookie",
    "Set-", "://", "a://", "user", "@", "host", "/", "password", "passwd", "passphrase", "pwd",
    "pass", "secret", "token", "api_key", "apikey", "api-key", "access_key", "secret-key",
    "private_key", "client_secret", "credentials", "credential", "signing_key", "key",
    "signature", "hmac", '"', "'", "\\", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", "===",
    "\u0130", "\u0131", "\u017f", "\u212a", "\u00e9", "_", "-", "0", ";", ",", "}", "]",
    "[REDACTED]", "***", "DB_", "X-",
]  # fmt: skip
# What a case-insensitive pattern also matches for an ASCII letter (and a case-sensitive one not).
_LOOKALIKES = {"i": "\u0130\u0131I", "s": "\u017fS", "k": "\u212aK"}


def _disguised(piece: str, rng: random.Random) -> str:
    out = []
    for char in piece:
        if rng.random() < 0.3:
            char = char.swapcase()
        if char.lower() in _LOOKALIKES and rng.random() < 0.15:
            char = rng.choice(_LOOKALIKES[char.lower()])
        out.append(char)
    return "".join(out)


def test_random_texts_redact_as_with_every_rule_run() -> None:
    rng = random.Random(11)
    for _ in range(6000):
        text = "".join(_disguised(rng.choice(PIECES), rng) for _ in range(rng.randint(1, 24)))
        assert redact(text) == _ungated(text), text


@pytest.mark.parametrize(("text", "_secrets"), SECRETS)
def test_known_secrets_redact_as_with_every_rule_run(text: str, _secrets: list[str]) -> None:
    for filler in ("", "log words ", "\u0130 \u017f "):
        assert redact(filler + text) == _ungated(filler + text)
        assert redact(text.upper()) == _ungated(text.upper())


def test_hostile_runs_redact_as_with_every_rule_run() -> None:
    for unit in UNITS:
        for tail in ("", "===", "@", "\n", '"'):
            text = unit * (400 // len(unit)) + tail
            assert redact(text) == _ungated(text), unit


def test_the_folded_letters_are_every_letter_a_case_insensitive_rule_matches() -> None:
    # The gates look for lower-case ASCII words in the folded text: every character outside
    # ASCII that a case-insensitive pattern takes for an ASCII letter must fold to that letter.
    letters = re.compile("(?i)[a-z]")
    for code in range(0x80, 0x110000):
        char = chr(code)
        if letters.fullmatch(char):
            folded = redaction._folded(char)
            assert folded in string.ascii_lowercase, hex(code)
            assert re.fullmatch("(?i)" + folded, char), hex(code)
