"""A corpus of secret shapes, each planted in log lines, SQL cells and alert-like text: nothing of
a secret is left in clear in what the model, the audit and Slack are given (a ``query_logs``
observation's items and summary, a ``query_mysql`` cell) nor in ``patterns`` output.

The shapes follow the vendors' documented formats (prefix, alphabet, length) with values drawn
from a seeded generator, so every run plants the same corpus and a new rule that stops early (a
tail left after ``&``, ``,``, ``;``, ``}``, ``]`` or a quote) shows as a fragment in clear.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.mysql.rows import RowProjection
from sre_diag.tools.redact import redact
from sre_diag.tools.schemas import LogsInput

REPO = Path(__file__).resolve().parents[2]
_RNG = random.Random(20261128)
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_B64URL = _ALNUM + "-_"
FRAGMENT = 8  # a run of this many characters of a secret is a leak


@dataclass(frozen=True)
class Shape:
    """One planted secret: the text around it and the secret itself."""

    name: str
    text: str
    secret: str


def _pick(alphabet: str, size: int) -> str:
    # Always holds a digit and a letter, so a secret cannot read as a plain word.
    if alphabet == _HEX:
        return _RNG.choice("0123456789") + "".join(_RNG.choice(_HEX) for _ in range(size - 2)) + "f"
    body = "".join(_RNG.choice(alphabet) for _ in range(size - 2))
    return _RNG.choice(string.digits) + body + _RNG.choice(string.ascii_letters)


def _luhn_complete(prefix: str, size: int) -> str:
    digits = prefix + "".join(_RNG.choice(string.digits) for _ in range(size - len(prefix) - 1))
    for check in string.digits:
        candidate = digits + check
        total = 0
        for index, char in enumerate(reversed(candidate)):
            value = int(char) * (2 if index % 2 else 1)
            total += value - 9 if value > 9 else value
        if total % 10 == 0:
            return candidate
    raise AssertionError("unreachable")


def _tokens() -> Iterator[tuple[str, str]]:
    """(name, token) of self-identifying vendor key shapes."""
    yield "stripe-secret", "sk_" + "live_" + _pick(_ALNUM, 99)
    yield "stripe-test", "sk_" + "test_" + _pick(_ALNUM, 24)
    yield "stripe-restricted", "rk_" + "live_" + _pick(_ALNUM, 24)
    yield "stripe-webhook", "whsec_" + _pick(_ALNUM, 32)
    yield "google-api", "AI" + "za" + _pick(_B64URL, 35)
    for prefix in ("glpat-", "gldt-", "glrt-", "glptt-", "gloas-"):
        yield "gitlab-" + prefix, prefix + _pick(_B64URL, 20)
    yield "npm", "np" + "m_" + _pick(_ALNUM, 36)
    yield "sendgrid", "S" + "G." + _pick(_B64URL, 22) + "." + _pick(_B64URL, 43)
    for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
        yield "github-" + prefix, prefix + _pick(_ALNUM, 36)
    yield "github-fine-grained", "github_" + "pat_" + _pick(_ALNUM + "_", 82)
    for prefix in ("xoxb-", "xoxp-", "xoxa-", "xoxe-", "xapp-"):
        yield "slack-" + prefix, prefix + _pick(string.digits, 12) + "-" + _pick(_ALNUM, 24)
    yield "aws-key-id", "AK" + "IA" + _pick(string.ascii_uppercase + string.digits, 16).upper()
    yield "aws-sts-id", "AS" + "IA" + _pick(string.ascii_uppercase + string.digits, 16).upper()
    yield "openai", "sk-" + _pick(_ALNUM, 48)
    yield "openai-project", "sk-" + "proj-" + _pick(_B64URL, 56)
    yield "anthropic", "sk-" + "ant-api03-" + _pick(_B64URL, 80)
    yield "vault", "hv" + "s." + _pick(_B64URL, 24)
    yield "pypi", "py" + "pi-" + _pick(_B64URL, 60)
    yield "shopify", "shp" + "at_" + _pick(_HEX, 32)
    yield "digitalocean", "do" + "p_v1_" + _pick(_HEX, 64)
    yield "twilio", "S" + "K" + _pick(_HEX, 32)
    header = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9"
    yield "jwt", header + "." + "eyJ" + _pick(_B64URL, 40) + "." + _pick(_B64URL, 43)


_DELIMITED = ("&", ",", ";", "}", "]", "/", "@", ":", "!", "#", "%", "+", "=")


def _password() -> str:
    """A password holding the delimiters a value rule could stop at."""
    parts = [_pick(_ALNUM, 5) for _ in range(3)]
    return parts[0] + _RNG.choice(_DELIMITED) + parts[1] + _RNG.choice(_DELIMITED) + parts[2]


_KEYS = (
    "password", "passwd", "DB_PASSWORD", "PGPASSWORD", "MYSQL_PWD", "secret", "client_secret",
    "AZURE_CLIENT_SECRET", "api_key", "apikey", "X-Api-Key", "access_key",
    "aws_secret_access_key", "private_key", "token", "auth_token", "refresh_token",
    "access_token", "credentials", "signing_key", "AccountKey", "SharedAccessKey", "sig",
    "stripe_key", "sendgrid_api_key", "slack_token", "github_token", "npm_token",
    "datadog_api_key", "webhook_secret", "cvv", "card_number",
)  # fmt: skip


def _keyed() -> Iterator[Shape]:
    forms = ("{k}={v}", "{k}: {v}", "{k} = {v}", "{k}=>{v}", "?user=bob&{k}={v}&next=1")
    for key in _KEYS:
        for form in _RNG.sample(forms, 2):
            value = _password()
            yield Shape(f"kv-{key}", form.format(k=key, v=value), value)
        value = _password().replace('"', "")
        yield Shape(f"json-{key}", json.dumps({key: value, "user": "svc"}), value)


def _urls() -> Iterator[Shape]:
    for scheme in ("mysql", "postgres", "redis", "amqp", "mongodb+srv", "https"):
        password = _pick(_ALNUM, 6) + "@" + _pick(_ALNUM, 4) + "&" + _pick(_ALNUM, 4)
        text = f"connect {scheme}://app_user:{password}@db-{_RNG.randint(1, 9)}.internal/x"
        yield Shape(f"url-{scheme}", text, password)


def _commands_and_prose() -> Iterator[Shape]:
    for command in ("mysql", "mysqldump", "mariadb", "mysqladmin"):
        secret = _pick(_ALNUM, 10)
        yield Shape(f"cmd-{command}", f"{command} -uroot -p{secret} -h db payments", secret)
    secret = _pick(_ALNUM, 10)
    yield Shape("cmd-sshpass", f"sshpass -p {secret} ssh deploy@host", secret)
    secret = _pick(_ALNUM, 10)
    yield Shape("cmd-redis-cli", f"redis-cli -h cache -a {secret} ping", secret)
    forms = (
        "login with password {v} failed", "the password is {v}", "passphrase was: {v}",
        "retry using pwd {v} now", "Password set to {v} by admin", "with passwd {v}",
    )  # fmt: skip
    for form in forms:
        secret = _pick(_ALNUM, 9)
        yield Shape("prose", form.format(v=secret), secret)
    for header in ("Authorization: Bearer {v}", "Authorization: Basic {v}", "Bearer {v}",
                   "Proxy-Authorization: Token {v}", "Cookie: session={v}; theme=dark",
                   "Set-Cookie: sid={v}; Path=/; HttpOnly"):  # fmt: skip
        secret = _pick(_B64URL, 12) + "&" + _pick(_ALNUM, 8)
        yield Shape("header", header.format(v=secret), secret)
    secret = _pick(_ALNUM, 20)
    yield Shape(
        "slack-webhook", f"POST https://hooks.slack.com/services/T0{secret}/B0X/abc", secret
    )


def _cards() -> Iterator[Shape]:
    for prefix, size in (("4", 16), ("51", 16), ("2221", 16), ("37", 15), ("6011", 16),
                         ("4", 13), ("4", 19), ("35", 16)):  # fmt: skip
        number = _luhn_complete(prefix, size)
        spaced = " ".join(number[i : i + 4] for i in range(0, size, 4))
        dashed = "-".join(number[i : i + 4] for i in range(0, size, 4))
        cvv = _luhn_complete("", 3)
        yield Shape("card", f"charge card {number} exp 12/29", number)
        yield Shape("card-spaced", f"card={spaced}", spaced.replace(" ", "")[:8])
        yield Shape("card-dashed", f"pan {dashed} failed", dashed[:9])
        yield Shape("cvv", f"card {number} cvv {cvv}", f"cvv {cvv}")


def _emails() -> Iterator[Shape]:
    for local in ("jane.doe", "ops+alerts", "a_b-c", "First.Last99"):
        for domain in ("example.com", "mail.example.co.uk", "corp-mail.io"):
            address = f"{local}@{domain}"
            yield Shape("email", f"notify {address} about the refund", address)


def _pem_and_cloud() -> Iterator[Shape]:
    body = _pick(_ALNUM, 64)
    pem = "-----BEGIN " + f"PRIVATE KEY-----\n{body}\n-----END " + "PRIVATE KEY-----"
    yield Shape("pem", f"key:\n{pem}\n", body)
    escaped = pem.replace("\n", "\\n")
    key_id = _pick(_HEX, 40)
    gcp = f'{{"type":"service_account","private_key_id":"{key_id}","private_key":"{escaped}"}}'
    yield Shape("gcp-key-id", gcp, key_id)
    yield Shape("gcp-private-key", gcp, body)
    account_key = _pick(_ALNUM + "+/", 86) + "=="
    azure = (
        "DefaultEndpointsProtocol=https;AccountName=acme;"
        f"AccountKey={account_key};EndpointSuffix=core.windows.net"
    )
    yield Shape("azure-storage", azure, account_key)
    sas = _pick(_ALNUM, 30) + "%2B" + _pick(_ALNUM, 10)
    yield Shape("azure-sas", f"GET https://acme.blob.core.windows.net/c?sv=2022&sig={sas}", sas)
    secret = _pick(_ALNUM + "/+", 40)
    key_id = "AK" + "IA" + _pick(string.ascii_uppercase + string.digits, 16).upper()
    yield Shape("aws-pair", f"aws key {key_id} secret {secret}", secret)


def corpus() -> list[Shape]:
    """Every planted shape (tokens alone, in key=value, in JSON and in prose)."""
    shapes: list[Shape] = []
    for name, token in _tokens():
        shapes.append(Shape(name, f"using {token} for the call", token))
        shapes.append(Shape(name + "-json", json.dumps({"cfg": {"key": token}}), token))
        shapes.append(Shape(name + "-eol", f"loaded credential={token}", token))
    for source in (_keyed, _urls, _commands_and_prose, _cards, _emails, _pem_and_cloud):
        shapes.extend(source())
    return shapes


CORPUS = corpus()


def leaks(shape: Shape, shown: str) -> list[str]:
    """The runs of ``FRAGMENT`` characters of the secret found in ``shown``."""
    secret = shape.secret
    if len(secret) <= FRAGMENT:
        return [secret] if secret in shown else []
    runs = {secret[i : i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1)}
    return sorted(run for run in runs if run in shown)


def test_the_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 200
    assert len({shape.name.split("-")[0] for shape in CORPUS}) >= 25


@pytest.mark.parametrize("shape", CORPUS, ids=lambda shape: shape.name)
def test_redact_leaves_nothing_in_clear(shape: Shape) -> None:
    for context in ("{t}", "ERROR upstream failed: {t} (retrying)", '{{"msg":"{t}"}}'):
        text = context.format(t=shape.text)
        assert not leaks(shape, redact(text)), redact(text)


def test_sql_cells_leave_nothing_in_clear() -> None:
    projection = RowProjection(max_cell_chars=2000)
    rows = [(shape.text, f"note: {shape.text}") for shape in CORPUS]
    projected = projection.project(["detail", "note"], rows, (False, False))
    for shape, row in zip(CORPUS, projected, strict=True):
        shown = json.dumps(row.cells, ensure_ascii=False)
        assert not leaks(shape, shown), (shape.name, shown)


DAY = datetime(2026, 11, 28, 10, tzinfo=UTC)


def _log_folder(folder: Path) -> None:
    hour = folder / "payment-api" / "2026-11-28" / "10.jsonl"
    hour.parent.mkdir(parents=True)
    lines = []
    for index, shape in enumerate(CORPUS):
        ts = (DAY + timedelta(seconds=index)).strftime("%Y-%m-%dT%H:%M:%SZ")
        message = f"request failed: {shape.text}"
        record = {"ts": ts, "service": "payment-api", "level": "ERROR", "message": message}
        lines.append(json.dumps(record))
    hour.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _shown(result: Ready) -> str:
    """Everything of a READY result that reaches an observation (items and summary)."""
    parts = [item.model_dump(mode="json") for item in result.items]
    if result.summary is not None:
        parts.append(result.summary.model_dump(mode="json"))
    return json.dumps(parts, ensure_ascii=False)


async def test_log_observations_leave_nothing_in_clear(tmp_path: Path) -> None:
    _log_folder(tmp_path)
    adapter = LogsAdapter(JsonlLogSource(tmp_path))
    shown = []
    # One query per planted line (items of every line), and one over the window (the summary).
    for index in range(len(CORPUS)):
        start = DAY + timedelta(seconds=index)
        query = LogsInput(service="payment-api", start=start, end=start + timedelta(seconds=1))
        result = await adapter.invoke(AdapterCall(f"call-{index}", "run-1", query))
        assert isinstance(result, Ready) and len(result.items) == 1, result
        shown.append(_shown(result))
    window = LogsInput(service="payment-api", start=DAY, end=DAY + timedelta(hours=1), limit=50)
    whole = await adapter.invoke(AdapterCall("call-window", "run-1", window))
    assert isinstance(whole, Ready)
    summary = _shown(whole)
    for shape, one in zip(CORPUS, shown, strict=True):
        assert not leaks(shape, one), (shape.name, one)
        assert not leaks(shape, summary), (shape.name, summary)


async def test_patterns_output_leaves_nothing_in_clear() -> None:
    text = "".join(f"request failed: {shape.text}\n".replace("\n", " ", shape.text.count("\n"))
                   for shape in CORPUS)  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "patterns",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(text.encode()), timeout=120)
    assert process.returncode == 0
    printed = out.decode()
    assert printed.count("\n") == len(CORPUS)
    for shape in CORPUS:
        assert not leaks(shape, printed), shape.name
