"""The Execution Result (CONTRACTS §6): a Draft, a controlled stop, or a closed failure."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from sre_diag.contract.draft import DiagnosisDraft
from sre_diag.contract.envelope import Evaluation
from sre_diag.errors import StopReason

__all__ = [
    "Check",
    "CheckedTool",
    "ExecutionResult",
    "Failure",
    "FailureCode",
    "InvocationStatus",
    "Outcome",
    "ProgressSnapshot",
    "UsageReport",
]


class Outcome(StrEnum):
    """The three ways a run ends."""

    DRAFT = "DRAFT"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class FailureCode(StrEnum):
    """Why a run failed closed."""

    INVALID_DRAFT = "INVALID_DRAFT"
    AGENT_ERROR = "AGENT_ERROR"
    MODEL_ERROR = "MODEL_ERROR"


class InvocationStatus(StrEnum):
    """Lifecycle outcome of a canonical invocation."""

    READY = "READY"
    ERROR = "ERROR"
    REJECTED = "REJECTED"


class CheckedTool(StrEnum):
    """The tool a check called: the CONTRACTS §3 names (``sre_diag.tools.base.ToolName``'s
    values; the contract sits below the tools, so it names them itself)."""

    LOOKUP_KNOWLEDGE = "lookup_knowledge"
    QUERY_LOGS = "query_logs"
    QUERY_MYSQL = "query_mysql"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Check(_Frozen):
    """One canonical invocation as the operator sees it."""

    tool_call_id: str
    tool: CheckedTool
    status: InvocationStatus
    item_count: int
    evaluation: Evaluation | None
    scope: str | None
    error_code: str | None = None
    """The invocation's code: a ``RejectCode``, an ``AdapterErrorCode`` or a ``HarnessCode``."""


class ProgressSnapshot(_Frozen):
    """What the run checked, taken only from the ledger."""

    checks: tuple[Check, ...]


class UsageReport(_Frozen):
    """What the run consumed."""

    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    tool_calls: int
    bytes: int
    elapsed_ms: int


class Failure(_Frozen):
    """A stable code and a stable short detail; never a traceback."""

    code: FailureCode
    detail: str


class ExecutionResult(_Frozen):
    """The outcome of one run."""

    run_id: str
    session_id: str
    outcome: Outcome
    stop_reason: StopReason | None = None
    draft: DiagnosisDraft | None = None
    progress: ProgressSnapshot | None = None
    usage: UsageReport
    failure: Failure | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), ensure_ascii=False)
