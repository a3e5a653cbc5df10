"""Shared pieces of the benchmark suite: the result table, percentiles, sizes, RSS readings."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "DEMO_DSN",
    "REPO",
    "Row",
    "Sizes",
    "Status",
    "judged",
    "median",
    "mysql_dsn",
    "peak_rss_kib",
    "percentile",
    "reset_peak_rss",
    "rss_kib",
]

REPO = Path(__file__).resolve().parent.parent
DEMO_DSN = "mysql://diag_ro:PASSWORD@127.0.0.1:3306/diag_demo"


def mysql_dsn() -> str:
    """The business database the bench reads: ``BENCH_MYSQL_DSN``, read when a section runs
    (a test points it at its own run's database), else the demo's (``scripts/mysql_up``), with
    the password ``setup-mysql`` keeps in the state folder."""
    configured = os.environ.get("BENCH_MYSQL_DSN")
    if configured:
        return configured
    from sre_diag.commands.demo_db import DEMO_DATABASE, DEMO_USER
    from sre_diag.commands.exits import load_settings
    from sre_diag.commands.setup_mysql import password_file, read_password

    stored = read_password(password_file(load_settings().state_dir, DEMO_DATABASE, DEMO_USER))
    return DEMO_DSN.replace("PASSWORD", quote(stored or "", safe=""))


class Status(StrEnum):
    """How a figure compares with its target."""

    PASS = "PASS"
    MISS = "MISS"
    INFO = "INFO"
    NOT_MEASURED = "NOT_MEASURED"
    ERROR = "ERROR"


@dataclass(slots=True)
class Row:
    """One line of the table: a figure measured in this run, its target and extra numbers."""

    section: str
    name: str
    value: float | None
    unit: str
    target: str = ""
    status: Status = Status.INFO
    detail: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "status": self.status.value,
            "detail": self.detail,
            "note": self.note,
        }


def judged(ok: bool) -> Status:
    return Status.PASS if ok else Status.MISS


@dataclass(frozen=True, slots=True)
class Sizes:
    """Every size the suite uses; ``quick()`` is the tiny variant for ``--quick`` and tests."""

    overhead_runs: int = 200
    overhead_warmup: int = 10
    concurrency: tuple[int, ...] = (50, 200)
    round_latency_s: float = 1.0
    mysql_runs: int = 200
    knowledge_sections: int = 10_000
    knowledge_queries: int = 200
    log_lines: tuple[int, int] = (1_000_000, 10_000_000)
    log_queries: int = 40
    cold_starts: int = 5
    import_probe: bool = True
    runstart_runs: int = 5
    slack_mentions: int = 200
    slack_in_flight: int = 50

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            overhead_runs=20,
            overhead_warmup=3,
            concurrency=(5, 20),
            round_latency_s=0.2,
            mysql_runs=20,
            knowledge_sections=300,
            knowledge_queries=20,
            log_lines=(5_000, 50_000),
            log_queries=8,
            cold_starts=1,
            import_probe=False,
            runstart_runs=2,
            slack_mentions=20,
            slack_in_flight=5,
        )

    @classmethod
    def tiny(cls) -> Sizes:
        """Smaller still: the smoke test's sizes (code paths only, numbers meaningless)."""
        return cls(
            overhead_runs=3,
            overhead_warmup=1,
            concurrency=(2, 4),
            round_latency_s=0.05,
            mysql_runs=3,
            knowledge_sections=40,
            knowledge_queries=3,
            log_lines=(400, 4_000),
            log_queries=2,
            cold_starts=1,
            import_probe=False,
            runstart_runs=2,
            slack_mentions=4,
            slack_in_flight=2,
        )


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0–100) of a non-empty sample."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no samples")
    return float(statistics.median(values))


def _status_field(name: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return None


def rss_kib() -> int:
    """Current resident set size (VmRSS) in KiB; ru_maxrss when /proc is unavailable."""
    value = _status_field("VmRSS")
    if value is not None:
        return value
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_kib() -> int:
    """Peak RSS since the last ``reset_peak_rss`` (VmHWM), else the process peak."""
    value = _status_field("VmHWM")
    if value is not None:
        return value
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False if not possible."""
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, b"5")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
