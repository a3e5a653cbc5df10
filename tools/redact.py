"""Mask credentials in evidence text before it is projected into an observation.

Evidence (runbook sections, log lines, database cells) is copied from systems that sometimes
carry secrets: a DSN pasted into a runbook, a bearer token logged by a careless middleware. The
model, the audit trail and Slack must never see them (CONTRACTS §4), so every adapter runs its
text through :func:`redact` as the last step of projection.

The function is pure and uses precompiled regular expressions applied in a fixed order: whole
blocks first (PEM keys), then self-identifying token formats (JWT, Slack, GitHub, AWS), then
credentials recognised by their context (``Authorization:`` headers, ``user:pass@`` in URLs,
``password=`` style pairs, long opaque values right after a key word). Context rules keep the
key and mask only the value, so a reader still sees *that* a secret was there. It errs on the
side of masking, but deliberately leaves identifiers an investigation needs — order ids, trace
ids, timestamps, URLs without credentials — untouched. ``redact(redact(x)) == redact(x)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["HEADROOM", "MARK", "URL_PASSWORD_MARK", "is_secret_name", "redact", "redact_prefix"]

MARK = "[REDACTED]"
URL_PASSWORD_MARK = "***"
# Raw characters kept past a caller's visible limit before redaction (see :func:`redact_prefix`).
HEADROOM = 1024

# Every pattern below is linear in the length of its input: a quantified run is either possessive
# or followed by a character it cannot contain, and a pattern whose start could fall anywhere
# inside a long run (``a.a.a.…``, ``eyJ-eyJ-…``, ``key-key-…``) either starts only where such a
# run starts or consumes the whole run on its first attempt, so no run is rescanned from each of
# its characters. tests/tools/test_evidence_redact_linear.py times each on hostile inputs.

# A PEM private key block; an unterminated block (e.g. cut by a snippet bound) runs to the end.
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]++ )*PRIVATE KEY-----"
    r"(?:.*?-----END (?:[A-Z0-9]++ )*PRIVATE KEY-----|.*\Z)",
    re.DOTALL,
)
# header.payload.signature, each base64url; real JWT headers always start with '{"' = eyJ. The
# first segment is always consumed whole (the tail is optional), so a failed start never leaves
# its run to be rescanned from the next ``eyJ`` inside it; :func:`_jwt` keeps non-JWTs as they
# are. A JWT-shaped prefix at the very end (the text was cut there) is masked too.
_JWT = re.compile(
    r"\beyJ[A-Za-z0-9_-]{5,}+"
    r"(?P<rest>\.[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+|(?:\.[A-Za-z0-9_-]*+){0,2}+\Z)?+"
)
_SLACK = re.compile(r"\b(?:xox[abprse]|xapp)-[A-Za-z0-9-]{10,}+")
_GITHUB = re.compile(
    r"\b(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}+|github_pat_[A-Za-z0-9_]{20,}+)"
)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
# A line that names an AWS key id; a 40-char base64 word on it is its secret access key.
_AWS_LINE = re.compile(r"^[^\n]*\b(?:AKIA|ASIA)[A-Z0-9]{16}\b[^\n]*+", re.MULTILINE)
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# The whole value of credential-bearing headers, keeping the auth scheme word if present.
_AUTH_HEADER = re.compile(
    r"(?P<key>\b(?:Proxy-)?Authorization[\"']?\s*+[:=]\s*+[\"']?)"
    r"(?P<scheme>(?:Bearer|Basic|Token|Digest|Negotiate|AWS4-HMAC-SHA256)\s++)?+"
    r"(?!\[REDACTED\])(?P<value>[^\s\"',;]++)",
    re.IGNORECASE,
)
_COOKIE_HEADER = re.compile(
    r"(?P<key>\b(?:Set-)?Cookie\s*+:\s*+)(?!\[REDACTED\])(?P<value>[^\r\n\"]++)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<key>\bBearer\s++)(?P<value>[A-Za-z0-9._~+/=-]{8,}+)", re.IGNORECASE)
# scheme://user:password@host — keep scheme, user and host; host-only URLs do not match. The
# match starts at ``://`` (one scheme character before it), not at every letter of a long run.
_URL_USERINFO = re.compile(
    r"(?<=[A-Za-z0-9+.-])(?P<key>://[^/\s:@]*+:)(?P<value>[^@\s/?#]++)(?P<at>@)"
)
# key=value / key: value / "key": "value" where the key names a credential. The key word must
# not follow a letter or digit (so ``DB_PASSWORD`` and ``X-Api-Key`` match at the key word),
# and ``\b`` after it keeps plurals such as ``max_tokens`` (a count, not a secret) out. A quoted
# value left open at the end of its line or of the text (cut there) is masked to that end.
_KEY_VALUE = re.compile(
    r"(?<![^\W_])(?P<key>"
    r"(?:password|passwd|passphrase|pwd|pass|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key|client[_-]?secret|credentials?|signing[_-]?key)\b"
    r"[\"']?\s*+(?:=>|[:=])\s*+)"
    r"(?!\[REDACTED\]|\*\*\*(?![^\s\"',;&}\]]))"
    r"(?P<value>\"(?:[^\"\\\n]++|\\[^\n])*+(?:\"|\\?(?=\n)|\\?\Z)"
    r"|'[^'\n]*+(?:'|(?=\n)|\Z)|[^\s\"',;&}\]]++)",
    re.IGNORECASE,
)
# A long opaque value right after a key word with only separators between (``signing key
# 9f86d0...``). Requires 32+ chars so ordinary words after "key" survive. The value run is
# possessive and nothing after it is required, so a start costs at most 36 steps unless it
# matches (and then its run is consumed).
_GENERIC = re.compile(
    r"(?P<key>\b(?:key|secret|token|signature|hmac)\b[\s:=\"'-]{1,4})"
    r"(?P<value>[A-Za-z0-9+/_-]{32,}+=*+)",
    re.IGNORECASE,
)


def _keep_key(match: re.Match[str]) -> str:
    return match.group("key") + MARK


def _keep_key_and_scheme(match: re.Match[str]) -> str:
    return match.group("key") + (match.group("scheme") or "") + MARK


def _keep_quotes(match: re.Match[str]) -> str:
    value = match.group("value")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return match.group("key") + value[0] + MARK + value[0]
    return match.group("key") + MARK


def _jwt(match: re.Match[str]) -> str:
    return MARK if match.group("rest") is not None else match.group(0)


def _url_password(match: re.Match[str]) -> str:
    return match.group("key") + URL_PASSWORD_MARK + match.group("at")


def _aws_line(match: re.Match[str]) -> str:
    return _AWS_SECRET.sub(MARK, match.group(0))


_Replacement = str | Callable[[re.Match[str]], str]
# Each rule with its gate, a test on the text folded to lower case (:func:`_folded`): a rule
# runs only when its gate holds, i.e. when the text holds the literal words that every match of
# the rule contains (lower-cased: the case-insensitive rules' words, and the case-sensitive
# ones' too, since a folded text holds the lower case of every ASCII letter of the text). A
# gate only skips passes that would find nothing, so redaction is exactly what running every
# rule gives (tests/tools/test_redact_gates.py), at a few substring tests for most texts.
_Gate = Callable[[str], bool]
_GENERIC_WORDS = ("key", "secret", "token", "signature", "hmac")
_KEY_WORDS = ("pass", "pwd", "secret", "token", "api", "access", "private", "credential", "signing")


def _holds_any(text: str, words: tuple[str, ...]) -> bool:
    return any(map(text.__contains__, words))


_RULES: tuple[tuple[re.Pattern[str], _Replacement, _Gate], ...] = (
    (_PEM, "[REDACTED PRIVATE KEY]", lambda t: "-----begin " in t and "private key-----" in t),
    (_JWT, _jwt, lambda t: "eyj" in t),
    (_SLACK, MARK, lambda t: "xox" in t or "xapp-" in t),
    (_GITHUB, MARK, lambda t: "_" in t and ("gh" in t or "github_pat_" in t)),
    (_AWS_LINE, _aws_line, lambda t: "akia" in t or "asia" in t),
    (_AWS_KEY_ID, MARK, lambda t: "akia" in t or "asia" in t),
    (_AUTH_HEADER, _keep_key_and_scheme, lambda t: "authorization" in t),
    (_COOKIE_HEADER, _keep_key, lambda t: "cookie" in t),
    (_BEARER, _keep_key, lambda t: "bearer" in t),
    (_URL_USERINFO, _url_password, lambda t: "://" in t and "@" in t),
    (_KEY_VALUE, _keep_quotes, lambda t: ("=" in t or ":" in t) and _holds_any(t, _KEY_WORDS)),
    (_GENERIC, _keep_key, lambda t: _holds_any(t, _GENERIC_WORDS)),
)
# Every gate above asks for one of these words: a text holding none of them (almost every log
# line) is returned after one search instead of every gate's substring tests.
_ANY_GATE_WORD = re.compile(
    "|".join(
        re.escape(word)
        for word in (
            "-----begin ", "eyj", "xox", "xapp-", "gh", "github_pat_", "akia", "asia",
            "authorization", "cookie", "bearer", "://", *_KEY_WORDS, *_GENERIC_WORDS,
        )
    )
)  # fmt: skip
# The only characters outside ASCII that a case-insensitive pattern matches to an ASCII letter
# (found by trying every code point; the gate test checks it again): they fold as that letter.
_FOLD_TO_ASCII = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"))  # K (U+212A) lowers to k


def _folded(text: str) -> str:
    """``text`` in lower case, with the three letters above as the ASCII letter they match."""
    if not text.isascii():
        for letter, ascii_letter in _FOLD_TO_ASCII:
            text = text.replace(letter, ascii_letter)
    return text.lower()


def redact(text: str) -> str:
    """Return ``text`` with every recognised credential replaced by a visible mark.

    Linear in ``len(text)``, but still CPU work that holds the GIL for the whole call: callers
    with evidence of unbounded length use :func:`redact_prefix`.
    """
    folded = _folded(text)
    if _ANY_GATE_WORD.search(folded) is None:
        return text
    for pattern, replacement, gate in _RULES:
        if gate(folded):
            redacted = pattern.sub(replacement, text)
            if redacted != text:
                text, folded = redacted, _folded(redacted)
    return text


def _cut_at_token_boundary(text: str, budget: int) -> str:
    """``text[:budget]`` without the token (non-whitespace run) the cut would split."""
    if text[budget].isspace():
        return text[:budget]
    end = budget
    while end and not text[end - 1].isspace():
        end -= 1
    return text[:end]


def redact_prefix(text: str, budget: int) -> tuple[str, bool]:
    """Redact at most the first ``budget`` characters of ``text``; ``True`` if it was cut.

    The bound comes before any pattern runs, so the cost of one call is bounded whatever the
    evidence holds. Give ``budget`` headroom over what will be shown (``limit + HEADROOM``) and
    cut the result to ``limit`` afterwards: that final cut then falls on already redacted text.
    The pre-cut never splits a secret out of recognition:

    * it falls between tokens — a token (a run without whitespace) it would split is dropped
      whole, so a token-shaped secret (JWT, URL password, key=value, AWS key…) is either
      entirely there or entirely gone;
    * secrets that span whitespace are recognised from their start: a PEM block or a quoted
      ``password="…`` left open by the cut is masked to the end, a ``Cookie:`` value to the end
      of its line;
    * the one rule that needs context after the secret (a 40-character AWS secret is masked on
      a line that names an AWS key id) applies to the last, cut line as if it named one.
    """
    if len(text) <= budget:
        return redact(text), False
    head = _cut_at_token_boundary(text, budget)
    line_start = head.rfind("\n") + 1
    last_line = _AWS_SECRET.sub(MARK, head[line_start:])
    return redact(head[:line_start] + last_line), True


# --- secret-looking names (columns, labels, keys): the one place that decides ------------------
# Long markers match anywhere in the name; short ones only as a whole part (``user_pin``,
# ``otpCode``, ``api-key``) so that ``shipping``, ``monkey`` or ``author`` are not secrets.
_SECRET_MARKERS = (
    "password", "passwd", "passphrase", "pwd", "token", "secret", "apikey", "credential",
    "private", "salt", "hash", "signature", "cookie", "bearer", "pincode", "passcode",
    "cardnumber", "mnemonic", "privkey", "sessionid", "authorization", "accesskey",
)  # fmt: skip
_SECRET_PARTS = frozenset({
    "key", "keys", "pin", "pins", "otp", "totp", "hotp", "mfa", "cvv", "cvc", "cvv2", "jwt",
    "dsn", "pan", "ssn", "auth", "sig", "pass", "seed", "iban", "nonce", "hmac",
})  # fmt: skip


def _name_parts(name: str) -> list[str]:
    """``userPin_2fa-code`` → ``["user", "pin", "2fa", "code"]``: lower-case ASCII letter/digit
    runs, split at every other character and before an upper-case letter that follows a
    lower-case letter or a digit (no regular expression: names are not evidence text)."""
    parts: list[str] = []
    current: list[str] = []
    previous = ""
    for char in name:
        if not (char.isascii() and char.isalnum()):
            parts.append("".join(current))
            current, previous = [], ""
            continue
        if char.isupper() and (previous.islower() or previous.isdigit()):
            parts.append("".join(current))
            current = []
        current.append(char.lower())
        previous = char
    parts.append("".join(current))
    return [part for part in parts if part]


def is_secret_name(name: str) -> bool:
    """True when a column or field name looks like it holds a credential (mask its values).

    ``secret_token``, ``userPassword``, ``db_dsn``, ``otp_code``, ``card_cvv`` and ``jwt`` are
    secrets; ``monkey``, ``keyboard_layout``, ``shipping`` and ``author`` are not.
    """
    parts = _name_parts(name)
    folded = "".join(parts)
    if any(marker in folded for marker in _SECRET_MARKERS):
        return True
    return any(part in _SECRET_PARTS for part in parts)
