"""The DiagnosisDraft record and the one strict gate that produces it (CONTRACTS §5).

``parse_draft`` is the only way to obtain a Draft. Surrounding JSON whitespace is the only
tolerance: a fence, a prefix, a suffix, a second object, duplicate keys, unknown keys, blank or
oversized text, a schema violation or a citation of anything but a READY call of this run is
refused with a stable defect. There is no repair, no extraction from prose and no retry.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from sre_diag.contract.envelope import MAX_JSON_DEPTH, MAX_TOOL_CALL_ID_CHARS, json_too_deep
from sre_diag.contract.errors import (
    DraftDefect,
    DraftRejected,
    DuplicateKey,
    pairs_without_duplicates,
)
from sre_diag.contract.strict_schema import strict_schema

__all__ = [
    "Confidence",
    "DiagnosisDraft",
    "DraftDefect",
    "DraftRejected",
    "draft_json_schema",
    "draft_strict_schema",
    "parse_draft",
]

_JSON_WS = " \t\n\r"


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Statement = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_not_blank)]
Item = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_not_blank)]
ToolCallId = Annotated[str, Field(min_length=1, max_length=MAX_TOOL_CALL_ID_CHARS)]
CallIds = Annotated[tuple[ToolCallId, ...], Field(min_length=1, max_length=10)]


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Confidence(StrEnum):
    """How strongly the cited evidence supports the conclusion."""

    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


class Conclusion(_Record):
    """A confirmed conclusion; it must cite the checks it rests on."""

    summary: Statement
    confidence: Confidence
    evidence_tool_call_ids: CallIds


class CitedEvidence(_Record):
    """The statement rests on these tool calls of this run."""

    status: Literal["CITED"]
    tool_call_ids: CallIds


class NoEvidence(_Record):
    """A scoped negative observation: what was checked and found nothing."""

    status: Literal["NO_EVIDENCE"]
    scope: Item


class AnalysisItem(_Record):
    """A finding (always cited) or a negative observation (cited or scoped)."""

    kind: Literal["FINDING", "NEGATIVE_OBSERVATION"]
    statement: Statement
    evidence: Annotated[CitedEvidence | NoEvidence, Field(discriminator="status")]

    @model_validator(mode="after")
    def _finding_is_cited(self) -> Self:
        if self.kind == "FINDING" and not isinstance(self.evidence, CitedEvidence):
            raise ValueError("a FINDING must cite tool call ids")
        return self


class Limitations(_Record):
    """What was checked, and what is still missing."""

    checked_scope: Annotated[tuple[Item, ...], Field(max_length=10)]
    missing_info: Annotated[tuple[Item, ...], Field(max_length=10)]


class DiagnosisDraft(_Record):
    """The final answer of one run."""

    conclusion: Conclusion | None
    analysis: Annotated[tuple[AnalysisItem, ...], Field(max_length=10)]
    action_plan: Annotated[tuple[Item, ...], Field(max_length=10)]
    recommendations: Annotated[tuple[Item, ...], Field(max_length=10)]
    limitations: Limitations

    @model_validator(mode="after")
    def _no_conclusion_says_what_is_missing(self) -> Self:
        if self.conclusion is None and not self.limitations.missing_info:
            raise ValueError("a draft without conclusion must list missing_info")
        return self

    def cited_ids(self) -> frozenset[str]:
        """Every tool call id the draft cites, in the conclusion and in the analysis."""
        ids: set[str] = set()
        if self.conclusion is not None:
            ids.update(self.conclusion.evidence_tool_call_ids)
        for item in self.analysis:
            if isinstance(item.evidence, CitedEvidence):
                ids.update(item.evidence.tool_call_ids)
        return frozenset(ids)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(
    object_pairs_hook=pairs_without_duplicates, parse_constant=_reject_constant
)


def _decode_one_object(text: str) -> None:
    """Check ``text`` holds exactly one JSON object with nothing around it."""
    if text.startswith("```"):
        raise DraftRejected(DraftDefect.FENCED)
    if json_too_deep(text, MAX_JSON_DEPTH):
        raise DraftRejected(DraftDefect.TOO_DEEP)
    try:
        value, end = _DECODER.raw_decode(text)
    except DuplicateKey as exc:
        raise DraftRejected(DraftDefect.DUPLICATE_KEY) from exc
    except ValueError as exc:
        defect = DraftDefect.MALFORMED if text[:1] in "{[" else DraftDefect.PREFIXED
        raise DraftRejected(defect) from exc
    if end != len(text):
        raise DraftRejected(DraftDefect.SUFFIXED)
    if not isinstance(value, dict):
        raise DraftRejected(DraftDefect.SCHEMA)


def parse_draft(text: str | None, *, max_bytes: int, ready_ids: Iterable[str]) -> DiagnosisDraft:
    """The strict gate. ``ready_ids`` are the READY tool call ids of the current run."""
    if text is None or not text.strip(_JSON_WS):
        raise DraftRejected(DraftDefect.EMPTY)
    if len(text.encode("utf-8")) > max_bytes:
        raise DraftRejected(DraftDefect.OVERSIZED)
    body = text.strip(_JSON_WS)
    _decode_one_object(body)
    try:
        draft = DiagnosisDraft.model_validate_json(body)
    except ValidationError as exc:
        raise DraftRejected(DraftDefect.SCHEMA) from exc
    if not draft.cited_ids() <= frozenset(ready_ids):
        raise DraftRejected(DraftDefect.UNKNOWN_CITATION)
    return draft


def draft_json_schema() -> str:
    """The generated JSON schema of the Draft, as given to the model in the system prompt."""
    return json.dumps(DiagnosisDraft.model_json_schema(), ensure_ascii=False, indent=1)


@cache
def _strict_draft_schema() -> dict[str, Any]:
    return strict_schema(DiagnosisDraft.model_json_schema())


def draft_strict_schema() -> dict[str, Any]:
    """The Draft schema within OpenAI's strict subset (``response_format`` under
    ``DIAG_STRUCTURED_OUTPUT=json_schema``); generated once per process, a copy each call.

    Bounds the subset cannot carry (string lengths, list sizes, non-blank text) and the rules
    across fields are left to ``parse_draft``: the schema only shapes the model's output.
    """
    return copy.deepcopy(_strict_draft_schema())
