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
from dataclasses import dataclass

__all__ = [
    "EMAIL_MARK",
    "HEADROOM",
    "MARK",
    "URL_PASSWORD_MARK",
    "configure",
    "emails_masked",
    "is_secret_name",
    "redact",
    "redact_prefix",
]

MARK = "[REDACTED]"
URL_PASSWORD_MARK = "***"
EMAIL_MARK = "[REDACTED EMAIL]"


@dataclass(frozen=True)
class _Policy:
    """What redaction masks beside credentials (one process-wide choice, :func:`configure`)."""

    emails: bool = True
    """E-mail addresses are personal data: masked unless the operator keeps them."""


_POLICY = _Policy()


def configure(*, emails: bool) -> None:
    """Set the process-wide policy (the composition root calls it from the settings once)."""
    global _POLICY
    _POLICY = _Policy(emails=emails)


def emails_masked() -> bool:
    """Whether e-mail addresses are masked (the policy a worker child process is given)."""
    return _POLICY.emails


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
    r"(?:(?P<token>(?:Bearer|Basic|Token)\s++)|(?P<params>(?:Digest|Negotiate|AWS4-HMAC-SHA256)"
    r"\s++))?+(?!\[REDACTED\])(?P<value>(?(token)[^\s\"']++|[^\r\n]++))",
    re.IGNORECASE,
)
_COOKIE_HEADER = re.compile(
    r"(?P<key>\b(?:Set-)?Cookie\s*+:\s*+)(?!\[REDACTED\])(?P<value>[^\r\n\"]++)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<key>\bBearer\s++)(?P<value>[A-Za-z0-9._~+/=-]{8,}+\S*+)", re.IGNORECASE)
