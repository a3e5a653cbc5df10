"""``eval`` reports: one :class:`RunReport` per case run, the totals, the table and the JSON
report file."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sre_diag.contract.result import ExecutionResult

__all__ = [
    "CRITERIA_SHOWN",
    "RunReport",
    "render_table",
    "totals",
    "write_report",
]


CRITERIA_SHOWN = 60


@dataclass(slots=True)
class RunReport:
    """One case run as the table and the JSON report show it."""

    id: str
    case: str
    cassette: str | None
    repeat: int
    status: Literal["PASS", "FAIL", "SKIPPED", "ERROR"]
    failed_criteria: list[str] = field(default_factory=list)
    outcome: str | None = None
    stop_reason: str | None = None
    failure: dict[str, str] | None = None
    usage: dict[str, int] | None = None
    rejections: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool | None:
        return {"PASS": True, "FAIL": False}.get(self.status)

    @property
    def tokens(self) -> int:
        u = self.usage or {}
        return u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "case": self.case,
            "cassette": self.cassette,
            "repeat": self.repeat,
            "status": self.status,
            "passed": self.passed,
            "failed_criteria": self.failed_criteria,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason,
            "failure": self.failure,
            "usage": self.usage,
            "rejections": self.rejections,
            "tool_errors": self.tool_errors,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }

    def record(self, result: ExecutionResult, failed: list[str]) -> None:
        self.status = "FAIL" if failed else "PASS"
        self.failed_criteria = failed
        self.outcome = result.outcome.value
        self.stop_reason = result.stop_reason.value if result.stop_reason else None
        self.failure = result.failure.model_dump(mode="json") if result.failure else None
        self.usage = result.usage.model_dump(mode="json")
        checks = result.progress.checks if result.progress is not None else ()
        rejected = Counter(c.error_code or "?" for c in checks if c.status == "REJECTED")
        errors = Counter(c.error_code or "?" for c in checks if c.status == "ERROR")
        self.rejections, self.tool_errors = dict(rejected), dict(errors)


def _percentile(values: Sequence[int], fraction: float) -> int | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def totals(reports: Sequence[RunReport]) -> dict[str, Any]:
    ran = [r for r in reports if r.status in ("PASS", "FAIL")]
    passed = sum(1 for r in ran if r.status == "PASS")
    elapsed = [r.usage["elapsed_ms"] for r in ran if r.usage is not None]
    return {
        "cases": len({r.case for r in reports}),
        "runs": len(ran),
        "passed": passed,
        "failed": len(ran) - passed,
        "skipped": sum(1 for r in reports if r.status == "SKIPPED"),
        "errors": sum(1 for r in reports if r.status == "ERROR"),
        "pass_rate": round(passed / len(ran), 4) if ran else None,
        "elapsed_ms_p50": _percentile(elapsed, 0.50),
        "elapsed_ms_p95": _percentile(elapsed, 0.95),
        "tokens": sum(r.tokens for r in ran),
    }


def render_table(reports: Sequence[RunReport], summary: dict[str, Any]) -> str:
    rows = [("case", "result", "failed criteria", "outcome", "calls", "tokens", "seconds")]
    for r in reports:
        name = r.id if r.repeat == 1 else f"{r.id} #{r.repeat}"
        outcome = r.stop_reason or r.outcome or "-"
        if r.outcome == "FAILED" and r.failure:
            outcome = f"FAILED {r.failure['code']}"
        rows.append(
            (
                name,
                r.status,
                (", ".join(r.failed_criteria) or r.reason or "-")[:CRITERIA_SHOWN],
                outcome if r.outcome != "STOPPED" else f"STOPPED {r.stop_reason}",
                str((r.usage or {}).get("model_calls", "-")),
                str(r.tokens) if r.usage else "-",
                f"{r.seconds:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    rate = summary["pass_rate"]
    lines.append("")
    lines.append(
        f"cases {summary['cases']}  runs {summary['runs']}  passed {summary['passed']}  "
        f"pass_rate {'-' if rate is None else f'{rate:.1%}'}  "
        f"skipped {summary['skipped']}  errors {summary['errors']}  "
        f"elapsed_ms p50 {summary['elapsed_ms_p50']} p95 {summary['elapsed_ms_p95']}  "
        f"tokens {summary['tokens']}"
    )
    return "\n".join(line.rstrip() for line in lines)


def write_report(out: Path, document: dict[str, Any]) -> None:
    out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", "utf-8")
