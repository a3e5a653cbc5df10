"""``eval`` scoring: the criteria of :class:`~sre_diag.commands.eval.cases.Expect` a run's result
fails (case-insensitive on ``conclusion.summary``; absent keys are not scored)."""

from __future__ import annotations

from sre_diag.commands.eval.cases import Expect
from sre_diag.contract.result import ExecutionResult, Outcome

__all__ = [
    "score",
]


def _cited_tools(result: ExecutionResult) -> set[str]:
    """Tools with a READY check cited by the conclusion or by a FINDING."""
    draft = result.draft
    if draft is None:
        return set()
    cited: set[str] = set()
    if draft.conclusion is not None:
        cited.update(draft.conclusion.evidence_tool_call_ids)
    for item in draft.analysis:
        if item.kind == "FINDING" and item.evidence.status == "CITED":
            cited.update(item.evidence.tool_call_ids)
    checks = result.progress.checks if result.progress is not None else ()
    return {c.tool for c in checks if c.status == "READY" and c.tool_call_id in cited}


def _summary(result: ExecutionResult) -> str | None:
    draft = result.draft
    if draft is None or draft.conclusion is None:
        return None
    return draft.conclusion.summary.casefold()


def _shape_criteria(expect: Expect, result: ExecutionResult) -> list[str]:
    failed: list[str] = []
    if result.outcome is Outcome.FAILED:
        detail = result.failure.detail if result.failure is not None else "?"
        failed.append(f"failure:{detail}")
    if expect.outcome not in (None, "ANY") and result.outcome.value != expect.outcome:
        failed.append(f"outcome:{expect.outcome}")
    has_conclusion = _summary(result) is not None
    if expect.conclusion == "REQUIRED" and not has_conclusion:
        failed.append("conclusion:REQUIRED")
    if expect.conclusion == "NULL" and (has_conclusion or result.draft is None):
        failed.append("conclusion:NULL")
    if expect.max_tool_calls is not None and result.usage.tool_calls > expect.max_tool_calls:
        failed.append(f"max_tool_calls:{expect.max_tool_calls}")
    return failed


def _text_criteria(expect: Expect, summary: str | None) -> list[str]:
    text = summary or ""
    failed: list[str] = []
    if expect.root_cause_any and not any(p.casefold() in text for p in expect.root_cause_any):
        failed.append("root_cause_any")
    for phrase in expect.root_cause_all or ():
        if summary is None or phrase.casefold() not in text:
            failed.append(f"root_cause_all:{phrase}")
    failed.extend(
        f"must_not_mention:{p}" for p in expect.must_not_mention or () if p.casefold() in text
    )
    return failed


def score(expect: Expect, result: ExecutionResult) -> list[str]:
    """The failed criteria of one run (empty: passed)."""
    failed = _shape_criteria(expect, result) + _text_criteria(expect, _summary(result))
    cited = _cited_tools(result)
    failed.extend(f"must_cite_tools:{t}" for t in expect.must_cite_tools or () if t not in cited)
    return failed


# --- one run ----------------------------------------------------------------------------------