# scheme://user:password@host — keep scheme, user and host; host-only URLs do not match. The
# match starts at ``://`` (one scheme character before it), not at every letter of a long run.
# The password runs to the LAST ``@`` of the authority (a password may hold ``@``, ``:``, ``&``):
# the authority is taken whole (possessive) and :func:`_url_password` splits it.
_URL_USERINFO = re.compile(r"(?<=[A-Za-z0-9+.-])(?P<key>://[^/\s:@]*+:)(?P<rest>[^\s/?#]++)")
# key=value / key: value / "key": "value" where the key names a credential. The key word must
# not follow a letter or digit (so ``DB_PASSWORD`` and ``X-Api-Key`` match at the key word),
# and ``\b`` after it keeps plurals such as ``max_tokens`` (a count, not a secret) out. A quoted
# value left open at the end of its line or of the text (cut there) is masked to that end.
_KEY_VALUE = re.compile(
    r"(?<![^\W_])(?P<key>"
    r"(?:[a-z0-9]*?(?:password|passwd|passphrase)|pwd|pass|secret|token|api[_-]?key|apikey"
    r"|access[_-]?key|secret[_-]?key|private[_-]?key(?:[_-]?id)?|client[_-]?secret"
    r"|credentials?|signing[_-]?key|account[_-]?key|shared[_-]?access[_-]?key|sig"
    r"|cvv2?|cvc2?|csc|card[_-]?(?:number|num|no)|security[_-]?code"
    r"|(?:stripe|sendgrid|twilio|mailgun|openai|slack|github|gitlab|npm|datadog|dd|azure|gcp"
    r"|google|webhook)[_-]?(?:api[_-]?)?(?:key|token|secret))\b"
    r"[\"']?\s*+(?:=>|[:=])\s*+)"
    r"(?!\[REDACTED\]|\*\*\*(?!\S))"
    r"(?P<value>\"(?:[^\"\\\n]++|\\[^\n])*+(?:\"|\\?(?=\n)|\\?\Z)"
    r"|'[^'\n]*+(?:'|(?=\n)|\Z)|\S++)",
    re.IGNORECASE,
)
# Self-identifying vendor key shapes (the vendors' documented prefixes): Stripe secret and
# restricted keys, Google API keys, GitLab tokens, npm, SendGrid, OpenAI/Anthropic, HashiCorp
# Vault, PyPI, Shopify, DigitalOcean, Twilio API keys, Slack webhooks. Every branch starts with a
# literal prefix and its run is possessive, so a failed start costs at most its prefix and the
# minimum length.
_VENDOR = re.compile(
    r"\b(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+"
    r"|whsec_[A-Za-z0-9]{20,}+"
    r"|AIza[0-9A-Za-z_-]{30,}+"
    r"|gl(?:pat|dt|rt|ptt|oas|cbt|ft|imt|soat|ffct|agent)-[0-9A-Za-z_-]{20,}+"
    r"|npm_[A-Za-z0-9]{30,}+"
    r"|SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+"
    r"|sk-(?:proj-|ant-[a-z0-9]{2,8}+-|svcacct-)?+[A-Za-z0-9_-]{20,}+"
    r"|hv[sbr]\.[A-Za-z0-9_-]{20,}+"
    r"|pypi-[A-Za-z0-9_-]{50,}+"
    r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"
    r"|do[opr]_v1_[a-f0-9]{64}"
    r"|SK[0-9a-fA-F]{32}\b"
    r")"
    r"|(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9/_-]++"
)
_VENDOR_WORDS = (
    "sk_", "rk_", "whsec_", "aiza", "gl", "npm_", "sg.", "sk-", "hv", "pypi-", "shp", "_v1_",
    "sk", "hooks.slack.com/",
)  # fmt: skip
# An e-mail address (personal data, masked unless configured otherwise: :func:`configure`).
# Starts only where a local-part run starts, and both runs are possessive; :func:`_email`
# keeps matches whose last domain label is not alphabetic (``user@10.0.0.1``, ``pkg@1.2``).
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]++@(?P<domain>[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++)"
)
# A payment card number: 13-19 digits, optionally grouped by single spaces or dashes, starting
# with a card network's first digit (2-6); :func:`_card` masks it only when its Luhn check holds.
# Starts only where a digit run starts; a start tries at most 19 digits.
_CARD = re.compile(r"(?<![0-9])[2-6](?:[ -]?+[0-9]){12,18}+(?![0-9])")
# A card verification code in prose or a form dump (``cvv 123``, ``CVC2: 0421``).
_CVV = re.compile(
    r"(?<![^\W_])(?P<key>(?:cvv2?|cvc2?|csc|security[ _-]?code)\b[\"']?\s*+[:=#]?\s*+[\"']?)"
    r"(?P<value>[0-9]{3,4})(?![0-9])",
    re.IGNORECASE,
)
# A command line that takes a password as a flag value (``mysql -pS3cret``, ``sshpass -p pw``,
# ``redis-cli -a pw``): the line is found once, then its ``-p``/``-a`` values are masked.
_PASSWORD_FLAG_LINE = re.compile(
    r"^[^\n]*\b(?:mysql\w*+|mariadb\w*+|sshpass|redis-cli|mysqldump|mongo\w*+)\b[^\n]*+",
    re.MULTILINE | re.IGNORECASE,
)
_PASSWORD_FLAG = re.compile(r"(?<!\S)(?P<key>-[pa]\s*+)(?!\[REDACTED\]|-)(?P<value>\S++)")
# Prose: "with password hunter2", "the password is Tr0ub4dor", "passphrase was: x y". The word
# after the key word is masked when it looks like a secret (:func:`_prose`), or whatever it is
# after "is"/"was"/"set to", unless it is one of the ordinary words that follow there.
_PROSE = re.compile(
    r"(?<![^\W_])(?P<key>(?:password|passwd|passphrase|passcode|pwd)\b"
    r"(?P<verb>\s++(?:is|was|set\s++to)\b:?+)?+\s++)(?!\[REDACTED\])(?P<value>\S++)",
    re.IGNORECASE,
)
# A long opaque value right after a key word with only separators between (``signing key
# 9f86d0...``). Requires 32+ chars so ordinary words after "key" survive. The value run is
# possessive and nothing after it is required, so a start costs at most 36 steps unless it
# matches (and then its run is consumed).
_GENERIC = re.compile(
    r"(?P<key>\b(?:key|secret|token|signature|hmac)\b[\s:=\"'-]{1,4})"
    r"(?P<value>[A-Za-z0-9+/_-]{32,}+\S*+)",
    re.IGNORECASE,
)


def _keep_key(match: re.Match[str]) -> str:
    return match.group("key") + MARK


def _keep_key_and_scheme(match: re.Match[str]) -> str:
    scheme = match.group("token") or match.group("params") or ""
    return match.group("key") + scheme + MARK


def _keep_quotes(match: re.Match[str]) -> str:
    value = match.group("value")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return match.group("key") + value[0] + MARK + value[0]
    return match.group("key") + MARK


def _jwt(match: re.Match[str]) -> str:
    return MARK if match.group("rest") is not None else match.group(0)


def _url_password(match: re.Match[str]) -> str:
    rest = match.group("rest")
    at = rest.rfind("@")
    if at <= 0:  # no userinfo (``://host:8080``), or an empty password (``://u:@h``)
        return match.group(0)
    return match.group("key") + URL_PASSWORD_MARK + rest[at:]


def _email(match: re.Match[str]) -> str:
    last_label = match.group("domain").rsplit(".", 1)[-1]
    if not _POLICY.emails or len(last_label) < 2 or not last_label.isalpha():
        return match.group(0)
    return EMAIL_MARK


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    found = match.group(0)
    digits = found.replace(" ", "").replace("-", "")
    return MARK if _luhn(digits) else found


