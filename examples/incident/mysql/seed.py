"""Deterministic seed rows of the bundled incident's business database.

The story (other bundled pieces — logs, runbooks, the recorded demo — depend on it, so it is
fixed): on 2026-11-28 payment-api v2.14.0 is deployed at 10:02:00Z by ``ci-bot`` with
``reduce DB pool max_size 50 -> 10; add payment reconciliation query``. From 10:05 to about 10:40
payments fail with ``DB_POOL_TIMEOUT`` and orders pile up in ``PAYMENT_PENDING``; payment-api's
pool metrics show pool_size 10, in_use 10 and 20–60 waiters. A rollback to v2.13.4 at 10:41:00Z
resolves it. order-service v5.2.0 (08:30Z) and checkout-web v3.8.1 (09:10Z) are distractors.

Rows come from a fixed-seed PRNG so every setup produces byte-identical data (the tests checksum
the tables). ``python seed.py`` rewrites ``seed.sql`` next to this file for people who prefer to
load the data with the ``mysql`` client; ``scripts/setup_mysql.py`` uses :func:`generate`.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

Row = tuple[object, ...]
Table = tuple[tuple[str, ...], list[Row]]

DAY = datetime(2026, 11, 28)
DEPLOY_AT = datetime(2026, 11, 28, 10, 2, 0)
INCIDENT_START = datetime(2026, 11, 28, 10, 5, 0)
INCIDENT_END = datetime(2026, 11, 28, 10, 40, 0)
ROLLBACK_AT = datetime(2026, 11, 28, 10, 41, 0)

# Orders the runbooks, logs and demo name explicitly; they must fail with DB_POOL_TIMEOUT.
KNOWN_AFFECTED_ORDERS = ("ord_10231", "ord_10232", "ord_10245")

_FIRST_ORDER = 10001
# (segment start, segment end, number of orders); order ids are numbered by creation time.
_SEGMENTS = (
    (DAY, INCIDENT_START, 220),  # ord_10001 .. ord_10220
    (INCIDENT_START, INCIDENT_END, 50),  # ord_10221 .. ord_10270, the incident window
    (INCIDENT_END, DAY + timedelta(days=1), 130),  # ord_10271 .. ord_10400
)

DEPLOYMENTS: list[Row] = [
    (1, "payment-api", "v2.13.4", datetime(2026, 11, 26, 15, 20, 0), "alice.chen",
     "add idempotent retry for refunds; upgrade stripe SDK 11.2 -> 11.4"),
    (2, "order-service", "v5.1.3", datetime(2026, 11, 27, 11, 5, 0), "bob.k",
     "fix currency rounding in invoice export"),
    (3, "order-service", "v5.2.0", datetime(2026, 11, 28, 8, 30, 0), "ci-bot",
     "add order tags; bump http client timeout 2s -> 3s"),
    (4, "checkout-web", "v3.8.1", datetime(2026, 11, 28, 9, 10, 0), "ci-bot",
     "new address autocomplete widget"),
    (5, "payment-api", "v2.14.0", DEPLOY_AT, "ci-bot",
     "reduce DB pool max_size 50 -> 10; add payment reconciliation query"),
    (6, "payment-api", "v2.13.4", ROLLBACK_AT, "oncall-sre",
     "rollback to v2.13.4: payments failing with DB_POOL_TIMEOUT"),
    (7, "checkout-web", "v3.8.2", datetime(2026, 11, 28, 14, 30, 0), "ci-bot",
     "copy fixes on the payment step"),
]  # fmt: skip

API_CREDENTIALS: list[Row] = [
    ("cred_1", "stripe", "sk_live_51DEMOxNOTxAxREALxKEYx7Qk2Lr9", "whsec_DEMOnotREALsecret4f8a1c",
     datetime(2026, 10, 1, 9, 0, 0)),
    ("cred_2", "adyen", "AQEyhmfxDEMOnotREALkey0m1n2b3v4c", "adyen_hmac_DEMOnotREAL9d7e6f",
     datetime(2026, 9, 15, 12, 30, 0)),
]  # fmt: skip


def generate() -> dict[str, Table]:
    """Every table's column names and rows, in load order; identical on every call."""
    rng = random.Random(20261128)
    orders, payments = _orders_and_payments(rng)
    return {
        "orders": (
            ("id", "user_id", "amount_cents", "currency", "status", "created_at", "updated_at"),
            orders,
        ),
        "payments": (
            ("id", "order_id", "provider", "status", "error_code", "latency_ms", "created_at"),
            payments,
        ),
        "deployments": (
            ("id", "service", "version", "deployed_at", "deployed_by", "change_summary"),
            list(DEPLOYMENTS),
        ),
        "db_pool_metrics": (
            ("service", "sampled_at", "pool_size", "in_use", "waiting"),
            _pool_metrics(rng),
        ),
        "api_credentials": (
            ("id", "provider", "api_key", "secret_token", "rotated_at"),
            list(API_CREDENTIALS),
        ),
    }


