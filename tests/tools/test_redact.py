"""Redaction: realistic secrets are masked, investigation identifiers survive."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sre_diag.tools import redact as redaction
from sre_diag.tools.redact import EMAIL_MARK, MARK, redact

# Fake credentials assembled at runtime so secret scanners do not flag this file.
_GH = "ghp_" + "x7Yq2Lm9Pz4Kd8Wr1Tb6Nc3Vf5Hs0Ja2Qe4R"
_SLACK_BOT = "xoxb-" + "1234567890-9876543210-AbCdEfGhIjKlMnOpQrStUvWx"
_SLACK_APP = "xapp-" + "1-A0123456789-1234567890123-0a1b2c3d4e5f6a7b8c9d"
_AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiJzdmMtcGF5bWVudCIsImV4cCI6MTc5NjE2NjQwMH0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (
            "GET /v1/payments Authorization: Bearer 8f2c1d9e7a6b5c4d3e2f1a0b9c8d7e6f",
            "8f2c1d9e7a6b5c4d3e2f1a0b9c8d7e6f",
            "Authorization: Bearer [REDACTED]",
        ),
        ('{"authorization":"Basic dXNlcjpodW50ZXIy"}', "dXNlcjpodW50ZXIy", "Basic [REDACTED]"),
        ("retrying with token Bearer abcDEF123456.xyz_-", "abcDEF123456", "Bearer [REDACTED]"),
        (
            "connect mysql://payments_rw:S3cr3t!pw@db-primary.internal:3306/payments failed",
            "S3cr3t!pw",
            "mysql://payments_rw:***@db-primary.internal:3306/payments",
        ),
        ("REDIS_URL=redis://:hunter2@cache-01:6379/0", "hunter2", "redis://:***@cache-01:6379/0"),
        ("DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor", "DB_PASSWORD=[REDACTED]"),
        ("  password: correct-horse-battery", "correct-horse", "password: [REDACTED]"),
        ('{"user":"svc","passwd":"p@ss w0rd"}', "p@ss w0rd", '"passwd":"[REDACTED]"'),
        ("client_secret='s3cr3t-value'", "s3cr3t-value", "client_secret='[REDACTED]'"),
        ("api_key=sk_live_51Hx9aQ2", "sk_live_51Hx9aQ2", "api_key=[REDACTED]"),
        ("X-Api-Key: 0f9e8d7c6b5a", "0f9e8d7c6b5a", "Api-Key: [REDACTED]"),
        ("retry with token=tok_9a8b7c6d5e", "tok_9a8b7c6d5e", "token=[REDACTED]"),
        (f"aws key {_AWS_ID} secret {_AWS_SECRET}", _AWS_SECRET, "aws key [REDACTED]"),
        (f"aws_access_key_id = {_AWS_ID}", _AWS_ID, MARK),
        (f"session {_JWT} expired", _JWT[:40], "session [REDACTED] expired"),
        (f"SLACK_BOT_TOKEN {_SLACK_BOT}", _SLACK_BOT, "SLACK_BOT_TOKEN [REDACTED]"),
        (f"app token {_SLACK_APP}", _SLACK_APP, "app token [REDACTED]"),
        (f"git clone https://{_GH}@github.com/acme/pay", _GH, "https://[REDACTED]@github.com"),
        (
            "signing key 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "9f86d081884c7d659a2feaa0c55ad015",
            "signing key [REDACTED]",
        ),
        ("Cookie: session=abc123; csrftoken=zz9", "abc123", "Cookie: [REDACTED]"),
    ],
)
def test_secret_is_masked(text: str, secret: str, kept: str) -> None:
    out = redact(text)
    assert secret not in out
    assert kept in out


def test_pem_private_key_block_is_masked() -> None:
    text = (
        "deploy key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7yZ9\nq3Lk0Rt\n"
        "-----END RSA PRIVATE KEY-----\nthen restart"
    )
    out = redact(text)
    assert "MIIEowIBAAKCAQEA7yZ9" not in out
    assert out == "deploy key:\n[REDACTED PRIVATE KEY]\nthen restart"


def test_truncated_pem_block_is_masked_to_the_end() -> None:
    out = redact("key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert "MIIEvQ" not in out


@pytest.mark.parametrize(
    "text",
    [
        "payment-api returned 503 for order ord_10231 (trace_id=4bf92f3577b34da6a3ce929d0e0e4736)",
        "2026-11-28T10:05:03.123Z ERROR db pool exhausted: timed out after 3000ms waiting for "
        "connection (pool max_size=10, in_use=10, waiting=37)",
        "POST https://api.stripe.com/v1/payment_intents 200 in 182ms",
        "upstream http://payment-api.prod.svc.cluster.local:8080/v1/payments?retry=1 timed out",
        "mysql://db-primary.internal:3306/payments (no credentials configured)",
        "contact #oncall-payments or see https://wiki.example.com/runbooks/payment-api",
        "order 4111111111111112 (not a card: Luhn fails), epoch 1764324300123",
        'password authentication failed for user "bob"',
        "password is incorrect; reset the password for bob",
        "mysql -uroot -h db-primary payments",
        "skipped=12 sk=1 task-42 gl-account 7 SG.1",
        "max_tokens=512 temperature=0.2",
        "span_id=00f067aa0ba902b7 request_id=req_7YtR2kPq",
        "Reset the password in the vault UI, then rotate the token.",
        "deploy sha 3f786850e387550fdab836ed7e6dc881de23001b released at 10:02:00Z",
        "password: [REDACTED] and mysql://u:***@h/db",
    ],
)
def test_ordinary_text_survives(text: str) -> None:
    assert redact(text) == text


def test_redaction_is_idempotent() -> None:
    text = (
        f'Authorization: Bearer {_JWT} dsn=postgres://app:pw1@pg:5432/x password="a b" '
        f"{_AWS_ID} {_AWS_SECRET} token: {_SLACK_BOT}"
    )
    once = redact(text)
    assert redact(once) == once
    for secret in (_JWT, "pw1", "a b", _AWS_ID, _AWS_SECRET, _SLACK_BOT):
        assert secret not in once


@pytest.mark.parametrize(
    "text",
    [
        "DB_PASSWORD=Tr0ub4dor&3QZ",
        'password=QZab,cd;ef}gh]ij"kl',
        "?user=bob&password=QZp&w;d,x}y]z&next=1",
        "token: QZtok&en,with;all}the]delims",
        "secret=QZ'quoted'tail",
        "Authorization: Bearer QZbearer123&tail,more;x",
        "signing key QZ0123456789abcdef0123456789abcdef&tail",
        "mysql://app:QZp@ss:w&rd@db:3306/x",
    ],
)
def test_a_value_runs_to_the_end_of_the_secret(text: str) -> None:
    out = redact(text)
    assert "QZ" not in out
    tail = text.split("QZ", 1)[1]
    for piece in ("&3", "tail", "gh", "kl", "w;d", "rd@"):
        if piece in tail:
            assert piece not in out, out


def test_email_addresses_follow_the_policy() -> None:
    text = "contact oncall-payments@example.com (not root@10.0.0.1)"
    assert redact(text) == f"contact {EMAIL_MARK} (not root@10.0.0.1)"
    with _emails(kept=True):
        assert redact(text) == text
    assert redaction.emails_masked()


class _emails:
    def __init__(self, *, kept: bool) -> None:
        self.kept = kept

    def __enter__(self) -> None:
        redaction.configure(emails=not self.kept)

    def __exit__(self, *_: object) -> None:
        redaction.configure(emails=True)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("charge card 4111 1111 1111 1111 exp 12/27 cvv 123", "1111 1111"),
        ("pan=5555-5555-5555-4444", "5555-4444"),
        ("card_number: 378282246310005 cvc2: 0421", "378282246310005"),
        ("card 6011000990139424 security code 987", "6011000990139424"),
    ],
)
def test_card_numbers_and_their_codes_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert not any(code in out for code in (" 123", "0421", "987")), out


def test_card_verification_code_is_masked_beside_a_card() -> None:
    assert redact("cvv 123") == f"cvv {MARK}"
    assert redact("CVC2: 0421") == f"CVC2: {MARK}"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("mysql -uroot -pS3cret -h db", "mysql -uroot -p[REDACTED] -h db"),
        ("mysqldump -p'Tr0ub4dor&3' payments", "mysqldump -p[REDACTED] payments"),
        ("sshpass -p hunter2 ssh host", "sshpass -p [REDACTED] ssh host"),
        ("redis-cli -a s3cr3t ping", "redis-cli -a [REDACTED] ping"),
        ("login with password hunter2", "login with password [REDACTED]"),
        ("the password is letmein", "the password is [REDACTED]"),
        ("passphrase was: open", "passphrase was: [REDACTED]"),
        ("user bob pwd Secr3t!", "user bob pwd [REDACTED]"),
        ("set PGPASSWORD=x,y;z", "set PGPASSWORD=[REDACTED]"),
    ],
)
def test_command_lines_and_prose_forms(text: str, kept: str) -> None:
    assert redact(text) == kept


def _vendor_keys() -> Iterator[str]:
    # Assembled at runtime so secret scanners do not flag this file.
    yield "sk_" + "live_" + "51HxQZabcdefghij0123456789"
    yield "rk_" + "live_" + "51HxQZabcdefghij0123456789"
    yield "AI" + "zaSyQZ-abcdefghijklmnopqrstuvwxyz123"
    yield "gl" + "pat-QZabcdefghij1234567890"
    yield "np" + "m_QZabcdefghijklmnopqrstuvwxyz01234567"
    yield "S" + "G.QZabcdefghijklmnopqrst.QZabcdefghijklmnopqrstuvwxyz0123456789ABCDE"
    yield "sk-" + "proj-QZabcdefghijklmnopqrstuvwxyz0123"
    yield "hv" + "s.QZabcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("key", list(_vendor_keys()))
def test_vendor_key_shapes_are_masked(key: str) -> None:
    for text in (key, f"using {key} now", f'"key":"{key}"', f"stripe_key={key}"):
        assert "QZ" not in redact(text), text
