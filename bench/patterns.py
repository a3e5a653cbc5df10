"""Pattern mining for ``query_logs``: the masker of ``sre_diag.tools.logs.summary`` against
Drain3 (logpai's streaming log template miner, the field's standard), on

* the bundled incident (``examples/incident/logs``: every line of every service), each line
  labelled with the generator template it came from (:data:`INCIDENT_SHAPES`), and
* a generated mix of 20 message shapes (:data:`SHAPES`) with skewed frequencies and variable
  parts of the usual kinds (numbers, durations, ids, hex, UUIDs, IPs, quoted values, paths).

Scores per miner: grouping accuracy (the share of lines whose group holds exactly the lines of
their true shape, as in the Loghub benchmark), the number of groups, and whether the five
largest groups are the five largest shapes with their exact counts (what ``top_messages`` shows)
and the time per line.

``python -m bench.patterns`` (Drain3 is optional: ``pip install -e '.[bench]'``; without it only
the masker is scored). ``--repeat N`` times each miner N times from scratch (the masker's pattern
cache cleared, a new Drain3 miner) and keeps the fastest: on a shared machine, load only ever
slows a run.

``python -m bench.patterns --loghub DIR`` scores both, per system, on the Loghub 2k samples
(Zhu et al., "Loghub: A Large Collection of System Log Datasets for AI-driven Log Analytics",
ISSRE 2023, https://github.com/logpai/loghub; research use): DIR holds
``<System>/<System>_2k.log_structured.csv`` files (``Content`` and ``EventId`` columns). The data
is never part of this repository; ``bash bench/loghub-extract DIR`` writes them from a local
clone or mirror of logpai/loghub (``LOGHUB_GIT``). Systems are split into
:data:`DEVELOPMENT` (looked at while the masker was changed) and the held-out rest.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO
from sre_diag.tools.logs.summary import full_pattern, window_patterns

__all__ = [
    "DEVELOPMENT",
    "SHAPES",
    "incident_lines",
    "loghub_lines",
    "main",
    "mixed_lines",
    "score",
]

Labelled = list[tuple[str, str]]  # (true shape, message)

INCIDENT_SHAPES: tuple[tuple[str, str], ...] = (
    ("pool", r"db pool exhausted: timed out after \d+ms waiting for connection \(pool .*\)"),
    ("503", r"POST /v1/payments 503 in \d+ms order=ord_\d+"),
    ("201-slow", r"POST /v1/payments 201 in \d+ms order=ord_\d+"),
    ("201", r"POST /v1/payments 201 in \d+ms order=ord_\d+ psp=stripe"),
    ("slow-held", r"slow query: payment_reconciliation took \d+ms \(rows_examined=\d+, .*\)"),
    ("slow", r"slow query: payment_reconciliation took \d+ms"),
    ("pool-stats", r"db pool stats: max_size=\d+ in_use=\d+ waiting=0"),
    ("get-payment", r"GET /v1/payments/pay_\w+ 200 in \d+ms"),
    ("order-503", r"payment-api returned 503 for order ord_\d+ \(attempt \d/3\)"),
    ("order-failed", r"order ord_\d+ marked PAYMENT_FAILED after 3 attempts: payment-api 503"),
    ("order-retry", r"order ord_\d+ paid after retry payment_id=pay_\w+"),
    ("order-created", r"order ord_\d+ created total=[\d.]+ currency=USD"),
    ("order-paid", r"order ord_\d+ paid payment_id=pay_\w+"),
    ("checkout-502", r"POST /api/checkout/submit 502 in \d+ms: .* order=ord_\d+"),
    ("banner", r"showing 'payment busy, please retry' banner to user \(payment_unavailable\)"),
    ("checkout-get", r"GET /checkout 200 in \d+ms"),
    ("checkout-200", r"POST /api/checkout/submit 200 in \d+ms order=ord_\d+"),
    ("psp-latency", r"psp latency window=5m p50=\d+ms p99=\d+ms errors=0 provider=stripe"),
    ("psp-call", r"POST https://api.stripe.com/v1/payment_intents 200 in \d+ms request_id=req_\w+"),
)


def incident_lines(folder: Path = REPO / "examples" / "incident" / "logs") -> Labelled:
    """Every line of the bundled incident with its generator template (one-off events are
    their own shape)."""
    compiled = [(name, re.compile(pattern)) for name, pattern in INCIDENT_SHAPES]
    lines: Labelled = []
    for path in sorted(folder.rglob("*.jsonl")):
        for raw in path.read_text("utf-8").splitlines():
            message = json.loads(raw)["message"]
            shape = next((n for n, p in compiled if p.fullmatch(message)), "event:" + message)
            lines.append((shape, message))
    return lines


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choices("0123456789abcdef", k=n))


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=n))


def _uuid(rng: random.Random) -> str:
    return "-".join(_hex(rng, n) for n in (8, 4, 4, 4, 12))


def _ip(rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


_USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
_TABLES = ("orders", "payments", "refunds", "ledger")
_HOSTS = ("db-primary", "db-replica-1", "cache-0", "cache-1")

Shape = Callable[[random.Random], str]
SHAPES: tuple[Shape, ...] = (
    lambda r: f"db pool exhausted: timed out after {r.randint(2900, 3100)}ms waiting for conn",
    lambda r: f"POST /v1/payments 503 in {r.randint(3000, 3100)}ms order=ord_{r.randint(1, 99999)}",
    lambda r: f"GET /v1/orders/{r.randint(1, 99999)} 200 in {r.randint(2, 90)}ms",
    lambda r: f"request {_uuid(r)} completed status=200 bytes={r.randint(100, 99999)}",
    lambda r: f"connection reset by peer {_ip(r)}:{r.randint(1024, 65535)}",
    lambda r: f"trace {_hex(r, 32)} span {_hex(r, 16)} exported",
    lambda r: f'user="{r.choice(_USERS)}" login failed: invalid password',
    lambda r: f"cache miss key=session:{_hex(r, 12)} ttl={r.randint(1, 3600)}s",
    lambda r: f"slow query on {r.choice(_TABLES)} took {r.uniform(1, 20):.2f}s",
    lambda r: f"retrying upstream call attempt {r.randint(1, 5)}/5 after {r.randint(50, 900)}ms",
    lambda r: f"kafka consumer lag partition={r.randint(0, 63)} lag={r.randint(0, 10**6)}",
    lambda r: f"payment pay_{_word(r, 12)} captured amount={r.randint(100, 99999) / 100:.2f} USD",
    lambda r: f"disk usage {r.randint(50, 99)}% on /dev/sda{r.randint(1, 4)}",
    lambda r: f"gc pause {r.randint(1, 400)}ms heap={r.randint(100, 4000)}MB",
    lambda r: f"health check ok for {r.choice(_HOSTS)}",
    lambda r: f"job {_uuid(r)} scheduled at 2026-11-28T10:{r.randint(10, 59)}:00Z",
    lambda r: f"tls handshake failed from {_ip(r)}: certificate expired",
    lambda r: f"rate limit exceeded for api key id={r.randint(1000, 9999)} limit=100/min",
    lambda r: f"worker {r.randint(1, 32)} restarted after {r.randint(1, 60)}s",
    lambda r: f"order ord_{r.randint(10000, 99999)} marked PAYMENT_FAILED after 3 attempts",
)


def mixed_lines(total: int = 20_000, seed: int = 3) -> Labelled:
    """``total`` lines over the 20 shapes with Zipf-like frequencies, shuffled."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(SHAPES))]
    shapes = rng.choices(range(len(SHAPES)), weights=weights, k=total)
    return [(f"shape-{i:02d}", SHAPES[i](rng)) for i in shapes]


