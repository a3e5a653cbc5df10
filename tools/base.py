"""The adapter protocol every evidence tool implements.

The harness owns the envelope, the ledger and the observation format; an adapter sees only
``AdapterCall(tool_call_id, run_id, input)`` — the exact framework tool call id, the run it
belongs to and the unwrapped, already validated business input — and answers with either
``Ready`` (whitelisted, bounded item models) or ``Failed`` (a stable error code). Adapters never
return raw backend text; any exception they let escape is mapped by the harness to ``INTERNAL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

MAX_SERVICES = 100
"""The most services a log source lists: the tool catalogue shows that many (within its byte
cap), and ``check`` probes that many."""

__all__ = [
    "MAX_SERVICES",
    "AdapterCall",
    "AdapterErrorCode",
    "AdapterResult",
    "EvidenceAdapter",
    "Failed",
    "ProbeReport",
    "ProbeStatus",
    "ProbingAdapter",
    "Ready",
    "ToolName",
]


class ToolName(StrEnum):
    """The three tool names offered to the model (CONTRACTS §3)."""

    LOOKUP_KNOWLEDGE = "lookup_knowledge"
    QUERY_LOGS = "query_logs"
    QUERY_MYSQL = "query_mysql"


class AdapterErrorCode(StrEnum):
    """Stable error codes an adapter may report (CONTRACTS §4, ``ERROR``)."""

    TIMEOUT = "TIMEOUT"
    UNAVAILABLE = "UNAVAILABLE"
    INVALID_INPUT = "INVALID_INPUT"
    FORBIDDEN_QUERY = "FORBIDDEN_QUERY"
    NOT_CONFIGURED = "NOT_CONFIGURED"
    INTERNAL = "INTERNAL"


InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class AdapterCall(Generic[InputT]):
    """What an adapter receives: the framework tool call id, the run id and the business input."""

    tool_call_id: str
    run_id: str
    input: InputT


@dataclass(frozen=True, slots=True)
class Ready:
    """The adapter ran. ``items`` are whitelist projections; ``truncated`` if more matched;
    ``summary`` (``query_logs`` only) describes every match and is shown before the items;
    ``first_items`` (``query_logs`` only) are the oldest matches, in the items' shape.
    The harness projects all of it through the tool's whitelist again."""

    items: Sequence[BaseModel]
    truncated: bool = False
    summary: BaseModel | None = None
    first_items: Sequence[BaseModel] = ()


@dataclass(frozen=True, slots=True)
class Failed:
    """The adapter could not produce evidence; only the stable code travels on."""

    code: AdapterErrorCode


AdapterResult = Ready | Failed


class ProbeStatus(StrEnum):
    """What an adapter's probe found: its backend works, does not, or is not configured."""

    OK = "OK"
    FAILED = "FAILED"
    NOT_CONFIGURED = "NOT_CONFIGURED"


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """One backend as ``check`` shows it: a status, a one-line reason an operator can act on
    (built from error codes and kinds: no credential, no raw backend text), facts for scripts."""

    status: ProbeStatus
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


class EvidenceAdapter(Protocol[InputT]):
    """One evidence backend. Implementations must be safe to call concurrently."""

    @property
    def tool(self) -> ToolName:
        """Which of the three tools this adapter serves."""
        ...

    async def invoke(self, call: AdapterCall[InputT]) -> AdapterResult:
        """Run one bounded query; never raise for expected backend failures."""
        ...

    async def aclose(self) -> None:
        """Release pools and clients (called once on shutdown)."""
        ...


class ProbingAdapter(Protocol):
    """An adapter that knows how to probe its own backend (``check`` asks it, STYLE.md 9)."""

    async def probe(self) -> ProbeReport:
        """Reach the backend once, bounded, and say what works; never raise for expected
        backend failures, and leave nothing behind that looks like a run."""
        ...
