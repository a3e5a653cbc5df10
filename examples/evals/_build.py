"""Helpers of ``generate.py``: deterministic log lines, cassette scripts and Draft texts.

Nothing here is product code; it writes the §9 case folders of the bundled evaluation suite.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def at(text: str) -> datetime:
    """``2026-11-28T10:05:00Z`` as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _trace(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]


@dataclass
class Logs:
    """Log lines per service, written in the §2 folder layout."""

    lines: dict[str, list[tuple[datetime, str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def add(self, service: str, moment: datetime | str, level: str, message: str) -> None:
        when = at(moment) if isinstance(moment, str) else moment
        self.lines[service].append((when, level, message))

    def every(
        self,
        service: str,
        start: str,
        end: str,
        seconds: int,
        level: str,
        messages: list[str],
        offset: float = 0.0,
    ) -> None:
        """A line every ``seconds`` from ``start`` (inclusive) to ``end`` (exclusive), cycling
        through ``messages``; ``{n}`` in a message is the line's number."""
        moment, n = at(start) + timedelta(seconds=offset), 0
        while moment < at(end):
            self.add(service, moment, level, messages[n % len(messages)].format(n=n))
            moment += timedelta(seconds=seconds)
            n += 1

    def write(self, folder: Path) -> None:
        for service, rows in self.lines.items():
            by_hour: dict[Path, list[str]] = defaultdict(list)
            for moment, level, message in sorted(rows, key=lambda row: row[0]):
                path = folder / service / moment.strftime("%Y-%m-%d") / moment.strftime("%H.jsonl")
                record = {
                    "ts": _stamp(moment),
                    "service": service,
                    "level": level,
                    "message": message,
                    "trace_id": _trace(service, moment, message),
                }
                by_hour[path].append(json.dumps(record, ensure_ascii=False))
            for path, lines in by_hour.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass
class Script:
    """A cassette: one tool call per step, then the final text.

    ``items`` says whether that call returns items (then the next call carries
    ``previous_observation`` with ``evaluation``; an empty READY result needs none).
    """

    note: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    _pending: tuple[str, str] | None = None
    _prompt_tokens: int = 2400

    def _usage(self, completion: int) -> dict[str, int]:
        self._prompt_tokens += 900
        return {"prompt_tokens": self._prompt_tokens, "completion_tokens": completion}

    def call(
        self,
        call_id: str,
        tool: str,
        business: dict[str, Any],
        *,
        items: bool = True,
        evaluation: str = "GAINED",
    ) -> Script:
        arguments: dict[str, Any] = {"input": business}
        if self._pending is not None:
            pending_id, pending_eval = self._pending
            arguments = {
                "previous_observation": {"tool_call_id": pending_id, "evaluation": pending_eval},
                "input": business,
            }
        self.steps.append(
            {
                "tool_calls": [{"id": call_id, "name": tool, "arguments": arguments}],
                "usage": self._usage(110),
            }
        )
        self._pending = (call_id, evaluation) if items else None
        return self

    def final(self, text: str) -> Script:
        self.steps.append({"content": text, "usage": self._usage(len(text) // 3)})
        return self

    def to_json(self, query: str) -> dict[str, Any]:
        return {"note": self.note, "query": query, "steps": self.steps}


def finding(statement: str, *ids: str) -> dict[str, Any]:
    return {
        "kind": "FINDING",
        "statement": statement,
        "evidence": {"status": "CITED", "tool_call_ids": list(ids)},
    }


def negative(statement: str, *ids: str, scope: str | None = None) -> dict[str, Any]:
    evidence: dict[str, Any] = (
        {"status": "NO_EVIDENCE", "scope": scope}
        if scope is not None
        else {"status": "CITED", "tool_call_ids": list(ids)}
    )
    return {"kind": "NEGATIVE_OBSERVATION", "statement": statement, "evidence": evidence}


def draft(
    *,
    summary: str | None,
    cites: tuple[str, ...] = (),
    confidence: str = "HIGH",
    analysis: list[dict[str, Any]],
    actions: list[str],
    recommendations: list[str],
    checked: list[str],
    missing: list[str],
) -> str:
    """A DiagnosisDraft as the model's final text (one JSON object)."""
    conclusion = (
        None
        if summary is None
        else {"summary": summary, "confidence": confidence, "evidence_tool_call_ids": list(cites)}
    )
    body = {
        "conclusion": conclusion,
        "analysis": analysis,
        "action_plan": actions,
        "recommendations": recommendations,
        "limitations": {"checked_scope": checked, "missing_info": missing},
    }
    return json.dumps(body, ensure_ascii=False, indent=1)


@dataclass
class CaseData:
    """Everything one case folder holds."""

    case: dict[str, Any]
    logs: Logs | None = None
    runbooks: dict[str, str] = field(default_factory=dict)
    mysql: str | None = None
    cassettes: dict[str, Script] = field(default_factory=dict)

    def write(self, root: Path) -> None:
        folder = root / self.case["id"]
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        _dump(folder / "case.json", self.case)
        if self.logs is not None:
            self.logs.write(folder / "logs")
        for name, text in self.runbooks.items():
            (folder / "runbooks").mkdir(exist_ok=True)
            (folder / "runbooks" / name).write_text(text.strip() + "\n", encoding="utf-8")
        if self.mysql is not None:
            (folder / "mysql.sql").write_text(self.mysql.strip() + "\n", encoding="utf-8")
        for name, script in self.cassettes.items():
            _dump(folder / name, script.to_json(self.case["query"]))


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def sql_rows(table: str, columns: list[str], rows: list[tuple[object, ...]]) -> str:
    """One INSERT statement (``mysql.sql`` splits at a semicolon that ends a line)."""

    def literal(value: object) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, int | float):
            return str(value)
        return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"

    values = ",\n".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES\n{values};\n"
