"""The audit record of one run: built from the RunContext (its state and budgets), sanitised
field by field, bounded.

The record copies identity, usage, rounds and the ledger, and the result's outcome; evidence
items and model text are not copied, so nothing a backend returned can leak into it. Every
string in it is valid Unicode (a lone surrogate from argv or a model becomes a visible escape)
and bounded; ids keep a prefix and a hash of the whole when cut, so distinct ids stay distinct;
the encoded record is at most ``MAX_RECORD_BYTES``: business inputs go first, then the tails of
the round and invocation lists, and last everything but the run's identity and outcome.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from sre_diag.audit.trigger import Trigger, current_trigger
from sre_diag.contract.envelope import MAX_TOOL_CALL_ID_CHARS
from sre_diag.contract.request import format_asked_at
from sre_diag.contract.result import ExecutionResult
from sre_diag.harness.context import RunContext
from sre_diag.harness.ledger import Invocation

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_RUN_ID_CHARS",
    "MAX_SESSION_ID_CHARS",
    "audit_record",
    "bounded_id",
    "encode_record",
    "feedback_record",
    "safe_text",
]

MAX_RECORD_BYTES = 64 * 1024
MAX_FEEDBACK_REASON_CHARS = 500
_MAX_USER_ID_CHARS = 64
_VOTES = frozenset({"up", "down"})
MAX_RUN_ID_CHARS = 64  # the diag_audit column
MAX_SESSION_ID_CHARS = 255  # the diag_audit column
_MAX_TEXT_CHARS = 1000
_MAX_KEY_CHARS = 100
_MAX_ITEMS = 50
_MAX_DEPTH = 6
_MAX_INT_BITS = 64
_HASH_CHARS = 16
_HASHED_PREFIX_CHARS = 64 * 1024  # an 18 MB id is hashed by its head and its length
_CUT = "…"
_IDENTITY = (
    "kind", "recorded_at", "run_id", "session_id", "asked_at", "outcome", "stop_reason",
    "failure", "usage", "trigger",
)  # fmt: skip


def safe_text(value: str, limit: int) -> str:
    """``value`` as valid Unicode of at most ``limit`` characters (cut with a marker)."""
    head = value[: limit + 1].encode("utf-8", "backslashreplace").decode("utf-8")
    if len(head) <= limit and len(value) <= limit:
        return head
    return head[: max(limit - len(_CUT), 0)] + _CUT


def bounded_id(value: str, limit: int) -> str:
    """An id of at most ``limit`` characters; a cut or repaired one ends in a hash of the whole."""
    clean = safe_text(value, limit)
    if clean == value:
        return value
    digest = hashlib.sha256(
        value[:_HASHED_PREFIX_CHARS].encode("utf-8", "surrogatepass") + f"/{len(value)}".encode()
    ).hexdigest()[:_HASH_CHARS]
    keep = max(limit - _HASH_CHARS - 2, 0)
    return f"{clean[:keep].removesuffix(_CUT)}{_CUT}#{digest}"[:limit]


def _clean(value: Any, depth: int = 0) -> Any:
    """A JSON-safe, bounded copy of a business input (strings, numbers, lists, mappings)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return (
            value
            if value.bit_length() <= _MAX_INT_BITS
            else f"<integer of {value.bit_length()} bits>"
        )
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return safe_text(value, _MAX_TEXT_CHARS)
    if depth >= _MAX_DEPTH:
        return _CUT
    if isinstance(value, Mapping):
        return {
            safe_text(str(key), _MAX_KEY_CHARS): _clean(item, depth + 1)
            for key, item in islice(value.items(), _MAX_ITEMS)
        }
    if isinstance(value, list | tuple):
        return [_clean(item, depth + 1) for item in islice(value, _MAX_ITEMS)]
    return safe_text(type(value).__name__, _MAX_KEY_CHARS)


def _invocation(i: Invocation) -> dict[str, Any]:
    return {
        "tool_call_id": bounded_id(i.tool_call_id, MAX_TOOL_CALL_ID_CHARS),
        "run_id": bounded_id(i.run_id, MAX_RUN_ID_CHARS),
        "tool": i.tool.value,
        "status": i.status.value,
        "code": safe_text(i.code, _MAX_KEY_CHARS) if i.code is not None else None,
        "business_input": _clean(i.business_input),
        "scope": safe_text(i.scope, _MAX_TEXT_CHARS) if i.scope is not None else None,
        "item_count": i.item_count,
        "truncated": i.truncated,
        "evaluation": i.evaluation.value if i.evaluation else None,
        "started_ms": round(i.started_ms, 3),
        "duration_ms": round(i.duration_ms, 3),
        "observation_bytes": i.observation_bytes,
    }


