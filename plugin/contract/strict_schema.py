"""OpenAI's strict structured-output subset of JSON Schema: a converter and a checker.

With ``DIAG_STRUCTURED_OUTPUT=json_schema`` the Draft schema (``response_format``) and the three
Envelope schemas (tools with ``strict: true``) must stay inside the subset OpenAI documents for
strict mode, or a strict endpoint refuses the whole request:

- the root is an object (not ``anyOf``); ``$defs`` only at the root, ``$ref`` only local and
  alone (no sibling keywords);
- every object lists ALL its properties in ``required`` and has ``additionalProperties: false``;
  an optional field is expressed as nullable (``"type": [..., "null"]`` or ``anyOf`` with null);
- only these keywords: ``type``, ``properties``, ``required``, ``additionalProperties``,
  ``items``, ``enum``, ``anyOf``, ``$ref``, ``$defs``, ``description``, ``title``. Bounds
  (``minLength``, ``maximum``, ``pattern``, ``format``, ``minItems``, …), ``default``, ``const``,
  ``oneOf``/``allOf``/``not`` and the like are not allowed;
- at most 10 levels of object nesting, 5000 properties and 1000 enum values in all.

``strict_schema`` turns a pydantic-generated schema into that subset: bounds and defaults are
dropped (the strict parsers still enforce them: the schema only shapes the model's output),
``oneOf`` becomes ``anyOf``, ``const`` a one-value ``enum``, and a field that was optional
becomes required but nullable — null then means "absent", and the parser applies the default.
``strict_violations`` lists every way a schema leaves the subset (empty when it is inside).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["MAX_ENUM_VALUES", "MAX_NESTING", "MAX_PROPERTIES", "strict_schema", "strict_violations"]

MAX_NESTING = 10
MAX_PROPERTIES = 5000
MAX_ENUM_VALUES = 1000

_ALLOWED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "anyOf",
        "$ref",
        "$defs",
        "description",
        "title",
    }
)
# Kept by the converter: the allowed keywords and the two it rewrites.
_KEPT = _ALLOWED | {"const", "oneOf"}
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_NULL: dict[str, Any] = {"type": "null"}
_DEFS_PREFIX = "#/$defs/"


# -- converter ---------------------------------------------------------------------------


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A strict-subset copy of ``schema`` (a pydantic ``model_json_schema()``)."""
    source = copy.deepcopy(dict(schema))
    defs = source.pop("$defs", {})
    converted = _convert(source, defs)
    converted["additionalProperties"] = converted.get("additionalProperties", False)
    if defs:
        converted["$defs"] = {name: _convert(sub, defs) for name, sub in defs.items()}
    return converted


def _convert(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in node.items() if key in _KEPT}
    if "$ref" in out and len(out) > 1:
        out = {key: value for key, value in _inline_ref(out, defs).items() if key in _KEPT}
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    if "const" in out:
        value = out.pop("const")
        out["enum"] = [value]
        out.setdefault("type", _json_type(value))
    if "anyOf" in out:
        out["anyOf"] = [_convert(branch, defs) for branch in out["anyOf"]]
    if "items" in out:
        out["items"] = _convert(out["items"], defs)
    if "properties" in out:
        out.update(_strict_object(out, defs))
    return out


