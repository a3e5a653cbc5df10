"""The typed Envelope every tool call carries (CONTRACTS §3), and its strict parse from raw text.

The raw argument string is parsed here, never the framework's "repaired" dict: LlamaIndex turns
``{"query": "disk fu`` into ``{"query": None}`` and would run the tool with it.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "Envelope",
    "EnvelopeError",
    "Evaluation",
    "PreviousObservation",
    "envelope_model",
    "parse_envelope",
]

InputT = TypeVar("InputT", bound=BaseModel)


class Evaluation(StrEnum):
    """The model's verdict on the previous non-empty result."""

    GAINED = "GAINED"
    NO_GAIN = "NO_GAIN"


class PreviousObservation(BaseModel):
    """Which earlier tool call is being evaluated, and whether it advanced the diagnosis."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tool_call_id: Annotated[str, Field(min_length=1, max_length=128)]
    evaluation: Evaluation


class Envelope(BaseModel, Generic[InputT]):
    """Tool arguments: an optional evaluation of the previous result and the business input."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    previous_observation: PreviousObservation | None = None
    input: InputT


class EnvelopeError(Exception):
    """The arguments are not a valid Envelope; ``field`` names where (never the value)."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(field)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise _DuplicateKey
    return dict(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _first_error_location(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "arguments"
    return ".".join(str(part) for part in errors[0]["loc"]) or "arguments"


def envelope_model(input_model: type[BaseModel]) -> type[BaseModel]:
    """``Envelope[input_model]`` as a class, e.g. for the tool's JSON schema."""
    model: type[BaseModel] = Envelope[input_model]  # type: ignore[valid-type]
    return model


def parse_envelope(raw: str | dict[str, object], input_model: type[InputT]) -> Envelope[InputT]:
    """Strictly parse raw tool arguments into ``Envelope[input_model]``."""
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        value = _DECODER.decode(text)
    except _DuplicateKey as exc:
        raise EnvelopeError("duplicate key") from exc
    except ValueError as exc:
        raise EnvelopeError("arguments are not valid JSON") from exc
    if not isinstance(value, dict):
        raise EnvelopeError("arguments must be a JSON object")
    try:
        return Envelope[input_model].model_validate_json(text)  # type: ignore[valid-type]
    except ValidationError as exc:
        raise EnvelopeError(_first_error_location(exc)) from exc
