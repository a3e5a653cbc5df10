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

MARK = "[REDACTED]"
URL_PASSWORD_MARK = "***"

# A PEM private key block; an unterminated block (e.g. cut by a snippet bound) runs to the end.
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*\Z)",
    re.DOTALL,
)
# header.payload.signature, each base64url; real JWT headers always start with '{"' = eyJ.
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")
_SLACK = re.compile(r"\b(?:xox[abprse]|xapp)-[A-Za-z0-9-]{10,}")
_GITHUB = re.compile(r"\b(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
# A line that names an AWS key id; a 40-char base64 word on it is its secret access key.
_AWS_LINE = re.compile(r"^.*\b(?:AKIA|ASIA)[A-Z0-9]{16}\b.*$", re.MULTILINE)
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# The whole value of credential-bearing headers, keeping the auth scheme word if present.
_AUTH_HEADER = re.compile(
    r"(?P<key>\b(?:Proxy-)?Authorization[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<scheme>(?:Bearer|Basic|Token|Digest|Negotiate|AWS4-HMAC-SHA256)\s+)?+"
    r"(?!\[REDACTED\])(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_COOKIE_HEADER = re.compile(
    r"(?P<key>\b(?:Set-)?Cookie\s*:\s*)(?!\[REDACTED\])(?P<value>[^\r\n\"]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<key>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# scheme://user:password@host — keep scheme, user and host; host-only URLs do not match.
_URL_USERINFO = re.compile(
    r"(?P<key>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<value>[^@\s/?#]+)(?P<at>@)"
)
# key=value / key: value / "key": "value" where the key names a credential. ``\b`` after the
# key word keeps plurals such as ``max_tokens`` (a count, not a secret) out.
_KEY_VALUE = re.compile(
    r"(?P<key>\b(?:[A-Za-z0-9]+[_.-])*"
    r"(?:password|passwd|passphrase|pwd|pass|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key|client[_-]?secret|credentials?|signing[_-]?key)\b"
    r"[\"']?\s*(?:=>|[:=])\s*)"
    r"(?!\[REDACTED\]|\*\*\*(?![^\s\"',;&}\]]))"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"',;&}\]]+)",
    re.IGNORECASE,
)
# A long opaque value right after a key word with only separators between (``signing key
# 9f86d0...``). Requires 32+ chars so ordinary words after "key" survive.
_GENERIC = re.compile(
    r"(?P<key>\b(?:key|secret|token|signature|hmac)\b[\s:=\"'-]{1,4})"
    r"(?P<value>[A-Fa-f0-9]{32,}|[A-Za-z0-9+/_-]{32,}={0,2})(?![A-Za-z0-9+/_=-])",
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


def _url_password(match: re.Match[str]) -> str:
    return match.group("key") + URL_PASSWORD_MARK + match.group("at")


def _aws_line(match: re.Match[str]) -> str:
    return _AWS_SECRET.sub(MARK, match.group(0))


_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (_PEM, "[REDACTED PRIVATE KEY]"),
    (_JWT, MARK),
    (_SLACK, MARK),
    (_GITHUB, MARK),
    (_AWS_LINE, _aws_line),
    (_AWS_KEY_ID, MARK),
    (_AUTH_HEADER, _keep_key_and_scheme),
    (_COOKIE_HEADER, _keep_key),
    (_BEARER, _keep_key),
    (_URL_USERINFO, _url_password),
    (_KEY_VALUE, _keep_quotes),
    (_GENERIC, _keep_key),
)


def redact(text: str) -> str:
    """Return ``text`` with every recognised credential replaced by a visible mark."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text