def _password_flags(match: re.Match[str]) -> str:
    return _PASSWORD_FLAG.sub(_keep_key, match.group(0))


# Words that follow "password" in ordinary prose (never a password worth masking there).
_PROSE_WORDS = frozenset({
    "is", "was", "for", "of", "in", "on", "to", "the", "a", "an", "and", "or", "not", "no",
    "incorrect", "invalid", "wrong", "expired", "required", "missing", "empty", "changed",
    "reset", "correct", "accepted", "rejected", "authentication", "auth", "policy", "length",
    "set", "too", "must", "has", "had", "will", "should", "cannot", "can", "may", "hash",
    "field", "prompt", "mismatch", "change", "update", "updated", "rotation", "rotated", "from",
    "with", "without", "by", "at", "as", "via", "when", "if", "but", "that", "this", "be",
    "been", "being", "are", "were", "does", "did", "do", "login", "manager", "vault", "store",
})  # fmt: skip


def _looks_secret(word: str) -> bool:
    """A word with a digit, a symbol inside it, or an upper-case letter after its first."""
    core = word.rstrip(".,;:!?)\"'")
    if not core:
        return False
    if any(not char.isalpha() for char in core):
        return True
    return any(char.isupper() for char in core[1:])


def _prose(match: re.Match[str]) -> str:
    value = match.group("value")
    bare = value.rstrip(".,;:!?)\"'").lower()
    if bare in _PROSE_WORDS or not (match.group("verb") or _looks_secret(value)):
        return match.group(0)
    return match.group("key") + MARK


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
_KEY_WORDS = (
    "pass", "pwd", "secret", "token", "api", "access", "private", "credential", "signing", "key",
    "sig", "cv", "csc", "card", "security",
)  # fmt: skip


def _holds_any(text: str, words: tuple[str, ...]) -> bool:
    return any(map(text.__contains__, words))


_CVV_WORDS = ("cvv", "cvc", "csc", "security")
_FLAG_WORDS = ("mysql", "mariadb", "sshpass", "redis-cli", "mongo")
_RULES: tuple[tuple[re.Pattern[str], _Replacement, _Gate], ...] = (
    (_PEM, "[REDACTED PRIVATE KEY]", lambda t: "-----begin " in t and "private key-----" in t),
    (_JWT, _jwt, lambda t: "eyj" in t),
    (_SLACK, MARK, lambda t: "xox" in t or "xapp-" in t),
    (_GITHUB, MARK, lambda t: "_" in t and ("gh" in t or "github_pat_" in t)),
    (_VENDOR, MARK, lambda t: _holds_any(t, _VENDOR_WORDS)),
    (_AWS_LINE, _aws_line, lambda t: "akia" in t or "asia" in t),
    (_AWS_KEY_ID, MARK, lambda t: "akia" in t or "asia" in t),
    (_AUTH_HEADER, _keep_key_and_scheme, lambda t: "authorization" in t),
    (_COOKIE_HEADER, _keep_key, lambda t: "cookie" in t),
    (_BEARER, _keep_key, lambda t: "bearer" in t),
    (_URL_USERINFO, _url_password, lambda t: "://" in t and "@" in t),
    (_KEY_VALUE, _keep_quotes, lambda t: ("=" in t or ":" in t) and _holds_any(t, _KEY_WORDS)),
    (_PASSWORD_FLAG_LINE, _password_flags, lambda t: _holds_any(t, _FLAG_WORDS)),
    (_PROSE, _prose, lambda t: "pass" in t or "pwd" in t),
    (_GENERIC, _keep_key, lambda t: _holds_any(t, _GENERIC_WORDS)),
    (_CARD, _card, lambda t: _CARD.search(t) is not None),
    (_CVV, _keep_key, lambda t: _holds_any(t, _CVV_WORDS)),
    (_EMAIL, _email, lambda t: _POLICY.emails and "@" in t),
)
# Every gate above but the card rule's asks for one of these words: a text holding none of them
# and no card-shaped number (almost every log line) is returned after two searches instead of
# every gate's tests.
_ANY_GATE_WORD = re.compile(
    "|".join(
        re.escape(word)
        for word in (
            "-----begin ", "eyj", "xox", "xapp-", "gh", "github_pat_", "akia", "asia",
            "authorization", "cookie", "bearer", "://", "@", *_KEY_WORDS, *_GENERIC_WORDS,
            *_VENDOR_WORDS, *_FLAG_WORDS, *_CVV_WORDS,
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
    if _ANY_GATE_WORD.search(folded) is None and _CARD.search(folded) is None:
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
