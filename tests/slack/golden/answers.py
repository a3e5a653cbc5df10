"""Six canonical answers, built the same way every time: what the golden renderings are made of.

Each :class:`Canonical` is one answer as the thread shows it — the Execution Result with its
extras (log windows, when it was asked, the buttons), the Evidence view a click on its button
posts (when it has one), and any message posted before it in the thread (an alert's pointer).
The HIGH Draft is the bundled demo incident: the recorded model's final Draft
(``examples/incident/cassettes/with-mysql.json``) over checks and observations shaped like the
bundled logs, runbooks and database return them.

``python -m tests.slack.golden.answers`` rewrites the golden files (review the diff).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sre_diag.contract.draft import DiagnosisDraft
from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import EvidenceCheck
from sre_diag.slack.blocks import SlackMessage, blocks_text, render_evidence
from sre_diag.slack.messages import cooldown_pointer
from sre_diag.slack.render import AnswerExtras, render_result

__all__ = ["CANONICAL", "GOLDEN", "Canonical", "posts_of", "rendered"]

GOLDEN = Path(__file__).resolve().parent
REPO = GOLDEN.parents[2]
CASSETTE = REPO / "examples/incident/cassettes/with-mysql.json"
ASKED = datetime(2026, 11, 28, 10, 6, tzinfo=UTC)
WINDOW = (datetime(2026, 11, 28, 10, 0, tzinfo=UTC), datetime(2026, 11, 28, 10, 30, tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class Canonical:
    """One canonical answer and what surrounds it in its thread."""

    name: str
    title: str
    result: ExecutionResult
    extras: AnswerExtras
    evidence: list[EvidenceCheck] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    """Messages posted after the answer because of it (a repeated alert's pointer, mrkdwn)."""

    def answer(self) -> SlackMessage:
        return render_result(self.result, extras=self.extras)

    def evidence_view(self) -> SlackMessage | None:
        if not self.evidence:
            return None
        return render_evidence(self.result.run_id, self.evidence, windows=self.extras.windows)


def _check(
    call_id: str, tool: str, scope: str, items: int, status: str = "READY", error: str | None = None
) -> dict[str, Any]:
    return {"tool_call_id": call_id, "tool": tool, "status": status, "item_count": items,
            "evaluation": "GAINED" if status == "READY" else None, "scope": scope,
            "error_code": error}  # fmt: skip


_DEMO_USAGE = {"model_calls": 6, "prompt_tokens": 26990, "completion_tokens": 1401,
               "tool_calls": 5, "bytes": 18211, "elapsed_ms": 9412}  # fmt: skip


def _result(outcome: str, checks: list[dict[str, Any]], **extra: Any) -> ExecutionResult:
    draft = extra.pop("draft", None)
    data: dict[str, Any] = {
        "run_id": extra.pop("run_id", "r-7c1e9a40"),
        "session_id": "C0ADMIN01:1795860360.000100",
        "outcome": outcome,
        "draft": None if draft is None else DiagnosisDraft.model_validate_json(json.dumps(draft)),
        "progress": {"checks": checks} if checks else None,
        "usage": extra.pop("usage", _DEMO_USAGE | {"tool_calls": len(checks)}),
        **extra,
    }
    return ExecutionResult.model_validate(data)


# --------------------------------------------------------------------------- evidence


def _log(ts: str, message: str, service: str = "payment-api") -> dict[str, str]:
    return {"ts": ts, "service": service, "level": "ERROR", "message": message}


_POOL = "db pool exhausted: timed out after 3000ms waiting for connection (pool max_size=10, "


def _payment_logs() -> dict[str, Any]:
    latest = [
        _log(f"2026-11-28T10:29:{s:02d}.{ms:03d}Z", _POOL + f"in_use=10, waiting={w})")
        if n % 3 else _log(f"2026-11-28T10:29:{s:02d}.{ms:03d}Z",
                           f"POST /v1/payments 503 in 30{n}8ms order=ord_10{300 + n}")
        for n, (s, ms, w) in enumerate(zip(range(43, 60, 2), range(120, 999, 97), range(18, 40, 3),
                                           strict=False))
    ]  # fmt: skip
    return {
        "tool_call_id": "call_logs_pay", "tool": "query_logs", "evidence_status": "READY",
        "summary": {
            "matched": 1167, "exact": True,
            "first_ts": "2026-11-28T10:05:00.226Z", "last_ts": "2026-11-28T10:29:59.951Z",
            "buckets": {"start": "2026-11-28T10:00:00Z", "width_seconds": 60,
                        "counts": [0, 0, 0, 0, 0, 41, 52, 47, 49, 50, 44, 51, 48, 46, 49, 52, 47,
                                   50, 45, 48, 51, 46, 49, 47, 50, 44, 52, 48, 46, 37]},
            "top_messages": [
                {"pattern": "db pool exhausted: timed out after <*>ms waiting for connection "
                            "(pool max_size=<*>, in_use=<*>, waiting=<*>)", "count": 902,
                 "first_ts": "2026-11-28T10:05:00.226Z", "last_ts": "2026-11-28T10:29:59.951Z"},
                {"pattern": "POST /v1/payments 503 in <*>ms order=<*>", "count": 265,
                 "first_ts": "2026-11-28T10:05:01.123Z", "last_ts": "2026-11-28T10:29:58.410Z"},
            ],
        },
        "first_items": [
            _log("2026-11-28T10:05:00.226Z", _POOL + "in_use=10, waiting=19)"),
            _log("2026-11-28T10:05:01.123Z", "POST /v1/payments 503 in 3078ms order=ord_10231"),
            _log("2026-11-28T10:05:03.272Z", _POOL + "in_use=10, waiting=33)"),
        ],
        "items": latest,
        "item_count": len(latest), "truncated": True,
    }  # fmt: skip


def _runbooks() -> dict[str, Any]:
    table = (
        "先看日志关键字： | 日志关键字 | 指向 | |---|---| | `db pool exhausted` / `timed out "
        "waiting for connection` | 数据库连接池耗尽，见《DB connection pool exhaustion》 | "
        "| `slow query` | 慢查询长时间占用连接 | | `psp timeout` / `stripe request failed` | "
        "第三方支付超时，见《第三方支付超时排查》 |"
    )
    return {
        "tool_call_id": "call_kb_pool", "tool": "lookup_knowledge", "evidence_status": "READY",
        "items": [
            {"title": "DB connection pool exhaustion", "heading": "Symptoms",
             "path": "db-connection-pool.en.md", "score": 0.82,
             "snippet": "Requests fail with `db pool exhausted` or `timed out waiting for "
                        "connection` while the database itself is healthy: the client pool "
                        "(max_size) is smaller than peak concurrency. Compare the pool size "
                        "with the last deploy's config; DB_POOL_TIMEOUT in payments confirms."},
            {"title": "payment-api 排障手册", "heading": "错误分类", "path": "payment-api.zh.md",
             "score": 0.74, "snippet": table},
        ],
        "item_count": 2, "truncated": False,
    }  # fmt: skip


def _rows(call_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tool_call_id": call_id, "tool": "query_mysql", "evidence_status": "READY",
            "items": [{"cells": r} for r in rows], "item_count": len(rows),
            "truncated": False}  # fmt: skip


def _deploys() -> dict[str, Any]:
    return _rows("call_sql_deploys", [
        {"service": "order-service", "version": "v5.2.0", "deployed_at": "2026-11-28 08:30:00",
         "change_summary": "add order tags; bump http client timeout 2s -> 3s"},
        {"service": "checkout-web", "version": "v3.8.1", "deployed_at": "2026-11-28 09:10:00",
         "change_summary": "new address autocomplete widget"},
        {"service": "payment-api", "version": "v2.14.0", "deployed_at": "2026-11-28 10:02:00",
         "change_summary": "reduce DB pool max_size 50 -> 10; add payment reconciliation query"},
    ])  # fmt: skip


def _failures() -> dict[str, Any]:
    return _rows("call_sql_failures", [
        {"error_code": "DB_POOL_TIMEOUT", "payments": 1042},
        {"error_code": None, "payments": 311},
        {"error_code": "CARD_DECLINED", "payments": 9},
    ])  # fmt: skip


# --------------------------------------------------------------------------- the six answers

_SCOPE_PAY = "payment-api · ERROR · 10:00–10:30 UTC"
_DEMO_CHECKS = [
    _check("call_logs_pay", "query_logs", _SCOPE_PAY, 8),
    _check("call_kb_pool", "lookup_knowledge", "payment-api 5xx db pool exhausted 连接池耗尽", 2),
    _check("call_sql_deploys", "query_mysql", "deployments around the incident window", 3),
    _check("call_sql_failures", "query_mysql", "payment outcomes 10:00-10:30 by error code", 3),
    _check("call_logs_psp", "query_logs", "stripe-gateway · ERROR · 10:00–10:30 UTC", 0),
]
_EXTRAS = AnswerExtras(
    windows={"call_logs_pay": WINDOW, "call_logs_psp": WINDOW}, asked_at=ASKED, evidence=True
)


def _demo_draft() -> dict[str, Any]:
    recorded = json.loads(CASSETTE.read_text(encoding="utf-8"))
    draft: dict[str, Any] = json.loads(recorded["steps"][-1]["content"])
    return draft


def _evidence(result: ExecutionResult, observations: list[dict[str, Any]]) -> list[EvidenceCheck]:
    checks = result.progress.checks if result.progress else ()
    numbers = {c.tool_call_id: (n, c) for n, c in enumerate(checks, 1)}
    kept = []
    for observation in observations:
        n, check = numbers[observation["tool_call_id"]]
        kept.append(EvidenceCheck(n, check.tool_call_id, check.tool, check.scope, observation))
    return kept


def _high() -> Canonical:
    result = _result("DRAFT", _DEMO_CHECKS, draft=_demo_draft())
    # The Evidence view receives them in citation order; it shows them in check order.
    seen = [_failures(), _deploys(), _payment_logs(), _runbooks()]
    return Canonical("high-draft", "A HIGH-confidence Draft (the demo incident)", result,
                     _EXTRAS, _evidence(result, seen))  # fmt: skip


def _no_conclusion() -> Canonical:
    checks = [
        _check("call_logs_web", "query_logs", "checkout-web · WARN · 09:30–10:30 UTC", 0),
        _check("call_sql_deploys", "query_mysql", "checkout-web deployments today", 1),
    ]
    draft = {
        "conclusion": None,
        "analysis": [
            {"kind": "NEGATIVE_OBSERVATION",
             "statement": "No WARN or ERROR lines from checkout-web between 09:30 and 10:30.",
             "evidence": {"status": "CITED", "tool_call_ids": ["call_logs_web"]}},
            {"kind": "FINDING",
             "statement": "checkout-web v3.8.1 (new address autocomplete widget) went out at "
                          "09:10, before the slowness was reported.",
             "evidence": {"status": "CITED", "tool_call_ids": ["call_sql_deploys"]}},
        ],
        "action_plan": ["Check the browser-side timings (RUM) for the checkout page."],
        "recommendations": [],
        "limitations": {"checked_scope": ["checkout-web logs", "deployments"],
                        "missing_info": ["Front-end (RUM) timings for /checkout are not in any "
                                         "source I can read.",
                                         "Which customers or regions see the slowness."]},
    }  # fmt: skip
    result = _result("DRAFT", checks, draft=draft, run_id="r-0b5d2e11")
    window = (datetime(2026, 11, 28, 9, 30, tzinfo=UTC), WINDOW[1])
    extras = AnswerExtras(windows={"call_logs_web": window}, asked_at=ASKED, evidence=True)
    web = {"tool_call_id": "call_logs_web", "tool": "query_logs", "evidence_status": "READY",
           "summary": {"matched": 0, "exact": True, "first_ts": None, "last_ts": None,
                       "buckets": {"start": "2026-11-28T09:30:00Z", "width_seconds": 60,
                                   "counts": [0] * 60}, "top_messages": []},
           "items": [], "item_count": 0, "truncated": False}  # fmt: skip
    deploy = _rows("call_sql_deploys", [_deploys()["items"][1]["cells"]])
    evidence = _evidence(result, [web, deploy])
    return Canonical("no-conclusion", "A Draft without a conclusion", result, extras, evidence)


def _stopped() -> Canonical:
    checks = [
        _check("call_logs_pay", "query_logs", _SCOPE_PAY, 9),
        _check("call_logs_ord", "query_logs", "order-service · ERROR · 10:00–10:30 UTC", 0,
               status="ERROR", error="TIMEOUT"),
        _check("call_sql_pending", "query_mysql", "orders stuck in PAYMENT_PENDING", 7),
    ]  # fmt: skip
    result = _result("STOPPED", checks, stop_reason="DEADLINE_EXCEEDED", run_id="r-51aa07c3",
                     usage={"model_calls": 4, "prompt_tokens": 14022, "completion_tokens": 388,
                            "tool_calls": 3, "bytes": 9120, "elapsed_ms": 120004})  # fmt: skip
    extras = AnswerExtras(
        windows={"call_logs_pay": WINDOW, "call_logs_ord": WINDOW}, asked_at=ASKED, evidence=True
    )
    pending = _rows("call_sql_pending", [
        {"order_id": f"ord_10{n}", "status": "PAYMENT_PENDING", "amount_cents": 1000 + n * 7}
        for n in (231, 232, 245, 251, 260, 264, 270)
    ])  # fmt: skip
    evidence = _evidence(result, [_payment_logs(), pending])
    return Canonical("stopped", "A controlled stop (time limit)", result, extras, evidence)


def _failed() -> Canonical:
    checks = [_check("call_logs_pay", "query_logs", _SCOPE_PAY, 9)]
    result = _result("FAILED", checks, failure={"code": "INVALID_DRAFT",
                                                "detail": "UNKNOWN_CITATION"},
                     run_id="r-e2f4c9d0",
                     usage={"model_calls": 2, "prompt_tokens": 6390, "completion_tokens": 512,
                            "tool_calls": 1, "bytes": 5201, "elapsed_ms": 4630})  # fmt: skip
    extras = AnswerExtras(windows={"call_logs_pay": WINDOW}, asked_at=ASKED, evidence=True)
    evidence = _evidence(result, [_payment_logs()])
    return Canonical("failed", "A failure (the model's answer cited an unknown check)", result,
                     extras, evidence)  # fmt: skip


def _alert() -> Canonical:
    """The answer in the first alert's thread; a repeat of the alert within the cooldown gets
    one pointer to it instead of a run."""
    result = _result("DRAFT", _DEMO_CHECKS, draft=_demo_draft(), run_id="r-a1e7f300")
    seen = [_payment_logs(), _runbooks(), _deploys(), _failures()]
    pointer = cooldown_pointer("1795860360.000100", None, 900)
    return Canonical("alert", "An alert-started run, and the pointer a repeat of it gets",
                     result, _EXTRAS, _evidence(result, seen), after=[pointer])  # fmt: skip


def _follow_up() -> Canonical:
    checks = [
        _check("call_sql_pending", "query_mysql", "orders left unpaid since 10:05", 3),
        _check("call_logs_pay", "query_logs", "payment-api · “ord_10245” · 10:00–10:30 UTC", 2),
    ]
    draft = {
        "conclusion": {
            "summary": "Three orders are still PAYMENT_PENDING (ord_10231, ord_10232, "
                       "ord_10245); each got a 503 from POST /v1/payments during the pool "
                       "exhaustion and was never retried.",
            "confidence": "MEDIUM", "evidence_tool_call_ids": ["call_sql_pending",
                                                               "call_logs_pay"]},
        "analysis": [
            {"kind": "FINDING",
             "statement": "ord_10245 failed at 10:07:12 with 'POST /v1/payments 503 in 3012ms'.",
             "evidence": {"status": "CITED", "tool_call_ids": ["call_logs_pay"]}},
        ],
        "action_plan": ["Re-drive the three payments after the rollback (payments.redrive "
                        "--order ord_10231 --order ord_10232 --order ord_10245)."],
        "recommendations": [],
        "limitations": {"checked_scope": ["orders in PAYMENT_PENDING"],
                        "missing_info": ["Whether the customers retried by hand."]},
    }  # fmt: skip
    result = _result("DRAFT", checks, draft=draft, run_id="r-3f88d1b2",
                     usage={"model_calls": 3, "prompt_tokens": 8120, "completion_tokens": 402,
                            "tool_calls": 2, "bytes": 4410, "elapsed_ms": 5120})  # fmt: skip
    extras = AnswerExtras(
        windows={"call_logs_pay": WINDOW},
        asked_at=datetime(2026, 11, 28, 10, 52, tzinfo=UTC),
        evidence=True,
    )
    rows = _rows("call_sql_pending", [
        {"order_id": o, "status": "PAYMENT_PENDING", "updated_at": t}
        for o, t in (("ord_10231", "2026-11-28 10:05:01"), ("ord_10232", "2026-11-28 10:05:04"),
                     ("ord_10245", "2026-11-28 10:07:12"))
    ])  # fmt: skip
    logs = {"tool_call_id": "call_logs_pay", "tool": "query_logs", "evidence_status": "READY",
            "summary": {"matched": 2, "exact": True, "first_ts": "2026-11-28T10:07:12.004Z",
                        "last_ts": "2026-11-28T10:07:12.019Z",
                        "buckets": {"start": "2026-11-28T10:00:00Z", "width_seconds": 60,
                                    "counts": [0] * 7 + [2] + [0] * 22},
                        "top_messages": []},
            "first_items": [_log("2026-11-28T10:07:12.004Z",
                                 "POST /v1/payments 503 in 3012ms order=ord_10245")],
            "items": [_log("2026-11-28T10:07:12.004Z",
                           "POST /v1/payments 503 in 3012ms order=ord_10245"),
                      _log("2026-11-28T10:07:12.019Z",
                           _POOL + "in_use=10, waiting=27) order=ord_10245")],
            "item_count": 2, "truncated": False}  # fmt: skip
    evidence = _evidence(result, [logs, rows])
    return Canonical("follow-up", "A follow-up in the same thread", result, extras, evidence)


CANONICAL: dict[str, Canonical] = {
    c.name: c for c in (_high(), _no_conclusion(), _stopped(), _failed(), _alert(), _follow_up())
}


# --------------------------------------------------------------------------- golden files


def posts_of(canonical: Canonical) -> list[dict[str, Any]]:
    """What the thread gets, in order: the answer, its Evidence view (a click on the button
    posts it), then what follows because of it; each ``text`` and (but a plain message)
    ``blocks``."""
    answer = canonical.answer()
    evidence = canonical.evidence_view()
    posts: list[dict[str, Any]] = [{"text": answer.text, "blocks": list(answer.blocks)}]
    if evidence is not None:
        posts.append({"text": evidence.text, "blocks": list(evidence.blocks)})
    posts += [{"text": t} for t in canonical.after]
    return posts


def rendered(canonical: Canonical) -> dict[str, str]:
    """The golden files of one answer: its Block Kit JSON and the text ``replay`` prints."""
    posts = posts_of(canonical)
    text = [p["text"] if "blocks" not in p else blocks_text(p["blocks"]) for p in posts]
    return {
        f"{canonical.name}.json": json.dumps(posts, ensure_ascii=False, indent=1) + "\n",
        f"{canonical.name}.txt": "\n\n".join(text) + "\n",
    }


def main() -> int:
    for canonical in CANONICAL.values():
        for name, content in rendered(canonical).items():
            (GOLDEN / name).write_text(content, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
