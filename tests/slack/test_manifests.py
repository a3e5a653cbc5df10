"""The two Slack app manifests (CONTRACTS §10; README "Slack app: two modes"): validated against
the constraints of Slack's app manifest schema (v1) for every key they use, with unknown keys
refused as Slack refuses them; they declare the same app (the "Diagnose this" and "Replay
diagnosis" shortcuts, ``app_mention`` and ``message.channels`` / ``message.groups``) and differ
only in what HTTP mode needs: the two request URLs and ``socket_mode_enabled: false``."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sre_diag.slack import DIAGNOSE_CALLBACK_ID, REPLAY_CALLBACK_ID

REPO = Path(__file__).resolve().parents[2]
SOCKET = REPO / "manifest.yaml"
HTTP = REPO / "manifest.http.yaml"

_URL = {"type": "string", "pattern": r"^https?://", "maxLength": 3500}
_FLAG = {"type": "boolean"}
_NAMES = {"type": "array", "items": {"type": "string", "maxLength": 50}, "maxItems": 255}


def _object(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


# The subset of Slack's manifest schema (slackapi/manifest-schema, v1) for the keys an app of
# this kind may use: types, required keys, lengths, enums, patterns; additional keys refused.
SCHEMA = _object(
    ("display_information",),
    display_information=_object(
        ("name",),
        name={"type": "string", "minLength": 1, "maxLength": 35},
        description={"type": "string", "minLength": 1, "maxLength": 140},
        background_color={"type": "string", "pattern": r"^#[0-9a-fA-F]{3}([0-9a-fA-F]{3})?$"},
    ),
    features=_object(
        bot_user=_object(
            ("display_name",),
            display_name={"type": "string", "minLength": 1, "maxLength": 80},
            always_online=_FLAG,
        ),
        shortcuts={
            "type": "array",
            "minItems": 1,
            "maxItems": 10,
            "items": _object(
                ("name", "type", "callback_id", "description"),
                name={"type": "string", "minLength": 1, "maxLength": 24},
                type={"type": "string", "enum": ["message", "global"]},
                callback_id={"type": "string", "minLength": 1, "maxLength": 255},
                description={"type": "string", "minLength": 1, "maxLength": 150},
            ),
        },
    ),
    oauth_config=_object(scopes=_object(bot=_NAMES, user=_NAMES)),
    settings=_object(
        event_subscriptions=_object(
            request_url=_URL,
            bot_events={**_NAMES, "maxItems": 100, "uniqueItems": True},
        ),
        interactivity=_object(("is_enabled",), is_enabled=_FLAG, request_url=_URL),
        org_deploy_enabled=_FLAG,
        socket_mode_enabled=_FLAG,
        token_rotation_enabled=_FLAG,
    ),
)
_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool}


def _bounded(size: int, schema: dict[str, Any], low: str, high: str) -> bool:
    return bool(schema.get(low, 0) <= size <= schema.get(high, 10**9))


def _string(value: str, schema: dict[str, Any], where: str) -> list[str]:
    found = []
    if not _bounded(len(value), schema, "minLength", "maxLength"):
        found.append(f"{where}: length {len(value)} out of bounds")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{where}: does not match {schema['pattern']}")
    return found


def _array(value: list[Any], schema: dict[str, Any], where: str) -> list[str]:
    found = []
    if not _bounded(len(value), schema, "minItems", "maxItems"):
        found.append(f"{where}: {len(value)} items out of bounds")
    if schema.get("uniqueItems") and len(set(map(repr, value))) != len(value):
        found.append(f"{where}: items not unique")
    for n, item in enumerate(value):
        found += violations(item, schema.get("items", {}), f"{where}[{n}]")
    return found


def _mapping(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    properties = schema.get("properties", {})
    found = [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
    found += [f"{where}: unknown key {k}" for k in value if k not in properties]
    for key, item in value.items():
        if key in properties:
            found += violations(item, properties[key], f"{where}.{key}")
    return found


def violations(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """What in ``value`` the schema refuses (the JSON Schema keywords used above)."""
    kind = schema.get("type")
    if kind is not None and not isinstance(value, _TYPES[kind]):
        return [f"{where}: not a {kind}"]
    found: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} not one of {schema['enum']}")
    if isinstance(value, str):
        found += _string(value, schema, where)
    elif isinstance(value, list):
        found += _array(value, schema, where)
    elif isinstance(value, dict):
        found += _mapping(value, schema, where)
    return found


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", [SOCKET, HTTP], ids=["socket", "http"])
def test_each_manifest_is_valid_for_slack(path: Path) -> None:
    manifest = _load(path)
    assert violations(manifest, SCHEMA) == []
    shortcuts = {s["callback_id"]: s for s in manifest["features"]["shortcuts"]}
    assert shortcuts[DIAGNOSE_CALLBACK_ID]["name"] == "Diagnose this"
    assert shortcuts[DIAGNOSE_CALLBACK_ID]["type"] == "message"
    assert shortcuts[REPLAY_CALLBACK_ID]["type"] == "message"
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    assert {"app_mention", "message.channels", "message.groups"} <= set(events)
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # message.channels / message.groups need the history scopes; shortcuts need commands.
    assert {"channels:history", "groups:history", "commands", "chat:write"} <= scopes


def test_the_validator_refuses_what_slack_refuses() -> None:
    manifest = _load(SOCKET)
    bad = copy.deepcopy(manifest)
    bad["features"]["shortcuts"][0]["name"] = "Diagnose this message for me now"  # > 24
    bad["settings"]["socket_mode"] = True
    bad["settings"]["interactivity"]["request_url"] = "ftp://x"
    assert len(violations(bad, SCHEMA)) == 3


def test_the_modes_differ_only_in_the_request_urls_and_socket_mode() -> None:
    socket, http = _load(SOCKET), _load(HTTP)
    assert socket["settings"]["socket_mode_enabled"] is True
    assert http["settings"]["socket_mode_enabled"] is False
    assert "request_url" not in socket["settings"]["event_subscriptions"]
    assert "request_url" not in socket["settings"]["interactivity"]
    events_url = http["settings"]["event_subscriptions"].pop("request_url")
    actions_url = http["settings"]["interactivity"].pop("request_url")
    assert events_url == actions_url and events_url.startswith("https://")
    assert events_url.endswith("/slack/events")  # serve --http's path
    http["settings"]["socket_mode_enabled"] = True
    assert http == socket