def _strict_object(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Every property required; those that were optional made nullable; nothing else."""
    required = set(node.get("required", ()))
    properties = {}
    for name, sub in node["properties"].items():
        converted = _convert(sub, defs)
        properties[name] = converted if name in required else _nullable(converted)
    return {
        "properties": properties,
        "required": list(properties),
        "additionalProperties": node.get("additionalProperties", False),
    }


def _inline_ref(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"$ref": X, "description": …}``: the referenced schema with the siblings over it."""
    ref = node["$ref"]
    if not isinstance(ref, str) or not ref.startswith(_DEFS_PREFIX):
        return node
    target = defs.get(ref[len(_DEFS_PREFIX) :])
    if not isinstance(target, dict):
        return node
    siblings = {key: value for key, value in node.items() if key != "$ref"}
    return {**copy.deepcopy(target), **siblings}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in node:
        if _NULL not in node["anyOf"]:
            node["anyOf"] = [*node["anyOf"], dict(_NULL)]
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind != "null":
        node["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        node["type"] = [*kind, "null"]
    else:
        return {"anyOf": [node, dict(_NULL)]}
    if "enum" in node and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# -- checker -----------------------------------------------------------------------------


def strict_violations(schema: object) -> list[str]:
    """Every way ``schema`` leaves OpenAI's strict subset, as ``"<path>: <what>"`` lines."""
    if not isinstance(schema, dict):
        return ["$: the root must be an object schema"]
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("$: the root must have type object")
    if "anyOf" in schema:
        problems.append("$: the root must not be anyOf")
    defs = schema.get("$defs", {})
    if not isinstance(defs, dict):
        problems.append("$.$defs: must be an object")
        defs = {}
    counts = _Counts()
    problems.extend(_check(schema, "$", defs, counts, root=True))
    for name, sub in defs.items():
        problems.extend(_check(sub, f"$.$defs.{name}", defs, counts, root=False))
    problems.extend(_nesting_problems(schema, defs))
    if counts.properties > MAX_PROPERTIES:
        problems.append(f"$: {counts.properties} properties in all (at most {MAX_PROPERTIES})")
    if counts.enum_values > MAX_ENUM_VALUES:
        problems.append(f"$: {counts.enum_values} enum values in all (at most {MAX_ENUM_VALUES})")
    return problems


class _Counts:
    def __init__(self) -> None:
        self.properties = 0
        self.enum_values = 0


def _check(
    node: object, path: str, defs: Mapping[str, Any], counts: _Counts, *, root: bool
) -> list[str]:
    if not isinstance(node, dict):
        return [f"{path}: a schema must be an object"]
    problems = _keyword_problems(node, path, root=root)
    if "$ref" in node:
        return problems + _ref_problems(node, path, defs)
    kinds = _kinds(node, path, problems)
    if "anyOf" not in node and not kinds:
        problems.append(f"{path}: needs a type, anyOf or $ref")
    branches = node.get("anyOf", [None])
    if not isinstance(branches, list) or not branches:
        problems.append(f"{path}: anyOf must be a non-empty list")
    if "enum" in node:
        problems.extend(_enum_problems(node["enum"], kinds, path, counts))
    if "object" in kinds or "properties" in node:
        problems.extend(_object_problems(node, path, counts))
    if "array" in kinds and "items" not in node:
        problems.append(f"{path}: an array needs items")
    for sub_path, sub in _children(node, path):
        problems.extend(_check(sub, sub_path, defs, counts, root=False))
    return problems


def _keyword_problems(node: Mapping[str, Any], path: str, *, root: bool) -> list[str]:
    problems = [f"{path}: unsupported keyword {key!r}" for key in node if key not in _ALLOWED]
    if "$defs" in node and not root:
        problems.append(f"{path}: $defs only at the root")
    for key in ("description", "title"):
        if key in node and not isinstance(node[key], str):
            problems.append(f"{path}: {key} must be a string")
    return problems


def _ref_problems(node: Mapping[str, Any], path: str, defs: Mapping[str, Any]) -> list[str]:
    problems = []
    if len(node) > 1:
        problems.append(f"{path}: $ref must stand alone (siblings {sorted(set(node) - {'$ref'})})")
    ref = node["$ref"]
    if ref == "#":
        return problems
    if not isinstance(ref, str) or not ref.startswith(_DEFS_PREFIX):
        problems.append(f"{path}: $ref must point into #/$defs")
    elif ref[len(_DEFS_PREFIX) :] not in defs:
        problems.append(f"{path}: $ref {ref} does not resolve")
    return problems


def _kinds(node: Mapping[str, Any], path: str, problems: list[str]) -> set[str]:
    kind = node.get("type")
    if kind is None:
        return set()
    listed = kind if isinstance(kind, list) else [kind]
    if not listed or not all(isinstance(k, str) and k in _TYPES for k in listed):
        problems.append(f"{path}: type {kind!r} is not a JSON type or list of them")
        return set()
    if len(set(listed)) != len(listed):
        problems.append(f"{path}: type {kind!r} repeats a type")
    return set(listed)


def _enum_problems(values: object, kinds: set[str], path: str, counts: _Counts) -> list[str]:
    if not isinstance(values, list) or not values:
        return [f"{path}: enum must be a non-empty list"]
    counts.enum_values += len(values)
    if not kinds:
        return [f"{path}: enum needs a type"]
    wrong = [v for v in values if not _fits(v, kinds)]
    return [f"{path}: enum value {v!r} does not fit type {sorted(kinds)}" for v in wrong]


def _fits(value: object, kinds: set[str]) -> bool:
    kind = _json_type(value)
    return kind in kinds or (kind == "integer" and "number" in kinds)


def _object_problems(node: Mapping[str, Any], path: str, counts: _Counts) -> list[str]:
    problems = []
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return [f"{path}: an object needs properties"]
    counts.properties += len(properties)
    if node.get("additionalProperties") is not False:
        problems.append(f"{path}: additionalProperties must be false")
    required = node.get("required")
    if not isinstance(required, list) or len(set(map(str, required))) != len(required):
        problems.append(f"{path}: required must be a list of distinct names")
    elif set(required) != set(properties):
        missing = sorted(set(properties) - set(required))
        extra = sorted(set(required) - set(properties))
        if missing:
            problems.append(f"{path}: not required (make them nullable instead): {missing}")
        if extra:
            problems.append(f"{path}: required but not a property: {extra}")
    return problems


def _children(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, object]]:
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            yield f"{path}.{name}", sub
    if "items" in node:
        yield f"{path}[]", node["items"]
    branches = node.get("anyOf")
    if isinstance(branches, list):
        for index, sub in enumerate(branches):
            yield f"{path}.anyOf[{index}]", sub


def _nesting_problems(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> list[str]:
    """Object nesting deeper than ``MAX_NESTING``, following ``$ref`` (a recursive cycle is
    allowed by the subset and is not followed twice)."""
    deepest = _depth(schema, defs, ())
    if deepest > MAX_NESTING:
        return [f"$: objects nested {deepest} levels deep (at most {MAX_NESTING})"]
    return []


def _depth(node: object, defs: Mapping[str, Any], seen: tuple[str, ...]) -> int:
    if not isinstance(node, dict):
        return 0
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref[len(_DEFS_PREFIX) :] if ref.startswith(_DEFS_PREFIX) else None
        if name is None or name in seen:
            return 0
        return _depth(defs.get(name), defs, (*seen, name))
    below = max((_depth(sub, defs, seen) for _, sub in _children(node, "")), default=0)
    return below + (1 if isinstance(node.get("properties"), dict) else 0)
