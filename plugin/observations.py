"""The observation the model sees after each tool request (CONTRACTS §4): one bounded JSON object.

Only whitelisted item projections, stable codes and one-line hints leave this module. Nothing
about counters, thresholds or remaining budget is ever said.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

__all__ = [
    "EvidenceStatus",
    "RejectCode",
    "error_observation",
    "ready_observation",
    "rejected_observation",
    "stop_required_observation",
]


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


_HINTS = {
    RejectCode.INVALID_ENVELOPE: (
        'arguments must be one JSON object {"previous_observation"?, "input"} matching the '
        "tool schema; problem at: {field}"
    ),
    RejectCode.PREVIOUS_OBSERVATION_REQUIRED: (
        "evaluate the previous result first: set previous_observation.tool_call_id to "
        "expected_previous_tool_call_id and evaluation to GAINED or NO_GAIN"
    ),
    RejectCode.PREVIOUS_OBSERVATION_MISMATCH: (
        "previous_observation must name expected_previous_tool_call_id with GAINED or NO_GAIN"
    ),
    RejectCode.DUPLICATE_CALL: (
        "an equivalent request already ran in this run; use its result or ask something new"
    ),
    RejectCode.ONE_TOOL_PER_ROUND: (
        "only the first tool call of a round is handled; ask again later only if still needed"
    ),
    RejectCode.UNKNOWN_TOOL: "available tools: lookup_knowledge, query_logs, query_mysql",
}

STOP_HINT = (
    "evidence collection is over: reply now with the final DiagnosisDraft JSON object only, "
    "citing READY tool_call_ids, with no further tool call"
)


def _dump(observation: dict[str, Any]) -> str:
    text = json.dumps(observation, ensure_ascii=False, separators=(",", ":"))
    # Evidence may decode to text that is not valid Unicode (a log line's escaped lone
    # surrogate): it becomes "?" so the observation stays encodable UTF-8 and one JSON object.
    return text.encode("utf-8", "replace").decode("utf-8")


def _head(tool_call_id: str, tool: str, status: EvidenceStatus) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "tool": tool[:64], "evidence_status": status.value}


def ready_observation(
    tool_call_id: str,
    tool: str,
    items: Sequence[BaseModel],
    *,
    truncated: bool,
    max_bytes: int,
) -> tuple[str, int, bool]:
    """The READY observation, trimmed item by item until it fits ``max_bytes``.

    Returns the text, the number of items it carries and whether anything was left out.
    """
    dumped = [item.model_dump(mode="json") for item in items]
    count = len(dumped)
    while True:
        left_out = truncated or count < len(dumped)
        observation = _head(tool_call_id, tool, EvidenceStatus.READY)
        observation.update(item_count=count, items=dumped[:count], truncated=left_out)
        text = _dump(observation)
        if count == 0 or len(text.encode("utf-8")) <= max_bytes:
            return text, count, left_out
        count -= 1


def error_observation(tool_call_id: str, tool: str, code: str) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.ERROR)
    observation["error_code"] = code
    return _dump(observation)


def rejected_observation(
    tool_call_id: str,
    tool: str,
    code: RejectCode,
    *,
    expected_previous_tool_call_id: str | None = None,
    field: str = "arguments",
) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.REJECTED)
    observation["error_code"] = code.value
    if expected_previous_tool_call_id is not None:
        observation["expected_previous_tool_call_id"] = expected_previous_tool_call_id
    observation["hint"] = _HINTS[code].replace("{field}", field[:80])
    return _dump(observation)


def stop_required_observation(tool_call_id: str, tool: str) -> str:
    observation = _head(tool_call_id, tool, EvidenceStatus.STOP_REQUIRED)
    observation["hint"] = STOP_HINT
    return _dump(observation)
