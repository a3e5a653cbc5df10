"""The observation the model sees after each tool request (CONTRACTS §4): one bounded JSON object.

Only whitelisted item projections, stable codes and one-line hints leave this module. Nothing
about counters, thresholds or remaining budget is ever said.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from sre_diag.contract.prompts import FIELD_SLOT, prompt_set

__all__ = [
    "ID_MISSING",
    "ID_REUSED",
    "ID_TOO_LONG",
    "EvidenceStatus",
    "Hints",
    "RejectCode",
    "error_observation",
    "ready_observation",
    "rejected_observation",
    "rejection_bound",
    "stop_required_bound",
    "stop_required_observation",
]


Hints = Mapping[str, str]
"""One line per code (``RejectCode`` values, ``NOTHING_PENDING``, ``STOP_REQUIRED``), read from
``prompts/hints.<lang>.md`` (:mod:`sre_diag.contract.prompts`); the default is the ``zh`` set."""


def _hints(hints: Hints | None) -> Hints:
    return hints if hints is not None else prompt_set().hints


class EvidenceStatus(StrEnum):
    """The four observation kinds."""

    READY = "READY"
    ERROR = "ERROR"
    REJECTED = "REJECTED"
    STOP_REQUIRED = "STOP_REQUIRED"


class RejectCode(StrEnum):
    """Why the harness did not run the adapter."""

    INVALID_ENVELOPE = "INVALID_ENVELOPE"
    PREVIOUS_OBSERVATION_REQUIRED = "PREVIOUS_OBSERVATION_REQUIRED"
    PREVIOUS_OBSERVATION_MISMATCH = "PREVIOUS_OBSERVATION_MISMATCH"
    DUPLICATE_CALL = "DUPLICATE_CALL"
    ONE_TOOL_PER_ROUND = "ONE_TOOL_PER_ROUND"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"


# The ``field`` of an INVALID_ENVELOPE that is about the tool call id itself.
ID_MISSING = "tool_call_id missing"
ID_REUSED = "tool_call_id reused"
ID_TOO_LONG = "tool_call_id too long"

# Content fields that echo what the model sent are cut to these many characters.
_ID_CHARS = 128
_TOOL_CHARS = 64
_FIELD_CHARS = 80


def _dump(observation: dict[str, Any]) -> str:
    text = json.dumps(observation, ensure_ascii=False, separators=(",", ":"))
    # Evidence may decode to text that is not valid Unicode (a log line's escaped lone
    # surrogate): it becomes "?" so the observation stays encodable UTF-8 and one JSON object.
    return text.encode("utf-8", "replace").decode("utf-8")


def _head(tool_call_id: str, tool: str, status: EvidenceStatus) -> dict[str, Any]:
    return {
        "tool_call_id": tool_call_id[:_ID_CHARS],
        "tool": tool[:_TOOL_CHARS],
        "evidence_status": status.value,
    }


# Cut first what matters least to the model; the status and the code are never cut.
_CUTTABLE = ("hint", "expected_previous_tool_call_id", "tool_call_id", "tool")


def _fit(observation: dict[str, Any], max_bytes: int | None) -> str:
    """The observation as text of at most ``max_bytes`` UTF-8 bytes.

    Only the echoed strings (hint, ids, tool name) are cut, in that order; with the smallest
    allowed observation limit (256 bytes) the fixed part always fits.
    """
    text = _dump(observation)
    if max_bytes is None:
        return text
    for key in _CUTTABLE:
        if len(text.encode("utf-8")) <= max_bytes:
            break
        value = observation.get(key)
        if not isinstance(value, str):
            continue
        excess = len(text.encode("utf-8")) - max_bytes
        while value and excess > 0:
            # At least one character per step; an escaped character can cost up to 6 bytes.
            value = value[: max(len(value) - max(excess // 6, 1), 0)]
            observation[key] = value
            text = _dump(observation)
            excess = len(text.encode("utf-8")) - max_bytes
    return text


def ready_observation(
    tool_call_id: str,
    tool: str,
    items: Sequence[BaseModel],
    *,
    truncated: bool,
    max_bytes: int,
    summary: BaseModel | None = None,
    first_items: Sequence[BaseModel] = (),
) -> tuple[str, int, bool]:
    """The READY observation, trimmed item by item until it fits ``max_bytes``.

    Items come newest (or most relevant) first, so the last ones are cut first. A ``summary``
    (``query_logs``) is placed before the items and is never cut for them: items make room for
    it. ``first_items`` (``query_logs``: the oldest matches, oldest first) follow the items,
    within the same bound: the longer of the two lists loses its last entry first (the items
    on a tie, the first items: the items are never fewer). Only when neither is left
    and it still does not fit (an observation bound far below the default) are the summary's
    least frequent ``top_messages`` dropped, and at last the summary.

    Returns the text, the number of items it carries and whether anything was left out.
    """
    dumped = [item.model_dump(mode="json") for item in items]
    firsts = [item.model_dump(mode="json") for item in first_items]
    whole = summary.model_dump(mode="json") if summary is not None else None
    count, first = len(dumped), len(firsts)
    while True:
        left_out = truncated or count < len(dumped) or first < len(firsts)
        shown = firsts[:first] if firsts else None
        observation = _ready(tool_call_id, tool, whole, dumped[:count], left_out, shown)
        text = _dump(observation)
        if len(text.encode("utf-8")) <= max_bytes:
            return text, count, left_out
        if count == 0 and first == 0:
            return _fit(_shrink_summary(observation, whole, max_bytes), max_bytes), 0, left_out
        if count > first:
            count -= 1
        else:
            first -= 1


def _ready(
    tool_call_id: str,
    tool: str,
    summary: dict[str, Any] | None,
    items: list[dict[str, Any]],
    left_out: bool,
    first_items: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    observation = _head(tool_call_id, tool, EvidenceStatus.READY)
    if summary is not None:
        observation["summary"] = summary
    observation.update(item_count=len(items), items=items)
    if first_items is not None:
        observation["first_items"] = first_items
    observation["truncated"] = left_out
    return observation


def _shrink_summary(
    observation: dict[str, Any], summary: dict[str, Any] | None, max_bytes: int
) -> dict[str, Any]:
    """Without items and still over ``max_bytes``: drop the summary's least frequent top
    messages one by one, then the summary itself."""
    if summary is None:
        return observation
    top = list(summary.get("top_messages", []))
    while top:
        top.pop()
        observation["summary"] = {**summary, "top_messages": top}
        if len(_dump(observation).encode("utf-8")) <= max_bytes:
            return observation
    del observation["summary"]
    return observation


def error_observation(
    tool_call_id: str, tool: str, code: str, *, max_bytes: int | None = None
) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.ERROR)
    observation["error_code"] = code
    return _fit(observation, max_bytes)


def rejected_observation(
    tool_call_id: str,
    tool: str,
    code: RejectCode,
    *,
    expected_previous_tool_call_id: str | None = None,
    field: str = "arguments",
    hint: str | None = None,
    max_bytes: int | None = None,
    hints: Hints | None = None,
) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.REJECTED)
    observation["error_code"] = code.value
    if expected_previous_tool_call_id is not None:
        observation["expected_previous_tool_call_id"] = expected_previous_tool_call_id[:_ID_CHARS]
    template = _hints(hints)[code.value]
    observation["hint"] = hint or template.replace(FIELD_SLOT, field[:_FIELD_CHARS])
    return _fit(observation, max_bytes)


def stop_required_observation(
    tool_call_id: str, tool: str, *, max_bytes: int | None = None, hints: Hints | None = None
) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.STOP_REQUIRED)
    observation["hint"] = _hints(hints)["STOP_REQUIRED"]
    return _fit(observation, max_bytes)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


# Every character echoed as a JSON escape (``\u0001``) is the worst case for the byte size.
_WORST_ID = "\x01" * _ID_CHARS
_WORST_TOOL = "\x01" * _TOOL_CHARS


def stop_required_bound(max_bytes: int, hints: Hints | None = None) -> int:
    """The most bytes any STOP_REQUIRED observation can take, whatever id and tool it echoes."""
    return _size(
        stop_required_observation(_WORST_ID, _WORST_TOOL, max_bytes=max_bytes, hints=hints)
    )


def rejection_bound(
    tool_call_id: str, tool: str, max_bytes: int, hints: Hints | None = None
) -> int:
    """The most bytes a request that is not the first of its round can be answered with.

    Such a request never runs: it is answered ONE_TOOL_PER_ROUND, UNKNOWN_TOOL or
    INVALID_ENVELOPE (reused, missing or over-long id).
    """
    return max(
        _size(
            rejected_observation(
                tool_call_id, tool, code, field=field, max_bytes=max_bytes, hints=hints
            )
        )
        for code, field in (
            (RejectCode.ONE_TOOL_PER_ROUND, "arguments"),
            (RejectCode.UNKNOWN_TOOL, "arguments"),
            (RejectCode.INVALID_ENVELOPE, ID_TOO_LONG),
        )
    )
