"""``DIAG_STRUCTURED_OUTPUT`` (CONTRACTS §2, §3, §5; issue 13 item 4), read at the scripted model
server: under ``json_schema`` every request carries the Draft's strict schema as
``response_format`` and the three Envelope tools with ``strict: true``, all inside OpenAI's strict
subset (``strict_violations``); under ``off`` none of that is sent. The Envelope parser accepts
what the strict schemas permit (an explicit null for an optional field means "absent") and the
strict parsers still refuse everything else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sre_diag.contract.draft import DiagnosisDraft, draft_strict_schema
from sre_diag.contract.envelope import EnvelopeError, parse_envelope
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.contract.strict_schema import strict_schema, strict_violations
from sre_diag.harness.model import draft_response_format
from sre_diag.tools.base import ToolName
from sre_diag.tools.schemas import KnowledgeInput, LogsInput, MysqlInput
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    adapters,
    call,
    draft_json,
    final_step,
    harness,
    tool_messages,
    tool_step,
)

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC 2026-11-28")
JSON_SCHEMA = "json_schema"
TOOL_NAMES = ["lookup_knowledge", "query_logs", "query_mysql"]
INPUT_MODELS: dict[str, type[BaseModel]] = {
    "lookup_knowledge": KnowledgeInput,
    "query_logs": LogsInput,
    "query_mysql": MysqlInput,
}

# query_logs with every optional field written out as null (what a strict model sends).
LOGS_WITH_NULLS = {**LOGS_INPUT, "contains": None, "level": None, "limit": None}
LOGS_ABSENT = {k: v for k, v in LOGS_INPUT.items() if k != "level"}


async def _run(
    model_server: StartServer, tmp_path: Path, **env: Any
) -> tuple[list[dict[str, Any]], ExecutionResult]:
    """The request bodies of a two-round run (one tool call, then the Draft), and its result."""
    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    result = await harness(server, tmp_path, **env).diagnose(QUERY)
    assert server.request_count == 2
    return server.requests, result


def _functions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert all(tool["type"] == "function" for tool in body["tools"])
    return {tool["function"]["name"]: tool["function"] for tool in body["tools"]}


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    resolved: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
    return resolved


def _accepts_null(schema: dict[str, Any], root: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_accepts_null(_resolve(b, root), root) for b in schema.get("anyOf", ()))


# -- a minimal validator for instances of the strict subset (test-side) -------------------


def _conforms(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """Whether ``value`` is an instance of ``schema`` (a schema inside the strict subset)."""
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        return any(_conforms(value, branch, root) for branch in schema["anyOf"])
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if "enum" in schema and value not in schema["enum"]:
        return False
    return any(_is_kind(value, kind, schema, root) for kind in kinds)


def _is_kind(value: Any, kind: str, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    if kind == "object":
        return (
            isinstance(value, dict)
            and set(value) == set(schema["required"]) == set(schema["properties"])
            and all(_conforms(value[k], schema["properties"][k], root) for k in value)
        )
    if kind == "array":
        return isinstance(value, list) and all(_conforms(v, schema["items"], root) for v in value)
    simple = {"string": str, "boolean": bool, "null": type(None)}
    if kind in simple:
        return isinstance(value, simple[kind])
    return isinstance(value, int) and not isinstance(value, bool)  # "integer"


# -- what is sent -------------------------------------------------------------------------


async def test_json_schema_sends_the_strict_draft_schema_every_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    bodies, result = await _run(model_server, tmp_path, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA)
    assert result.outcome is Outcome.DRAFT
    for body in bodies:
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        spec = response_format["json_schema"]
        assert (spec["name"], spec["strict"]) == ("DiagnosisDraft", True)
        schema = spec["schema"]
        assert strict_violations(schema) == []
        assert schema == draft_strict_schema()
        assert schema["type"] == "object"
        assert sorted(schema["required"]) == sorted(DiagnosisDraft.model_fields)
        assert _accepts_null(schema["properties"]["conclusion"], schema)
        # Tools and response_format travel together; one tool call a round is still asked.
        assert body["parallel_tool_calls"] is False
    assert bodies[0]["response_format"] == bodies[1]["response_format"]


async def test_json_schema_sends_the_three_envelope_tools_strict_every_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    bodies, _ = await _run(model_server, tmp_path, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA)
    first, second = (_functions(body) for body in bodies)
    assert sorted(first) == TOOL_NAMES
    assert json.dumps(second, sort_keys=True) == json.dumps(first, sort_keys=True)
    for name, function in first.items():
        assert function["strict"] is True, name
        parameters = function["parameters"]
        assert strict_violations(parameters) == [], name
        assert parameters["additionalProperties"] is False
        assert sorted(parameters["required"]) == ["input", "previous_observation"], name
        assert _accepts_null(parameters["properties"]["previous_observation"], parameters)
        business = _resolve(parameters["properties"]["input"], parameters)
        model = INPUT_MODELS[name]
        assert sorted(business["required"]) == sorted(model.model_fields), name
        for field, info in model.model_fields.items():
            nullable = _accepts_null(
                _resolve(business["properties"][field], parameters), parameters
            )
            # Optional fields are nullable; required ones are not.
            assert nullable is not info.is_required(), (name, field)


async def test_off_sends_no_response_format_and_no_strict_flag(
    model_server: StartServer, tmp_path: Path
) -> None:
    for env in ({}, {"DIAG_STRUCTURED_OUTPUT": "off"}):
        bodies, result = await _run(model_server, tmp_path, **env)
        assert result.outcome is Outcome.DRAFT
        for body in bodies:
            assert "response_format" not in body
            functions = _functions(body)
            assert sorted(functions) == TOOL_NAMES
            for function in functions.values():
                assert "strict" not in function
                # The default definitions keep their bounds (test_tool_definitions.py).
                assert sorted(function["parameters"]["required"]) == ["input"]


def test_an_unknown_structured_output_mode_is_an_invalid_setting(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from sre_diag.settings import Settings

    with pytest.raises(ValidationError, match="DIAG_STRUCTURED_OUTPUT"):
        Settings(_env_file=None, DIAG_STRUCTURED_OUTPUT="json_object")


def test_every_schema_sent_under_json_schema_is_inside_the_strict_subset() -> None:
    from sre_diag.harness.agent import tool_definitions

    assert strict_violations(draft_response_format()["json_schema"]["schema"]) == []
    for tool in tool_definitions(strict=True):
        spec = tool.metadata.to_openai_tool(skip_length_check=True)
        assert strict_violations(spec["function"]["parameters"]) == [], tool.metadata.name
    # The default definitions are NOT inside it (bounds, defaults, optional fields).
    for tool in tool_definitions():
        assert strict_violations(tool.metadata.get_parameters_dict()), tool.metadata.name


def test_the_strict_draft_schema_admits_every_draft_shape() -> None:
    schema = draft_strict_schema()
    for text in (draft_json(["call-1"]), draft_json([]), draft_json(["c1"], conclusion=False)):
        assert _conforms(json.loads(text), schema, schema)
    assert not _conforms({**json.loads(draft_json(["c1"])), "extra": 1}, schema, schema)
    without = json.loads(draft_json(["c1"]))
    del without["recommendations"]
    assert not _conforms(without, schema, schema)


# -- what the Envelope parser accepts -----------------------------------------------------


def _strict_parameters(tool: str) -> dict[str, Any]:
    from sre_diag.harness.agent import tool_definitions

    for definition in tool_definitions(strict=True):
        if definition.metadata.name == tool:
            return definition.metadata.to_openai_tool()["function"]["parameters"]  # type: ignore[no-any-return]
    raise AssertionError(tool)


NULL_FORMS = [
    (
        "lookup_knowledge",
        {"previous_observation": None, "input": {"query": "pool exhausted", "top_k": None}},
        {"input": {"query": "pool exhausted"}},
    ),
    (
        "query_logs",
        {"previous_observation": None, "input": LOGS_WITH_NULLS},
        {"input": LOGS_ABSENT},
    ),
    (
        "query_mysql",
        {"previous_observation": None, "input": {"sql": "SELECT 1", "purpose": "p"}},
        {"input": {"sql": "SELECT 1", "purpose": "p"}},
    ),
]


@pytest.mark.parametrize(("tool", "with_nulls", "absent"), NULL_FORMS)
def test_explicit_nulls_are_accepted_and_equal_the_absent_form(
    tool: str, with_nulls: dict[str, Any], absent: dict[str, Any]
) -> None:
    model = INPUT_MODELS[tool]
    # What a strict model writes is an instance of the strict schema…
    parameters = _strict_parameters(tool)
    assert _conforms(with_nulls, parameters, parameters)
    # …and parses to the same Envelope (so the same canonical invocation) as the absent form.
    parsed = parse_envelope(json.dumps(with_nulls), model)
    plain = parse_envelope(json.dumps(absent), model)
    assert parsed == plain
    assert parsed.input.canonical() == plain.input.canonical()  # type: ignore[attr-defined]


def test_null_means_the_default() -> None:
    logs = parse_envelope(json.dumps({"input": LOGS_WITH_NULLS}), LogsInput).input
    assert (logs.limit, logs.contains, logs.level) == (20, None, None)
    knowledge = parse_envelope('{"input": {"query": "q", "top_k": null}}', KnowledgeInput).input
    assert knowledge.top_k == 3


REFUSED = [
    # a null where the field is required
    ("lookup_knowledge", {"input": {"query": None}}, "input.query"),
    ("lookup_knowledge", {"input": None}, "input"),
    ("query_logs", {"input": {**LOGS_WITH_NULLS, "service": None}}, "input.service"),
    ("query_logs", {"input": {**LOGS_WITH_NULLS, "start": None}}, "input.start"),
    ("query_mysql", {"input": {"sql": "SELECT 1", "purpose": None}}, "input.purpose"),
    (
        "query_mysql",
        {
            "previous_observation": {"tool_call_id": None, "evaluation": "GAINED"},
            "input": {"sql": "SELECT 1", "purpose": "p"},
        },
        "previous_observation.tool_call_id",
    ),
    (
        "query_mysql",
        {
            "previous_observation": {"tool_call_id": "c1", "evaluation": None},
            "input": {"sql": "SELECT 1", "purpose": "p"},
        },
        "previous_observation.evaluation",
    ),
    # unknown fields, even null ones
    ("lookup_knowledge", {"input": {"query": "q", "bogus": None}}, "input.bogus"),
    ("lookup_knowledge", {"input": {"query": "q"}, "bogus": None}, "bogus"),
    # wrong types
    ("lookup_knowledge", {"input": {"query": "q", "top_k": "3"}}, "input.top_k"),
    ("query_logs", {"input": {**LOGS_INPUT, "limit": 2.5}}, "input.limit"),
    ("query_logs", {"input": {**LOGS_INPUT, "level": "FATAL"}}, "input.level"),
    # out of range: the bounds the strict schema cannot carry
    ("lookup_knowledge", {"input": {"query": "q", "top_k": 6}}, "input.top_k"),
    ("lookup_knowledge", {"input": {"query": "", "top_k": None}}, "input.query"),
    ("query_logs", {"input": {**LOGS_INPUT, "limit": 0}}, "input.limit"),
    ("query_logs", {"input": {**LOGS_INPUT, "limit": 51}}, "input.limit"),
    ("query_logs", {"input": {**LOGS_INPUT, "contains": ""}}, "input.contains"),
    ("query_logs", {"input": {**LOGS_INPUT, "service": "pay api"}}, "input.service"),
    ("query_logs", {"input": {**LOGS_INPUT, "start": "yesterday"}}, "input.start"),
    ("query_mysql", {"input": {"sql": "SELECT 1", "purpose": "p" * 201}}, "input.purpose"),
]


@pytest.mark.parametrize(("tool", "arguments", "where"), REFUSED)
def test_invalid_values_are_still_refused(tool: str, arguments: dict[str, Any], where: str) -> None:
    with pytest.raises(EnvelopeError) as refused:
        parse_envelope(json.dumps(arguments), INPUT_MODELS[tool])
    assert refused.value.field.startswith(where)


# -- full runs under json_schema ----------------------------------------------------------


async def test_an_explicit_null_repeat_of_a_call_is_a_duplicate(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_WITH_NULLS)),
            tool_step(call("c2", "query_logs", LOGS_ABSENT, previous=("c1", "GAINED"))),
            final_step(draft_json(["c1"])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA).diagnose(
        QUERY
    )
    assert result.outcome is Outcome.DRAFT
    first = tool_messages(server.requests[1])[-1]["observation"]
    assert first["evidence_status"] == "READY"
    duplicate = tool_messages(server.requests[2])[-1]["observation"]
    assert (duplicate["evidence_status"], duplicate["error_code"]) == ("REJECTED", "DUPLICATE_CALL")
    [executed] = table[ToolName.QUERY_LOGS].calls
    assert (executed.input.limit, executed.input.contains, executed.input.level) == (20, None, None)


async def test_an_invalid_envelope_is_rejected_under_json_schema(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", {**LOGS_WITH_NULLS, "limit": 500})),
            final_step(draft_json([])),
        ]
    )
    table = adapters()
    result = await harness(server, tmp_path, table, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA).diagnose(
        QUERY
    )
    rejected = tool_messages(server.requests[1])[-1]["observation"]
    assert (rejected["evidence_status"], rejected["error_code"]) == (
        "REJECTED",
        "INVALID_ENVELOPE",
    )
    assert not table[ToolName.QUERY_LOGS].calls
    assert result.outcome is Outcome.DRAFT


async def test_a_full_run_with_strict_shaped_calls_reaches_draft(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_WITH_NULLS)),
            tool_step(
                call(
                    "c2",
                    "lookup_knowledge",
                    {"query": "db pool exhausted", "top_k": None},
                    previous=("c1", "GAINED"),
                )
            ),
            final_step(draft_json(["c1", "c2"])),
        ]
    )
    result = await harness(server, tmp_path, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    assert result.draft is not None and result.draft.cited_ids() == {"c1", "c2"}
    assert all("response_format" in body for body in server.requests)


async def test_the_strict_draft_parser_still_decides(
    model_server: StartServer, tmp_path: Path
) -> None:
    fenced = f"```json\n{draft_json(['c1'])}\n```"
    unknown_citation = draft_json(["c9"])
    for text, defect in ((fenced, "FENCED"), (unknown_citation, "UNKNOWN_CITATION")):
        server = await model_server(
            [tool_step(call("c1", "query_logs", LOGS_INPUT)), final_step(text)]
        )
        result = await harness(server, tmp_path, DIAG_STRUCTURED_OUTPUT=JSON_SCHEMA).diagnose(QUERY)
        assert result.outcome is Outcome.FAILED
        assert result.failure is not None
        assert (result.failure.code.value, result.failure.detail) == ("INVALID_DRAFT", defect)


# -- the checker itself -------------------------------------------------------------------


def _object(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


STRING: dict[str, Any] = {"type": "string"}


def test_the_checker_accepts_the_subset() -> None:
    schema = {
        **_object(
            name={"type": "string", "description": "d", "title": "t"},
            note={"type": ["string", "null"]},
            count={"anyOf": [{"type": "integer"}, {"type": "null"}]},
            kind={"type": "string", "enum": ["A", "B"]},
            tags={"type": "array", "items": STRING},
            child={"$ref": "#/$defs/Child"},
            tree={"$ref": "#"},
        ),
        "$defs": {"Child": _object(next={"anyOf": [{"$ref": "#/$defs/Child"}, {"type": "null"}]})},
    }
    assert strict_violations(schema) == []


BROKEN = [
    ("root not an object", {"type": "array", "items": STRING}, "root must have type object"),
    ("root anyOf", {"anyOf": [_object(a=STRING)]}, "root must not be anyOf"),
    ("root not a schema", [1], "root must be an object schema"),
    (
        "no additionalProperties",
        {k: v for k, v in _object(a=STRING).items() if k != "additionalProperties"},
        "additionalProperties must be false",
    ),
    (
        "open object",
        {**_object(a=STRING), "additionalProperties": True},
        "additionalProperties must be false",
    ),
    ("optional field", {**_object(a=STRING, b=STRING), "required": ["a"]}, "not required"),
    ("required unknown", {**_object(a=STRING), "required": ["a", "z"]}, "not a property"),
    ("minLength", _object(a={"type": "string", "minLength": 1}), "'minLength'"),
    ("maxLength", _object(a={"type": "string", "maxLength": 9}), "'maxLength'"),
    ("pattern", _object(a={"type": "string", "pattern": "^a$"}), "'pattern'"),
    ("format", _object(a={"type": "string", "format": "date-time"}), "'format'"),
    ("minimum", _object(a={"type": "integer", "minimum": 1}), "'minimum'"),
    ("maximum", _object(a={"type": "integer", "maximum": 5}), "'maximum'"),
    ("default", _object(a={"type": ["integer", "null"], "default": 3}), "'default'"),
    ("minItems", _object(a={"type": "array", "items": STRING, "minItems": 1}), "'minItems'"),
    ("const", _object(a={"type": "string", "const": "A"}), "'const'"),
    ("oneOf", _object(a={"oneOf": [STRING, {"type": "null"}]}), "'oneOf'"),
    ("allOf", _object(a={"allOf": [STRING]}), "'allOf'"),
    ("discriminator", _object(a={"anyOf": [STRING], "discriminator": {}}), "'discriminator'"),
    ("$ref with sibling", _object(a={"$ref": "#/$defs/X", "description": "d"}), "stand alone"),
    ("dangling $ref", _object(a={"$ref": "#/$defs/Missing"}), "does not resolve"),
    ("remote $ref", _object(a={"$ref": "https://x/s.json"}), "point into #/$defs"),
    ("nested $defs", _object(a={**_object(b=STRING), "$defs": {}}), "$defs only at the root"),
    ("no type", _object(a={"description": "anything"}), "needs a type"),
    ("bad type", _object(a={"type": "date"}), "not a JSON type"),
    ("array without items", _object(a={"type": "array"}), "needs items"),
    ("enum of wrong type", _object(a={"type": "string", "enum": ["A", 1]}), "does not fit"),
    ("empty enum", _object(a={"type": "string", "enum": []}), "non-empty list"),
    ("empty anyOf", _object(a={"anyOf": []}), "anyOf must be a non-empty list"),
    ("object without properties", _object(a={"type": "object"}), "needs properties"),
    (
        "deep nested object in $defs",
        {**_object(a={"$ref": "#/$defs/A"}), "$defs": {"A": {**_object(b=STRING), "required": []}}},
        "$.$defs.A: not required",
    ),
    (
        "map",
        _object(
            a={"type": "object", "properties": {}, "required": [], "additionalProperties": STRING}
        ),
        "additionalProperties must be false",
    ),
]


@pytest.mark.parametrize(("case", "schema", "expected"), BROKEN, ids=[c[0] for c in BROKEN])
def test_the_checker_names_each_violation(case: str, schema: Any, expected: str) -> None:
    problems = strict_violations(schema)
    assert any(expected in problem for problem in problems), (case, problems)


def test_the_checker_bounds_nesting() -> None:
    schema: dict[str, Any] = STRING
    for _ in range(11):
        schema = _object(a=schema)
    assert any("nested 11 levels" in p for p in strict_violations(schema))
    assert strict_violations(schema["properties"]["a"]) == []  # 10 levels are fine


def test_the_converter_turns_pydantic_schemas_into_the_subset() -> None:
    for model in (DiagnosisDraft, KnowledgeInput, LogsInput, MysqlInput):
        original = model.model_json_schema()
        assert strict_violations(original), model.__name__  # pydantic's own is outside
        assert strict_violations(strict_schema(original)) == [], model.__name__
    # A $ref with siblings is inlined; const becomes a one-value enum; oneOf becomes anyOf.
    converted = strict_schema(
        {
            **_object(
                a={"$ref": "#/$defs/E", "description": "why"},
                b={"const": "X"},
                c={"oneOf": [STRING, {"type": "integer", "minimum": 0}]},
            ),
            "required": [],
            "$defs": {"E": {"type": "string", "enum": ["P", "Q"], "maxLength": 1}},
        }
    )
    assert strict_violations(converted) == []
    props = converted["properties"]
    assert props["a"] == {
        "type": ["string", "null"],
        "enum": ["P", "Q", None],
        "description": "why",
    }
    assert props["b"] == {"type": ["string", "null"], "enum": ["X", None]}
    assert props["c"] == {"anyOf": [STRING, {"type": "integer"}, {"type": "null"}]}