def _masker(messages: Sequence[str]) -> list[Hashable]:
    full_pattern.cache_clear()  # timed cold: no pattern remembered from an earlier data set
    return list(window_patterns(messages))


def _drain(masking: bool) -> Callable[[Sequence[str]], list[Hashable]] | None:
    try:
        miner_module = importlib.import_module("drain3")
        config_module: Any = importlib.import_module("drain3.template_miner_config")
        masking_module: Any = importlib.import_module("drain3.masking")
    except ImportError:
        return None

    def run(messages: Sequence[str]) -> list[Hashable]:
        config = config_module.TemplateMinerConfig()
        if masking:  # the masking of drain3's own example configuration
            config.masking_instructions = [
                masking_module.MaskingInstruction(pattern, name)
                for pattern, name in (
                    (r"((?<=[^A-Za-z0-9])|^)(([0-9a-f]{2,}:){3,}([0-9a-f]{2,}))"
                     r"((?=[^A-Za-z0-9])|$)", "ID"),
                    (r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})"
                     r"((?=[^A-Za-z0-9])|$)", "IP"),
                    (r"((?<=[^A-Za-z0-9])|^)([0-9a-f]{6,} ?){3,}((?=[^A-Za-z0-9])|$)", "SEQ"),
                    (r"((?<=[^A-Za-z0-9])|^)([0-9A-F]{4} ?){4,}((?=[^A-Za-z0-9])|$)", "SEQ"),
                    (r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
                    (r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM"),
                    (r"(?<=executed cmd )(\".+?\")", "CMD"),
                )
            ]  # fmt: skip
        miner = miner_module.TemplateMiner(config=config)
        ids = [miner.add_log_message(m)["cluster_id"] for m in messages]
        return list(ids)

    return run


