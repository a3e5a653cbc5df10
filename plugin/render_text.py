"""A plain-text rendering of an Execution Result, for the terminal (demo, replay)."""

from __future__ import annotations

from plugin.draft import CitedEvidence, DiagnosisDraft
from plugin.errors import StopReason
from plugin.result import Check, ExecutionResult, Outcome

__all__ = ["STOP_EXPLANATIONS", "check_label", "render_text"]

STOP_EXPLANATIONS = {
    StopReason.INFORMATION_SATURATED: (
        "Stopped: further checks were not adding information, and the model did not write "
        "its final answer when asked to."
    ),
    StopReason.MODEL_CALL_BUDGET_EXHAUSTED: "Stopped: the run used all of its model rounds.",
    StopReason.TOKEN_BUDGET_EXHAUSTED: "Stopped: the run used all of its token budget.",
    StopReason.DEADLINE_EXCEEDED: "Stopped: the run reached its time limit.",
    StopReason.CANCELLED: "Stopped: the run was cancelled.",
}


def check_label(check: Check) -> str:
    """``query_logs · payment-api · ERROR · 10:00–10:30 UTC`` style label of a check."""
    scope = f" · {check.scope}" if check.scope else ""
    return f"{check.tool}{scope}"


def render_text(result: ExecutionResult) -> str:
    lines = [f"Diagnosis {result.run_id} (session {result.session_id}): {result.outcome.value}"]
    checks = {c.tool_call_id: c for c in (result.progress.checks if result.progress else ())}
    if result.outcome is Outcome.DRAFT and result.draft is not None:
        lines += _draft_lines(result.draft, checks)
    elif result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        lines.append(STOP_EXPLANATIONS[result.stop_reason])
    elif result.failure is not None:
        lines.append(
            f"Failed closed ({result.failure.code.value}: {result.failure.detail}); "
            "no diagnosis was produced."
        )
    lines += _checks_lines(checks)
    u = result.usage
    lines.append(
        f"Usage: {u.model_calls} model calls, {u.prompt_tokens}+{u.completion_tokens} tokens, "
        f"{u.tool_calls} tool calls, {u.bytes} bytes, {u.elapsed_ms} ms"
    )
    return "\n".join(lines)


def _cite(ids: tuple[str, ...], checks: dict[str, Check]) -> str:
    return "; ".join(f"{i} {check_label(checks[i])}" if i in checks else i for i in ids)


def _draft_lines(draft: DiagnosisDraft, checks: dict[str, Check]) -> list[str]:
    lines: list[str] = []
    if draft.conclusion is None:
        lines.append("No confirmed conclusion.")
    else:
        c = draft.conclusion
        lines.append(f"Conclusion [{c.confidence.value}]: {c.summary}")
        lines.append(f"  evidence: {_cite(c.evidence_tool_call_ids, checks)}")
    if draft.analysis:
        lines.append("Analysis:")
    for n, item in enumerate(draft.analysis, 1):
        lines.append(f"  {n}. [{item.kind}] {item.statement}")
        if isinstance(item.evidence, CitedEvidence):
            lines.append(f"     evidence: {_cite(item.evidence.tool_call_ids, checks)}")
        else:
            lines.append(f"     no evidence found in: {item.evidence.scope}")
    for title, items in (
        ("Action plan", draft.action_plan),
        ("Recommendations", draft.recommendations),
        ("Checked", draft.limitations.checked_scope),
        ("Still missing", draft.limitations.missing_info),
    ):
        if items:
            lines.append(f"{title}:")
            lines += [f"  - {text}" for text in items]
    return lines


def _checks_lines(checks: dict[str, Check]) -> list[str]:
    if not checks:
        return ["Checks: none"]
    lines = ["Checks:"]
    for check in checks.values():
        detail = check.error_code or f"{check.item_count} items"
        evaluation = f", {check.evaluation}" if check.evaluation else ""
        lines.append(
            f"  {check.tool_call_id}: {check_label(check)} → {check.status} ({detail}{evaluation})"
        )
    return lines