# Session ids of runs started by ``replay`` (sre_diag.commands.replay) begin with this.
REPLAY_SESSION_PREFIX = "replay:"


def audit_record(
    ctx: RunContext, result: ExecutionResult, *, kind: str = "diagnosis"
) -> dict[str, Any]:
    """The audit record of one run: no evidence items, no model text, no credentials.

    ``kind`` is ``replay`` for every run a replay started (its session id says so).
    ``trigger`` is what started a Slack run (``mention``, ``shortcut``, ``alert``, ``replay``;
    see ``sre_diag.audit.trigger``), ``null`` for a run started outside Slack.
    """
    run = ctx.state
    cited = sorted(result.draft.cited_ids()) if result.draft else []
    trigger = current_trigger()
    if run.session_id.startswith(REPLAY_SESSION_PREFIX):
        kind = "replay"  # a replayed thread must never look like a live run
        trigger = Trigger.REPLAY
    return {
        "kind": safe_text(kind, _MAX_KEY_CHARS),
        "recorded_at": datetime.now(UTC).isoformat(),
        "run_id": bounded_id(run.run_id, MAX_RUN_ID_CHARS),
        "session_id": bounded_id(run.session_id, MAX_SESSION_ID_CHARS),
        "trigger": trigger.value if trigger is not None else None,
        "asked_at": format_asked_at(run.asked_at) if run.asked_at is not None else None,
        "outcome": result.outcome.value,
        "stop_reason": result.stop_reason.value if result.stop_reason else None,
        "failure": _clean(result.failure.model_dump(mode="json")) if result.failure else None,
        "usage": result.usage.model_dump(mode="json"),
        "usage_estimated": run.usage.usage_estimated,
        "budgets": _clean(asdict(ctx.deps.budgets)),
        "rounds": [_clean(asdict(r)) for r in run.rounds],
        "invocations": [_invocation(i) for i in run.ledger],
        "cited_tool_call_ids": [bounded_id(c, MAX_TOOL_CALL_ID_CHARS) for c in cited],
    }


def feedback_record(
    run_id: str,
    user_id: str,
    vote: str,
    *,
    reason: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """One person's vote on one answer (``kind`` ``feedback``): bounded like a run record.

    ``reason`` is the optional short text of a 👎, cut to ``MAX_FEEDBACK_REASON_CHARS``.
    """
    if vote not in _VOTES:
        raise ValueError("vote must be up or down")
    return {
        "kind": "feedback",
        "recorded_at": datetime.now(UTC).isoformat(),
        "run_id": bounded_id(run_id, MAX_RUN_ID_CHARS),
        "session_id": bounded_id(session_id or "-", MAX_SESSION_ID_CHARS),
        "user_id": bounded_id(user_id, _MAX_USER_ID_CHARS),
        "vote": vote,
        "reason": safe_text(reason, MAX_FEEDBACK_REASON_CHARS) if reason else None,
    }


def _dumps(record: Mapping[str, Any]) -> str:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a field that escaped sanitising: escape everything instead
        text = json.dumps(record, ensure_ascii=True, separators=(",", ":"))
    return text


def _fits(text: str) -> bool:
    return len(text.encode("utf-8")) <= MAX_RECORD_BYTES


def _without_inputs(record: dict[str, Any]) -> dict[str, Any]:
    invocations = [{**i, "business_input": None} for i in record.get("invocations", [])]
    return {**record, "invocations": invocations, "business_inputs_omitted": True}


def _heads(record: dict[str, Any], keep: int) -> dict[str, Any]:
    """The first ``keep`` rounds, invocations and citations, with counts of what was left out."""
    shorter = dict(record)
    for key in ("rounds", "invocations", "cited_tool_call_ids"):
        items = record.get(key, [])
        shorter[key] = items[:keep]
        if len(items) > keep:
            shorter[f"{key}_omitted"] = len(items) - keep
    return shorter


def encode_record(record: dict[str, Any]) -> str:
    """One JSON line (no newline) of at most ``MAX_RECORD_BYTES`` UTF-8 bytes."""
    text = _dumps(record)
    if _fits(text):
        return text
    lighter = _without_inputs(record)
    keep = max(len(lighter.get("rounds", [])), len(lighter.get("invocations", [])), 1)
    while keep >= 1:
        text = _dumps(_heads(lighter, keep))
        if _fits(text):
            return text
        keep //= 2
    minimal = {key: record.get(key) for key in _IDENTITY}
    return _dumps({**minimal, "record_truncated": True})
