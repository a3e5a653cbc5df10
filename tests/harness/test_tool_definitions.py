"""The tool definitions the harness sends to the model (CONTRACTS §3), read at the scripted model
server: exactly three tools, each taking an Envelope, with the contract's fields and bounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sre_diag.contract.request import DiagnosisRequest
from tests.conftest import StartServer
from tests.harness.support import LOGS_INPUT, call, draft_json, final_step, harness, tool_step

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC 2026-11-28")
TOOL_NAMES = ["lookup_knowledge", "query_logs", "query_mysql"]


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/...``), once per level."""
    ref = schema.get("$ref")
    if ref is None:
        return schema
    assert isinstance(ref, str) and ref.startswith("#/"), ref
    target: Any = root
    for part in ref[2:].split("/"):
        target = target[part]
    return _resolve({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, root)


def _optional(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of ``X | None`` (or the schema itself when it is not nullable)."""
    branches = schema.get("anyOf")
    if branches is None:
        return _resolve(schema, root)
    kinds = [b for b in branches if b.get("type") != "null"]
    assert len(kinds) == 1 and len(branches) == 2, branches
    return _resolve(kinds[0], root)


def _closed_object(schema: dict[str, Any]) -> dict[str, Any]:
    assert schema.get("type") == "object", schema
    assert schema.get("additionalProperties") is False, schema
    props = schema["properties"]
    assert isinstance(props, dict)
    return props


def _integer(schema: dict[str, Any], low: int, high: int, default: int) -> None:
    assert schema["type"] == "integer"
    assert (schema["minimum"], schema["maximum"], schema["default"]) == (low, high, default)


def _string(schema: dict[str, Any], low: int, high: int | None) -> None:
    assert schema["type"] == "string"
    assert schema.get("minLength") == low
    if high is not None:
        assert schema.get("maxLength") == high


async def _tools_sent(model_server: StartServer, tmp_path: Path) -> list[list[dict[str, Any]]]:
    """The ``tools`` of every request of a two-round run (one tool call, then the Draft)."""
    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome.value == "DRAFT"
    assert server.request_count == 2
    return [body["tools"] for body in server.requests]


def _by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    assert all(t["type"] == "function" for t in tools)
    return {t["function"]["name"]: t["function"] for t in tools}


async def test_exactly_the_three_tools_are_offered_every_round(
    model_server: StartServer, tmp_path: Path
) -> None:
    first, second = await _tools_sent(model_server, tmp_path)
    assert sorted(t["function"]["name"] for t in first) == TOOL_NAMES
    assert len(first) == 3
    # Definitions are a per-run snapshot: the second round offers exactly the same tools.
    assert json.dumps(second, sort_keys=True) == json.dumps(first, sort_keys=True)
    for function in _by_name(first).values():
        assert isinstance(function.get("description"), str) and function["description"].strip()


async def test_every_tool_takes_an_envelope(model_server: StartServer, tmp_path: Path) -> None:
    first, _ = await _tools_sent(model_server, tmp_path)
    for name, function in _by_name(first).items():
        root = function["parameters"]
        props = _closed_object(root)
        assert set(props) == {"previous_observation", "input"}, name
        assert root.get("required") == ["input"], name  # previous_observation is optional
        previous = _optional(props["previous_observation"], root)
        fields = _closed_object(previous)
        assert set(fields) == {"tool_call_id", "evaluation"}, name
        assert sorted(previous["required"]) == ["evaluation", "tool_call_id"], name
        assert _resolve(fields["tool_call_id"], root)["type"] == "string"
        assert _resolve(fields["evaluation"], root)["enum"] == ["GAINED", "NO_GAIN"], name
        _closed_object(_resolve(props["input"], root))


def _input_of(function: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    root = function["parameters"]
    schema = _resolve(root["properties"]["input"], root)
    return _closed_object(schema), root, sorted(schema.get("required", []))


async def test_business_inputs_carry_the_contract_fields_and_bounds(
    model_server: StartServer, tmp_path: Path
) -> None:
    first, _ = await _tools_sent(model_server, tmp_path)
    tools = _by_name(first)

    props, root, required = _input_of(tools["lookup_knowledge"])
    assert set(props) == {"query", "top_k"} and required == ["query"]
    _string(_resolve(props["query"], root), 1, 500)
    _integer(_resolve(props["top_k"], root), 1, 5, 3)

    props, root, required = _input_of(tools["query_logs"])
    assert set(props) == {"service", "start", "end", "contains", "level", "limit"}
    assert required == ["end", "service", "start"]
    assert _resolve(props["service"], root)["type"] == "string"
    for bound in ("start", "end"):
        stamp = _resolve(props[bound], root)
        assert (stamp["type"], stamp.get("format")) == ("string", "date-time"), bound
    assert _optional(props["contains"], root)["type"] == "string"
    assert props["contains"].get("default") is None
    assert _optional(props["level"], root)["enum"] == ["ERROR", "WARN", "INFO", "DEBUG"]
    assert props["level"].get("default") is None
    _integer(_resolve(props["limit"], root), 1, 50, 20)

    props, root, required = _input_of(tools["query_mysql"])
    assert set(props) == {"sql", "purpose"} and required == ["purpose", "sql"]
    assert _resolve(props["sql"], root)["type"] == "string"
    _string(_resolve(props["purpose"], root), 1, 200)


async def test_json_schema_variant_offers_the_same_tools_and_fields(
    model_server: StartServer, tmp_path: Path
) -> None:
    """Under ``DIAG_STRUCTURED_OUTPUT=json_schema`` the same three tools, descriptions and
    fields are offered, each marked strict, every field required (test_structured_output.py
    checks the strict subset itself)."""
    default, _ = await _tools_sent(model_server, tmp_path)
    server = await model_server(
        [tool_step(call("call-1", "query_logs", LOGS_INPUT)), final_step(draft_json(["call-1"]))]
    )
    result = await harness(server, tmp_path, DIAG_STRUCTURED_OUTPUT="json_schema").diagnose(QUERY)
    assert result.outcome.value == "DRAFT"
    plain, strict = _by_name(default), _by_name(server.requests[0]["tools"])
    assert sorted(strict) == TOOL_NAMES
    for name, function in strict.items():
        assert function["strict"] is True and "strict" not in plain[name]
        assert function["description"] == plain[name]["description"]
        root = function["parameters"]
        props = _closed_object(root)
        assert set(props) == {"previous_observation", "input"} == set(root["required"])
        business = _resolve(props["input"], root)
        default_business, _, _ = _input_of(plain[name])
        assert set(_closed_object(business)) == set(default_business) == set(business["required"])
