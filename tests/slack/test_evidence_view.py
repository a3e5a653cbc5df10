"""The Evidence view of one check: counts in words, the onset and the latest lines labelled and
in time order, times as Slack dates built only from times that parse, runbook tables as rows,
and the checks in the order they ran."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import EvidenceCheck
from sre_diag.slack.blocks import render_evidence
from sre_diag.slack.evidence import EvidenceRecord, evidence_ids
from sre_diag.slack.evidence_items import check_lines, parse_time, table_rows


def _line(ts: str, message: str = "db pool exhausted") -> dict[str, str]:
    return {"ts": ts, "service": "payment-api", "level": "ERROR", "message": message}


def _summary(matched: int, exact: bool = True) -> dict[str, Any]:
    return {"matched": matched, "exact": exact, "first_ts": "2026-11-28T10:05:00Z",
            "last_ts": "2026-11-28T10:29:59Z", "top_messages": [],
            "buckets": {"start": "2026-11-28T10:00:00Z", "width_seconds": 60,
                        "counts": [0, 3, 9]}}  # fmt: skip


def test_latest_lines_read_oldest_first_and_the_count_says_of_how_many() -> None:
    newest_first = [_line(f"2026-11-28T10:29:5{s}Z") for s in (9, 5, 1)]
    shown = check_lines({"summary": _summary(1167), "items": newest_first, "truncated": True})
    assert shown.count == "3 of 1,167 matching lines"
    assert shown.lines[-4] == "_Latest matching lines_"
    times = [line.split("|")[1].split(" UTC>")[0] for line in shown.lines[-3:]]
    assert times == ["2026-11-28 10:29:51", "10:29:55", "10:29:59"]  # the date once
    assert "_First matching lines_" not in shown.lines  # absent first_items: no such group


def test_the_onset_and_the_latest_are_both_labelled_and_not_repeated() -> None:
    first = [_line("2026-11-28T10:05:00Z"), _line("2026-11-28T10:05:01Z")]
    latest = [_line("2026-11-28T10:05:01Z"), _line("2026-11-28T10:29:59Z")]
    shown = check_lines({"summary": _summary(40, exact=False), "first_items": first,
                         "items": latest})  # fmt: skip
    assert shown.count == "3 of about 40 matching lines"
    labels = [line for line in shown.lines if line.endswith("matching lines_")]
    assert labels == ["_First matching lines_", "_Latest matching lines_"]
    assert sum("10:05:01" in line for line in shown.lines) == 1


def test_nothing_matched_says_so() -> None:
    shown = check_lines({"summary": _summary(0) | {"first_ts": None, "last_ts": None},
                         "items": []})  # fmt: skip
    assert (shown.count, shown.lines) == ("no matching lines", [])


@pytest.mark.parametrize(
    "ts",
    ["<!date^1^{time}|x>", "2026-11-28T10:00:00", "yesterday", "2026-13-40T99:00:00Z", "9" * 80],
)
def test_a_time_that_does_not_parse_stays_inert_text(ts: str) -> None:
    assert parse_time(ts) is None
    [line] = check_lines({"items": [_line(ts)]}).lines[-1:]
    assert "<!date" not in line  # shown as text, never a token of ours


def test_rows_and_sections_are_counted_in_words() -> None:
    rows = check_lines({"items": [{"cells": {"a": 1}}, {"cells": {"a": None}}], "truncated": True})
    assert rows.count == "2 rows (more were left out)"
    assert rows.lines[1] == "> a=NULL"
    one = check_lines({"items": [{"title": "T", "heading": "H", "path": "p.md", "score": 1,
                                  "snippet": "s"}]})  # fmt: skip
    assert one.count == "1 runbook section"


def test_a_markdown_table_reads_as_rows() -> None:
    text = "Before: | Key | Meaning | |---|:---:| | `a_b` | one | | c | two | after."
    assert table_rows(text) == [
        ("Before:", [[("Key", "`a_b`"), ("Meaning", "one")], [("Key", "c"), ("Meaning", "two")]]),
        ("after.", []),
    ]
    shown = check_lines({"items": [{"title": "T", "heading": "H", "path": "p.md", "score": 1,
                                    "snippet": text}]})  # fmt: skip
    assert "> • Key: `a_b` · Meaning: one" in shown.lines
    assert not any("|---|" in line for line in shown.lines)
    # Not a table: pipes stay text.
    assert table_rows("a | b | c") == [("a | b | c", [])]


def _result(cited: list[str]) -> ExecutionResult:
    checks = [{"tool_call_id": f"call-{n}", "tool": "query_logs", "status": "READY",
               "item_count": 1, "evaluation": "GAINED", "scope": f"s{n}", "error_code": None}
              for n in range(1, 5)]  # fmt: skip
    draft = {"conclusion": {"summary": "x", "confidence": "LOW",
                            "evidence_tool_call_ids": cited},
             "analysis": [], "action_plan": [], "recommendations": [],
             "limitations": {"checked_scope": [], "missing_info": []}}  # fmt: skip
    return ExecutionResult.model_validate_json(json.dumps({
        "run_id": "r", "session_id": "s", "outcome": "DRAFT", "draft": draft,
        "progress": {"checks": checks},
        "usage": {"model_calls": 1, "prompt_tokens": 1, "completion_tokens": 1, "tool_calls": 4,
                  "bytes": 1, "elapsed_ms": 1},
    }))  # fmt: skip


def test_the_view_follows_the_order_the_checks_ran() -> None:
    assert evidence_ids(_result(["call-3", "call-1", "call-4"])) == ["call-1", "call-3", "call-4"]
    checks = [EvidenceCheck(n, f"call-{n}", "query_logs", f"s{n}", {"items": []})
              for n in (3, 1, 4)]  # fmt: skip
    blocks = render_evidence("r", checks).blocks
    titles = [b["text"]["text"][:4] for b in blocks if b["type"] == "section"]
    assert titles == ["*#1*", "*#3*", "*#4*"]


def test_kept_windows_survive_the_shared_state() -> None:
    window = (datetime(2026, 11, 28, 10, 0, tzinfo=UTC), datetime(2026, 11, 28, 10, 30, tzinfo=UTC))
    check = EvidenceCheck(1, "call-1", "query_logs", "payment-api · 10:00–10:30 UTC", {"items": []})
    record = EvidenceRecord("r", "C1", "1.2", [check], windows={"call-1": window})
    loaded = EvidenceRecord.loads(record.dumps())
    assert loaded is not None and loaded.windows == {"call-1": window}
    text = render_evidence("r", loaded.checks, windows=loaded.windows).blocks[2]["text"]["text"]
    assert "<!date^1795860000^{date_short_pretty} {time}|2026-11-28 10:00 UTC>" in text
    assert "10:00–10:30 UTC" not in text
    # Anything else in the kept record's windows is dropped, never an error.
    data = json.loads(record.dumps())
    data["windows"] = {"call-1": ["x", 1], "call-2": [True, 2], "call-3": [2, 1], "c": [1]}
    again = EvidenceRecord.loads(json.dumps(data))
    assert again is not None and again.windows == {}
