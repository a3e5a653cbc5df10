"""Generate the bundled incident logs (deterministic) or N lines of the same shape for benchmarks.

The story (fixed, shared with the runbooks and the MySQL example): on 2026-11-28 payment-api
v2.14.0 is deployed at 10:02:00Z ("reduce DB pool max_size 50 -> 10; add payment
reconciliation query"). From 10:05 to 10:40 payment-api answers 503 on ``POST /v1/payments``
because its DB pool is exhausted while the reconciliation query holds connections for seconds;
order-service warns ``payment-api returned 503 for order ord_…`` and marks orders
``PAYMENT_FAILED``; checkout-web shows errors. stripe-gateway (the PSP) stays healthy with
normal latency — the red herring. The rollback to v2.13.4 at 10:41:00Z resolves it.

Order ids follow time: one order every 20 seconds, ``ord_10231`` being the order of
10:05:00–10:05:20Z (so ``ord_10245`` is 10:09:40Z). Inside the incident an order fails unless
``(n - 10231) % 7 == 6`` (about 6 in 7 fail; ord_10231, ord_10232 and ord_10245 fail).

Layout written (what ``sre_diag.tools.logs.JsonlLogSource`` reads)::

    <out>/<service>/<YYYY-MM-DD>/<HH>.jsonl    one JSON object per line, sorted by ts

A few lines carry fake credentials (a DSN with a password, a bearer token, an API key) so that
redaction can be demonstrated end to end.

Usage::

    python examples/incident/generate_logs.py                       # rewrite the bundle
    python examples/incident/generate_logs.py --out /tmp/bench --lines 5000000 \\
        --start 2026-11-28T00:00:00Z --hours 24 --seed 7

Without ``--lines`` the count follows the bundled density (a few lines per minute per service,
dense around the incident); with it, exactly N lines are spread by the same density profile.
The same arguments always produce byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAY = datetime(2026, 11, 28, tzinfo=UTC)
DEPLOY = DAY.replace(hour=10, minute=2)
INCIDENT_START = DAY.replace(hour=10, minute=5)
INCIDENT_END = DAY.replace(hour=10, minute=40)
ROLLBACK = DAY.replace(hour=10, minute=41)
RECOVERED = DAY.replace(hour=10, minute=43)
FIRST_AFFECTED_ORDER = 10231
ORDER_EVERY = timedelta(seconds=20)

SERVICES = ("payment-api", "order-service", "checkout-web", "stripe-gateway")
# lines per minute: (quiet, incident)
RATES = {
    "payment-api": (2.0, 60.0),
    "order-service": (1.5, 12.0),
    "checkout-web": (1.0, 20.0),
    "stripe-gateway": (0.6, 4.0),
}
HOSTS = {
    "payment-api": ("payment-api-7d9f8-xk2pq", "payment-api-7d9f8-m4nzt"),
    "order-service": ("order-service-5c6b-2hgwd",),
    "checkout-web": ("checkout-web-84f7-qq9rs", "checkout-web-84f7-ptl6c"),
    "stripe-gateway": ("stripe-gateway-6f4d-8wv2k",),
}

# Fake credentials for the redaction demo (not real; they only look like the real formats).
_DSN = "mysql://payments_rw:Pa55w0rd-Prod-2026@db-primary.internal:3306/payments"
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c3JfODgyMSIsImV4cCI6MTc5NjE3MDAwMH0"
    ".Zm9yLXJlZGFjdGlvbi1kZW1vLW9ubHktbm90LWEta2V5"
)
_API_KEY = "sk_test_FakeKeyForRedactionDemo0000"


@dataclass(frozen=True, slots=True)
class Line:
    """One generated log line."""

    ts: datetime
    service: str
    level: str
    message: str
    attrs: dict[str, str]

    def to_json(self) -> str:
        ts = self.ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        record = {"ts": ts, "service": self.service, "level": self.level}
        record |= {"message": self.message, **self.attrs}
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def order_at(ts: datetime) -> int:
    """The order being placed at ``ts`` (one every 20 s, ord_10231 at 10:05:00Z)."""
    return FIRST_AFFECTED_ORDER + (ts - INCIDENT_START) // ORDER_EVERY


def order_fails(order: int) -> bool:
    """Whether an incident-window order ends up ``PAYMENT_FAILED``."""
    return (order - FIRST_AFFECTED_ORDER) % 7 != 6


def in_incident(ts: datetime) -> bool:
    """Whether payment-api is failing at ``ts``."""
    return INCIDENT_START <= ts < INCIDENT_END


def version_at(ts: datetime) -> str:
    """The payment-api version serving at ``ts``."""
    return "v2.14.0" if DEPLOY <= ts < ROLLBACK else "v2.13.4"


def busy(minute: datetime) -> bool:
    """The dense part of the day: from the deploy to shortly after recovery."""
    return DEPLOY <= minute < RECOVERED


def rate(service: str, minute: datetime) -> float:
    """Lines per minute: a day curve in quiet hours, the incident rate while busy."""
    quiet, incident = RATES[service]
    if busy(minute):
        return incident
    hour = minute.hour
    return quiet * (0.4 if hour < 6 else 1.3 if 9 <= hour < 18 else 0.9)


# -- messages -----------------------------------------------------------------------------------


def _pay_id(rng: random.Random) -> str:
    return "pay_" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=12))


def _payment_api(ts: datetime, rng: random.Random) -> tuple[str, str]:
    order = f"ord_{order_at(ts)}"
    if in_incident(ts):
        roll = rng.random()
        if roll < 0.45:
            waiting = rng.randint(18, 64)
            return (
                "ERROR",
                "db pool exhausted: timed out after 3000ms waiting for connection "
                f"(pool max_size=10, in_use=10, waiting={waiting})",
            )
        if roll < 0.80:
            return "ERROR", f"POST /v1/payments 503 in {rng.randint(3001, 3090)}ms order={order}"
        if roll < 0.92:
            took = rng.choice((8412, 7968, 9105, 8830, 7750))
            return (
                "WARN",
                f"slow query: payment_reconciliation took {took}ms "
                f"(rows_examined={rng.randint(1_700_000, 1_900_000)}, holding 1 pooled connection)",
            )
        return "INFO", f"POST /v1/payments 201 in {rng.randint(2400, 2990)}ms order={order}"
    if DEPLOY <= ts < ROLLBACK and rng.random() < 0.25:
        return "WARN", f"slow query: payment_reconciliation took {rng.randint(7600, 9200)}ms"
    if rng.random() < 0.1:
        max_size = 10 if DEPLOY <= ts < ROLLBACK else 50
        in_use = rng.randint(2, 9)
        return "DEBUG", f"db pool stats: max_size={max_size} in_use={in_use} waiting=0"
    if rng.random() < 0.2:
        return "INFO", f"GET /v1/payments/{_pay_id(rng)} 200 in {rng.randint(4, 19)}ms"
    return "INFO", f"POST /v1/payments 201 in {rng.randint(180, 420)}ms order={order} psp=stripe"


def _order_service(ts: datetime, rng: random.Random) -> tuple[str, str]:
    if in_incident(ts):
        # Each order's 20 s slot: attempts in its 1st, 2nd and 3rd 5 s, the verdict in the 4th.
        number = order_at(ts)
        order = f"ord_{number}"
        step = (ts - INCIDENT_START) % ORDER_EVERY // timedelta(seconds=5)
        if not order_fails(number):
            return "INFO", f"order {order} paid after retry payment_id={_pay_id(rng)}"
        if step < 3:
            return "WARN", f"payment-api returned 503 for order {order} (attempt {step + 1}/3)"
        return "ERROR", f"order {order} marked PAYMENT_FAILED after 3 attempts: payment-api 503"
    order = f"ord_{order_at(ts)}"
    if rng.random() < 0.5:
        cents = rng.randint(999, 25_000)
        return "INFO", f"order {order} created total={cents / 100:.2f} currency=USD"
    return "INFO", f"order {order} paid payment_id={_pay_id(rng)}"


def _checkout_web(ts: datetime, rng: random.Random) -> tuple[str, str]:
    order = f"ord_{order_at(ts)}"
    if in_incident(ts) and rng.random() < 0.7:
        if rng.random() < 0.6:
            return (
                "ERROR",
                f"POST /api/checkout/submit 502 in {rng.randint(3100, 9400)}ms: "
                f"order-service payment step failed (payment-api 503) order={order}",
            )
        return "WARN", "showing 'payment busy, please retry' banner to user (payment_unavailable)"
    if rng.random() < 0.5:
        return "INFO", f"GET /checkout 200 in {rng.randint(40, 140)}ms"
    return "INFO", f"POST /api/checkout/submit 200 in {rng.randint(300, 700)}ms order={order}"


def _stripe_gateway(ts: datetime, rng: random.Random) -> tuple[str, str]:
    if ts.minute % 5 == 0 and rng.random() < 0.5:
        p50, p99 = rng.randint(160, 210), rng.randint(330, 420)
        return "INFO", f"psp latency window=5m p50={p50}ms p99={p99}ms errors=0 provider=stripe"
    request = "req_" + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=14))
    took = rng.randint(140, 390)
    return (
        "INFO",
        f"POST https://api.stripe.com/v1/payment_intents 200 in {took}ms request_id={request}",
    )


MESSAGES: dict[str, Callable[[datetime, random.Random], tuple[str, str]]] = {
    "payment-api": _payment_api,
    "order-service": _order_service,
    "checkout-web": _checkout_web,
    "stripe-gateway": _stripe_gateway,
}

# Scripted lines: the deploy, the rollback, and the fake-credential lines.
EVENTS: tuple[tuple[datetime, str, str, str], ...] = (
    (DEPLOY, "payment-api", "INFO",
     "deploy: payment-api v2.14.0 rolling out (reduce DB pool max_size 50 -> 10; "
     "add payment reconciliation query)"),
    (DEPLOY + timedelta(seconds=4), "payment-api", "INFO", f"db connect dsn={_DSN}"),
    (DEPLOY + timedelta(seconds=5), "payment-api", "INFO",
     "db pool initialised: max_size=10 min_size=5 acquire_timeout_ms=3000"),
    (DEPLOY + timedelta(seconds=30), "payment-api", "INFO",
     "reconciliation job payment_reconciliation scheduled every 15s"),
    (DAY.replace(hour=10, minute=12, second=31), "checkout-web", "DEBUG",
     f"forwarding headers to order-service: Authorization: Bearer {_JWT}"),
    (DAY.replace(hour=3, minute=17, second=2), "stripe-gateway", "WARN",
     f"config reload: api_key={_API_KEY} loaded from env (mode=test)"),
    (ROLLBACK, "payment-api", "INFO",
     "deploy: rollback to payment-api v2.13.4 started by oncall (incident INC-2026-1128)"),
    (ROLLBACK + timedelta(seconds=20), "payment-api", "INFO",
     "db pool initialised: max_size=50 min_size=5 acquire_timeout_ms=3000"),
    (ROLLBACK + timedelta(seconds=95), "payment-api", "INFO",
     "deploy: payment-api v2.13.4 healthy on all instances"),
)  # fmt: skip


# -- allocation and writing ---------------------------------------------------------------------


def allocate(weights: list[float], total: int) -> list[int]:
    """Split ``total`` over cells proportionally to ``weights`` (largest remainder, stable)."""
    scale = total / sum(weights)
    exact = [w * scale for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _minutes(start: datetime, hours: int) -> list[datetime]:
    return [start + timedelta(minutes=m) for m in range(hours * 60)]


def _cells(start: datetime, hours: int, lines: int | None) -> dict[tuple[str, datetime], int]:
    keys = [(s, m) for m in _minutes(start, hours) for s in SERVICES]
    weights = [rate(s, m) for s, m in keys]
    total = round(sum(weights)) if lines is None else lines
    return dict(zip(keys, allocate(weights, total), strict=True))


def _hour_lines(
    service: str, hour: datetime, cells: dict[tuple[str, datetime], int], rng: random.Random
) -> Iterator[Line]:
    lines: list[Line] = []
    for minute in (hour + timedelta(minutes=m) for m in range(60)):
        for _ in range(cells.get((service, minute), 0)):
            ts = minute + timedelta(milliseconds=rng.randrange(60_000))
            level, message = MESSAGES[service](ts, rng)
            lines.append(Line(ts, service, level, message, _attrs(service, ts, rng)))
    for ts, event_service, level, message in EVENTS:
        if event_service == service and hour <= ts < hour + timedelta(hours=1):
            lines.append(Line(ts, service, level, message, _attrs(service, ts, rng)))
    return iter(sorted(lines, key=lambda line: line.ts))


def _attrs(service: str, ts: datetime, rng: random.Random) -> dict[str, str]:
    attrs = {"trace_id": f"{rng.getrandbits(128):032x}", "host": rng.choice(HOSTS[service])}
    if service == "payment-api":
        attrs["version"] = version_at(ts)
    return attrs


def generate(out: Path, start: datetime, hours: int, lines: int | None, seed: int) -> int:
    """Write the files; return the number of lines written."""
    cells = _cells(start, hours, lines)
    written = 0
    for service in SERVICES:
        rng = random.Random(f"{seed}:{service}")
        for hour in (start + timedelta(hours=h) for h in range(hours)):
            batch = [line.to_json() for line in _hour_lines(service, hour, cells, rng)]
            if not batch:
                continue
            path = out / service / f"{hour:%Y-%m-%d}" / f"{hour:%H}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(batch) + "\n", encoding="utf-8")
            written += len(batch)
    return written


def _parse_start(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError("start needs a UTC offset, e.g. 2026-11-28T00:00:00Z")
    start = parsed.astimezone(UTC)
    if start != start.replace(minute=0, second=0, microsecond=0):
        raise argparse.ArgumentTypeError("start must be on a full hour")
    return start


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "logs", help="output folder")
    parser.add_argument("--lines", type=int, default=None, help="exact number of lines")
    parser.add_argument("--start", type=_parse_start, default=DAY, help="RFC 3339, full hour")
    parser.add_argument("--hours", type=int, default=24, help="how many hours to cover")
    parser.add_argument("--seed", type=int, default=20261128, help="RNG seed")
    args = parser.parse_args(argv)
    if (args.lines is not None and args.lines < 0) or args.hours < 1:
        parser.error("--lines must be >= 0 and --hours >= 1")
    count = generate(args.out, args.start, args.hours, args.lines, args.seed)
    print(f"wrote {count} lines to {args.out}")


if __name__ == "__main__":
    main()
