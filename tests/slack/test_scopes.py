"""Every Slack Web API method the product calls, against the scopes the app manifests grant.

The audit reads the code itself: each ``client.<family>_<method>(`` call names a Web API method,
whose bot scope (Slack's method pages, ``METHOD_SCOPES``; a conversation method's scope follows
the conversation's type) must be granted by both manifests, for public and private admin
channels alike; every event and shortcut the manifests subscribe to has its scope too, and the
manifests grant nothing that no method, event or shortcut needs. The Slack double refuses a
method whose scope is not granted exactly as Slack does, so every Slack test fails on a missing
scope.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.doubles.recording_slack import (
    METHOD_SCOPES,
    RecordingSlackApi,
    scope_needed,
)
from tests.slack.support import MANIFEST_SCOPES, REPO, bot_scopes

_CALL = re.compile(
    r"\.(auth|apps|chat|conversations|views|users|reactions|files|pins|team|bots|usergroups)"
    r"_([A-Za-z]+)\("
)
_EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
}
_CHANNELS = ("CADMIN0001", "GADMIN0002")


def _methods_called() -> set[str]:
    methods: set[str] = set()
    for folder in ("plugin", "tools"):
        for path in (REPO / folder).rglob("*.py"):
            if "doubles" in path.parts:
                continue
            for family, name in _CALL.findall(path.read_text(encoding="utf-8")):
                methods.add(f"{family}.{name}")
    return methods


def _manifest(name: str) -> dict[str, object]:
    loaded = yaml.safe_load((REPO / name).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _needed() -> set[str]:
    """Every scope a method the code calls, an event or a shortcut needs."""
    needed = {s for m in _methods_called() for c in _CHANNELS if (s := scope_needed(m, c))}
    return needed | set(_EVENT_SCOPES.values()) | {"commands"}


def test_the_audit_sees_the_methods_the_product_calls() -> None:
    called = _methods_called()
    for method in (
        "auth.test",
        "chat.postMessage",
        "chat.update",
        "chat.postEphemeral",
        "chat.getPermalink",
        "conversations.replies",
        "conversations.info",
        "views.open",
    ):
        assert method in called
    unknown = called - set(METHOD_SCOPES)
    assert not unknown, f"methods without a documented scope in the audit table: {unknown}"


@pytest.mark.parametrize("name", ["manifest.yaml", "manifest.http.yaml"])
def test_each_manifest_grants_exactly_what_the_code_needs(name: str) -> None:
    granted = bot_scopes((REPO / name).read_text(encoding="utf-8"))
    needed = _needed()
    assert needed <= granted, f"{name} lacks {sorted(needed - granted)}"
    assert granted <= needed, f"{name} grants unused {sorted(granted - needed)}"


@pytest.mark.parametrize("name", ["manifest.yaml", "manifest.http.yaml"])
def test_every_subscribed_event_and_shortcut_has_its_scope(name: str) -> None:
    manifest = _manifest(name)
    granted = bot_scopes((REPO / name).read_text(encoding="utf-8"))
    settings = manifest["settings"]
    assert isinstance(settings, dict)
    for event in settings["event_subscriptions"]["bot_events"]:
        assert _EVENT_SCOPES[event] in granted
    features = manifest["features"]
    assert isinstance(features, dict) and features["shortcuts"]
    assert "commands" in granted


def test_the_shipped_manifests_are_the_repository_s() -> None:
    for name in ("manifest.yaml", "manifest.http.yaml"):
        shipped = REPO / "plugin" / "resources" / name
        assert shipped.resolve() == (REPO / name).resolve()


@pytest.mark.parametrize("channel", _CHANNELS)
async def test_check_s_membership_lookup_is_granted(channel: str) -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        client = AsyncWebClient(token="xoxb-1", base_url=slack.base_url)
        info = await client.conversations_info(channel=channel)
        assert info["channel"]["is_member"] is True
        await client.conversations_replies(channel=channel, ts="1.2")
        assert slack.refusals == []


@pytest.mark.parametrize(
    ("method", "channel", "missing"),
    [
        ("conversations_info", "CPUB00001", "channels:read"),
        ("conversations_info", "GPRIV0001", "groups:read"),
        ("conversations_replies", "GPRIV0001", "groups:history"),
        ("chat_postMessage", "CPUB00001", "chat:write"),
    ],
)
async def test_a_scope_the_token_lacks_is_refused_as_slack_refuses_it(
    method: str, channel: str, missing: str
) -> None:
    held = MANIFEST_SCOPES - {missing}
    async with RecordingSlackApi(scopes=held) as slack:
        client = AsyncWebClient(token="xoxb-1", base_url=slack.base_url, retry_handlers=[])
        kwargs = {"channel": channel, "ts": "1.2", "text": "x"}
        if method == "conversations_info":
            kwargs = {"channel": channel}
        with pytest.raises(SlackApiError) as raised:
            await getattr(client, method)(**kwargs)
        assert raised.value.response.status_code == 200
        assert raised.value.response.data == {
            "ok": False,
            "error": "missing_scope",
            "needed": missing,
            "provided": ",".join(sorted(held)),
        }
        assert slack.messages == []


async def test_a_private_channel_with_a_c_id_needs_the_groups_scopes() -> None:
    """Private channels created today have ``C…`` ids too: the type decides, not the prefix."""
    held = MANIFEST_SCOPES - {"groups:history"}
    async with RecordingSlackApi(scopes=held, private_channels=frozenset({"CPRIV0001"})) as slack:
        client = AsyncWebClient(token="xoxb-1", base_url=slack.base_url, retry_handlers=[])
        await client.conversations_replies(channel="CPUB00001", ts="1.2")
        with pytest.raises(SlackApiError) as raised:
            await client.conversations_replies(channel="CPRIV0001", ts="1.2")
        assert raised.value.response["needed"] == "groups:history"


async def test_a_method_outside_the_audit_is_unknown_to_the_double() -> None:
    async with RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        client = AsyncWebClient(token="xoxb-1", base_url=slack.base_url, retry_handlers=[])
        with pytest.raises(SlackApiError) as raised:
            await client.api_call("admin.users.remove", params={"user_id": "U1"})
        assert raised.value.response["error"] == "unknown_method"


def test_scopes_are_read_from_a_manifest_text() -> None:
    text = "oauth_config:\n  scopes:\n    bot:\n      - chat:write\n"
    assert bot_scopes(text) == frozenset({"chat:write"})
    assert Path(REPO / "manifest.yaml").is_file()
