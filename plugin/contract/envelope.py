"""The typed Envelope every tool call carries (CONTRACTS §3), and its strict parse from raw text.

The raw argument string is parsed here, never the framework's "repaired" dict: LlamaIndex turns
``{"query": "disk fu`` into ``{"query": None}`` and would run the tool with it.

An explicit ``null`` for an OPTIONAL field (``previous_observation``, and business fields such as
``contains``, ``level``, ``top_k``, ``limit``) means "absent": the default applies. That is how the
strict tool schemas (``DIAG_STRUCTURED_OUTPUT=json_schema``) express an optional field — every
field required, optional ones nullable — so the parser accepts exactly what they permit, whatever
the setting, and an Envelope with explicit nulls is the same request as one without them. A null
for a required field, unknown fields, wrong types and out-of-range values are still refused.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sre_diag.contract.errors import DuplicateKey, EnvelopeError, pairs_without_duplicates

__all__ = [
    "MAX_ARGUMENT_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_TOOL_CALL_ID_CHARS",
    "Envelope",
    "EnvelopeError",
    "Evaluation",
    "PreviousObservation",
    "envelope_model",
    "json_too_deep",
    "parse_envelope",
]

InputT = TypeVar("InputT", bound=BaseModel)

MAX_TOOL_CALL_ID_CHARS = 128
"""The longest tool call id an Envelope's ``previous_observation`` or a Draft can name: a longer
id could never be evaluated or cited, so the interceptor refuses it before anything runs."""

MAX_JSON_DEPTH = 32
"""Nesting of arrays and objects any JSON the harness parses may have (the Envelope needs 3,
the Draft 5). Python's json decoder recurses per level: without this bound a few KB of ``[``
raise ``RecursionError`` instead of a clean refusal."""

MAX_ARGUMENT_CHARS = 64 * 1024
"""Characters of one tool call's raw arguments. The largest valid Envelope (a 4000-character
SQL statement, every character escaped) stays well below; anything larger is refused before
any parse."""

_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')
_OPENERS = frozenset("[{")


class Evaluation(StrEnum):
    """The model's verdict on the previous non-empty result."""

    GAINED = "GAINED"
    NO_GAIN = "NO_GAIN"


class PreviousObservation(BaseModel):
    """Which earlier tool call is being evaluated, and whether it advanced the diagnosis."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tool_call_id: Annotated[str, Field(min_length=1, max_length=MAX_TOOL_CALL_ID_CHARS)]
    evaluation: Evaluation


class Envelope(BaseModel, Generic[InputT]):
    """Tool arguments: an optional evaluation of the previous result and the business input."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    previous_observation: PreviousObservation | None = None
    input: InputT


_DECODER = json.JSONDecoder(object_pairs_hook=pairs_without_duplicates)


def _first_error_location(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "arguments"
    return ".".join(str(part) for part in errors[0]["loc"]) or "arguments"


def envelope_model(input_model: type[BaseModel]) -> type[BaseModel]:
    """``Envelope[input_model]`` as a class, e.g. for the tool's JSON schema."""
    model: type[BaseModel] = Envelope[input_model]  # type: ignore[valid-type]
    return model


def json_too_deep(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` opens more than ``max_depth`` arrays/objects at once, outside strings.

    One linear pass over the structural characters only (no backtracking regex); it stops as
    soon as the bound is passed. Unbalanced or unterminated text is measured as written, which
    can only over-estimate the depth a decoder would reach.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    in_string = False
    escaped_at = -1
    for match in _JSON_SPECIAL.finditer(text):
        char, at = match.group(), match.start()
        if in_string:
            if char == "\\" and escaped_at != at:
                escaped_at = at + 1
            elif char == '"' and escaped_at != at:
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _OPENERS:
            depth += 1
            if depth > max_depth:
                return True
        elif char != "\\":
            depth -= 1
    return False


def _argument_text(raw: str | dict[str, object]) -> str:
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = json.dumps(raw)
        except (RecursionError, TypeError, ValueError) as exc:
            raise EnvelopeError("arguments are not valid JSON") from exc
    if len(text) > MAX_ARGUMENT_CHARS:
        raise EnvelopeError("arguments too large")
    if json_too_deep(text):
        raise EnvelopeError("arguments nested too deeply")
    return text


def _drop_optional_nulls(value: dict[str, object], model: type[BaseModel]) -> dict[str, object]:
    fields = model.model_fields
    return {
        key: item
        for key, item in value.items()
        if not (item is None and key in fields and not fields[key].is_required())
    }


def _optional_nulls_dropped(
    value: dict[str, object], input_model: type[BaseModel]
) -> dict[str, object] | None:
    """``value`` without the explicit nulls of optional fields (Envelope and business input),
    or None when it has none (then the original text is validated as it is)."""
    outer = _drop_optional_nulls(value, Envelope[input_model])  # type: ignore[valid-type]
    business = outer.get("input")
    inner = _drop_optional_nulls(business, input_model) if isinstance(business, dict) else None
    if inner is not None and isinstance(business, dict) and len(inner) != len(business):
        outer["input"] = inner
    elif len(outer) == len(value):
        return None
    return outer


def parse_envelope(raw: str | dict[str, object], input_model: type[InputT]) -> Envelope[InputT]:
    """Strictly parse raw tool arguments into ``Envelope[input_model]``.

    Size and nesting are bounded before any decoder runs, so no input can make parsing raise
    anything but ``EnvelopeError``.
    """
    text = _argument_text(raw)
    try:
        value = _DECODER.decode(text)
    except DuplicateKey as exc:
        raise EnvelopeError("duplicate key") from exc
    except ValueError as exc:
        raise EnvelopeError("arguments are not valid JSON") from exc
    if not isinstance(value, dict):
        raise EnvelopeError("arguments must be a JSON object")
    cleaned = _optional_nulls_dropped(value, input_model)
    if cleaned is not None:
        text = json.dumps(cleaned, ensure_ascii=False)
    try:
        return Envelope[input_model].model_validate_json(text)  # type: ignore[valid-type]
    except ValidationError as exc:
        raise EnvelopeError(_first_error_location(exc)) from exc