def _order_times(rng: random.Random) -> list[datetime]:
    """Creation times, evenly spread with jitter inside each segment, strictly increasing."""
    times: list[datetime] = []
    for start, end, count in _SEGMENTS:
        step = (end - start) / count
        for index in range(count):
            jitter = timedelta(seconds=rng.randint(0, max(1, int(step.total_seconds() * 0.8))))
            times.append((start + step * index + jitter).replace(microsecond=0))
    return times


def _orders_and_payments(rng: random.Random) -> tuple[list[Row], list[Row]]:
    orders: list[Row] = []
    payments: list[Row] = []
    for offset, created in enumerate(_order_times(rng)):
        order_id = f"ord_{_FIRST_ORDER + offset}"
        in_incident = INCIDENT_START <= created < INCIDENT_END
        attempts, status = (
            _incident_attempts(rng, order_id, created)
            if in_incident
            else _normal_attempts(rng, created)
        )
        for attempt in attempts:
            payments.append((f"pay_{20001 + len(payments)}", order_id, *attempt))
        updated = max(attempt[4] for attempt in attempts) + timedelta(seconds=1)
        orders.append(
            (
                order_id,
                f"usr_{rng.randint(1000, 1999)}",
                rng.choice((990, 1499, 2500, 3999, 4999, 7450, 12900, 24900)),
                rng.choices(("USD", "EUR", "GBP"), weights=(70, 20, 10))[0],
                status,
                created,
                updated,
            )
        )
    return orders, payments


def _provider(rng: random.Random) -> str:
    return rng.choices(("stripe", "adyen"), weights=(70, 30))[0]


def _normal_attempts(rng: random.Random, created: datetime) -> tuple[list[Row], str]:
    """Outside the incident: mostly SUCCEEDED, a few declines and 3-D Secure waits."""
    at = created + timedelta(seconds=rng.randint(1, 4))
    latency = rng.randint(140, 650)
    roll = rng.random()
    if roll < 0.04:
        code = rng.choice(("CARD_DECLINED", "INSUFFICIENT_FUNDS"))
        return [(_provider(rng), "FAILED", code, latency, at)], "PAYMENT_FAILED"
    if roll < 0.06:
        return [(_provider(rng), "PENDING", None, latency, at)], "PAYMENT_PENDING"
    status = "REFUNDED" if roll > 0.985 else "PAID"
    return [(_provider(rng), "SUCCEEDED", None, latency, at)], status


def _incident_attempts(
    rng: random.Random, order_id: str, created: datetime
) -> tuple[list[Row], str]:
    """Inside the incident: 1–3 attempts that wait out the 5 s pool acquire timeout and fail."""
    if order_id not in KNOWN_AFFECTED_ORDERS and rng.random() < 0.12:
        at = created + timedelta(seconds=rng.randint(2, 6))
        return [(_provider(rng), "SUCCEEDED", None, rng.randint(2100, 4800), at)], "PAID"
    provider = _provider(rng)
    attempts: list[Row] = []
    at = created + timedelta(seconds=1)
    for _ in range(rng.randint(1, 3)):
        latency = rng.randint(5001, 5240)
        attempts.append((provider, "FAILED", "DB_POOL_TIMEOUT", latency, at))
        at += timedelta(milliseconds=latency + rng.randint(800, 2500))
        at = at.replace(microsecond=0)
    return attempts, "PAYMENT_PENDING"


def _pool_metrics(rng: random.Random) -> list[Row]:
    """One sample a minute, 08:00–12:00, for payment-api and order-service."""
    rows: list[Row] = []
    start = datetime(2026, 11, 28, 8, 0, 0)
    for minute in range(4 * 60 + 1):
        at = start + timedelta(minutes=minute)
        rows.append(("payment-api", at, *_payment_api_pool(rng, at)))
        rows.append(("order-service", at, 30, rng.randint(3, 7), 0))
    return rows


def _payment_api_pool(rng: random.Random, at: datetime) -> tuple[int, int, int]:
    if at < DEPLOY_AT or at >= ROLLBACK_AT:
        busy = rng.randint(6, 10) if at < DEPLOY_AT or at > ROLLBACK_AT else 14
        return 50, busy, 0
    if at < INCIDENT_START:
        return 10, rng.randint(8, 10), rng.randint(0, 6)
    return 10, 10, rng.randint(20, 60)


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return f"'{value:%Y-%m-%d %H:%M:%S}'"
    text = str(value).replace("\\", "\\\\").replace("'", "''")
    return f"'{text}'"


def render_sql() -> str:
    """The seed as INSERT statements, one per table, a semicolon ending each statement's line."""
    parts = ["-- Generated by seed.py; do not edit by hand.\n"]
    for table, (columns, rows) in generate().items():
        values = ",\n".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
        parts.append(f"INSERT INTO {table} ({', '.join(columns)}) VALUES\n{values};\n")
    return "\n".join(parts)


if __name__ == "__main__":
    (Path(__file__).resolve().parent / "seed.sql").write_text(render_sql(), encoding="utf-8")