def score(
    lines: Labelled, group: Callable[[Sequence[str]], list[Hashable]], repeat: int = 1
) -> dict[str, Any]:
    """Grouping accuracy, the share of lines in mixed groups, groups, the top-5 check and µs
    per line of one miner (the fastest of ``repeat`` runs, each from scratch: a shared,
    loaded machine slows some runs, never speeds one up)."""
    truth = [shape for shape, _ in lines]
    messages = [message for _, message in lines]
    timings = []
    for _ in range(max(repeat, 1)):
        started = time.perf_counter()
        predicted = group(messages)
        timings.append(time.perf_counter() - started)
    micros = min(timings) * 1e6 / max(len(lines), 1)
    members: dict[Hashable, set[int]] = defaultdict(set)
    shapes: dict[str, set[int]] = defaultdict(set)
    for i, (label, guess) in enumerate(zip(truth, predicted, strict=True)):
        shapes[label].add(i)
        members[guess].add(i)
    exact = sum(1 for i, guess in enumerate(predicted) if members[guess] == shapes[truth[i]])
    mixed = sum(len(m) for m in members.values() if len({truth[i] for i in m}) > 1)
    top_groups = [members[g] for g, _ in Counter(predicted).most_common(5)]
    top_shapes = [shapes[s] for s, _ in Counter(truth).most_common(5)]
    return {
        "grouping_accuracy": round(exact / len(lines), 4),
        "mixed_lines": round(mixed / len(lines), 4),
        "groups": len(members),
        "shapes": len(shapes),
        "top5_exact": top_groups == top_shapes,
        "us_per_line": round(micros, 1),
    }


# Chosen before any system was scored: every other system in Loghub's alphabetical order.
DEVELOPMENT = ("Android", "BGL", "HPC", "HealthApp", "Mac", "OpenStack", "Spark", "Windows")


def loghub_lines(folder: Path) -> dict[str, Labelled]:
    """Each system's ``(EventId, Content)`` lines, from
    ``folder/<System>/<System>_2k.log_structured.csv``."""
    systems: dict[str, Labelled] = {}
    for path in sorted(folder.glob("*/*_2k.log_structured.csv")):
        with path.open(encoding="utf-8", newline="") as handle:
            rows = [(row["EventId"], row["Content"]) for row in csv.DictReader(handle)]
        systems[path.parent.name] = rows
    return systems


Miner = Callable[[Sequence[str]], list[Hashable]] | None


def _miners() -> dict[str, Miner]:
    return {
        "masker": _masker,
        "drain3": _drain(masking=False),
        "drain3+masking": _drain(masking=True),
    }


def _loghub_report(folder: Path, repeat: int) -> dict[str, Any]:
    systems = loghub_lines(folder)
    if not systems:
        raise SystemExit(f"no <System>/<System>_2k.log_structured.csv under {folder}")
    miners = _miners()
    rows: dict[str, dict[str, Any]] = {}
    for system, lines in systems.items():
        split = "development" if system in DEVELOPMENT else "held-out"
        rows[system] = {"split": split, "lines": len(lines)}
        for name, miner in miners.items():
            if miner is not None:
                rows[system][name] = score(lines, miner, repeat)
    return {"systems": rows, "mean": _means(rows, miners)}


def _means(rows: dict[str, dict[str, Any]], miners: dict[str, Miner]) -> dict[str, Any]:
    means: dict[str, Any] = {}
    for split in ("development", "held-out", "all"):
        chosen = [r for r in rows.values() if split in ("all", r["split"])]
        for name, miner in miners.items():
            if miner is None or not chosen:
                continue
            means.setdefault(split, {})[name] = {
                field: round(sum(r[name][field] for r in chosen) / len(chosen), 4)
                for field in ("grouping_accuracy", "mixed_lines", "us_per_line")
            }
    return means


def _builtin_report(repeat: int) -> dict[str, Any]:
    datasets = {"bundled incident": incident_lines(), "20-shape mix": mixed_lines()}
    report: dict[str, dict[str, Any]] = {}
    for data_name, lines in datasets.items():
        for miner_name, miner in _miners().items():
            if miner is None:
                result: dict[str, Any] = {"skipped": "not installed"}
            else:
                result = score(lines, miner, repeat)
            report[f"{data_name} / {miner_name}"] = {"lines": len(lines), **result}
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.patterns", description=__doc__)
    parser.add_argument("--loghub", type=Path, help="folder of Loghub 2k structured CSV files")
    parser.add_argument(
        "--repeat", type=int, default=1, help="time each miner N times, keep the fastest"
    )
    args = parser.parse_args(argv)
    report = (
        _loghub_report(args.loghub, args.repeat) if args.loghub else _builtin_report(args.repeat)
    )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
