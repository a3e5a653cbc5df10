"""``python -m bench [--quick] [--out FILE]``: every benchmark, one table, one JSON file.

Runs on loopback fakes (a per-conversation OpenAI-compatible model in its own process) and the
local MariaDB. Each figure is a ratio or a percentile measured in this same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.catalogue import run_catalogue
from bench.coldstart import run_coldstart
from bench.common import Row, Sizes, Status
from bench.concurrency import run_concurrency
from bench.overhead import run_overhead
from bench.runstart import run_runstart
from bench.slack_ack import run_slack_ack
from bench.tools_knowledge import run_knowledge
from bench.tools_logs import run_logs
from bench.tools_mysql import run_mysql
from bench.workers import run_workers

__all__ = ["SECTIONS", "main", "render_table", "run_all"]

Section = Callable[[Sizes], Awaitable[list[Row]]]


SECTIONS: tuple[tuple[str, Section], ...] = (
    ("1 harness overhead", run_overhead),
    ("2 concurrency", run_concurrency),
    ("3 slack ack", run_slack_ack),
    ("4 tools: query_mysql", run_mysql),
    ("4 tools: lookup_knowledge", run_knowledge),
    ("4 tools: query_logs", run_logs),
    ("4 tools: catalogues", run_catalogue),
    ("5 cold start", run_coldstart),
    ("5 cold start", run_runstart),
    ("6 workers", run_workers),
)


async def run_all(
    sizes: Sizes, sections: Sequence[tuple[str, Section]] = SECTIONS
) -> tuple[list[Row], dict[str, float]]:
    """Run every section in order; a failing section yields one ERROR row, the rest go on."""
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    for name, section in sections:
        started = time.perf_counter()
        try:
            rows.extend(await section(sizes))
        except Exception as exc:
            rows.append(Row(name, "section failed", None, "", "", Status.ERROR,
                            note=f"{type(exc).__name__}: {exc}"[:300]))  # fmt: skip
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"[bench] {name}: {seconds[name]} s", file=sys.stderr, flush=True)
    return rows, seconds


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"


def render_table(rows: Sequence[Row]) -> str:
    """One plain-text table: a line per figure, its extra numbers indented below."""
    head = ("section", "figure", "value", "target", "status")
    body = [
        (r.section, r.name, f"{_fmt(r.value)} {r.unit}".strip(), r.target, r.status.value)
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row, cells in zip(rows, body, strict=True):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)))
        extra = ", ".join(f"{k}={_fmt(v)}" for k, v in row.detail.items())
        if extra:
            lines.append(f"    {extra}")
        if row.note:
            lines.append(f"    ({row.note})")
    return "\n".join(lines)


def _report(rows: Sequence[Row], seconds: dict[str, float], quick: bool, total: float) -> Any:
    return {
        "quick": quick,
        "total_seconds": round(total, 1),
        "section_seconds": seconds,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "rows": [row.to_json() for row in rows],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (well under a minute)")
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    parser.add_argument(
        "--section", action="append", default=[], metavar="TEXT",
        help="only the sections whose name contains TEXT (repeatable; e.g. 'query_logs')",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    sizes = Sizes.quick() if args.quick else Sizes()
    chosen = [s for s in SECTIONS if not args.section or any(t in s[0] for t in args.section)]
    if not chosen:
        parser.error(f"no section matches {args.section}: {[name for name, _ in SECTIONS]}")
    started = time.perf_counter()
    rows, seconds = asyncio.run(run_all(sizes, chosen))
    total = time.perf_counter() - started
    print(render_table(rows))
    print(f"\ntotal {total:.1f} s ({'quick' if args.quick else 'full'} sizes)")
    if args.out is not None:
        report = _report(rows, seconds, args.quick, total)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return 1 if any(r.status is Status.ERROR for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
