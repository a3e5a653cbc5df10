"""The Query of a posted message, the alert gate and the cooldown pattern (CONTRACTS §10), on
the pure functions: flattening verbatim in its fixed order, never cut; only Slack's own
``bot_id`` / ``app_id`` make a message an alert; alerts that differ only in numbers, hosts and
ids share a pattern."""

from __future__ import annotations

from typing import Any

import pytest

from sre_diag.slack.alerts import (
    AlertIgnore,
    alert_pattern,
    cooldown_key,
    gate_alert,
    message_query,
)

ADMIN = "CADMIN0001"
SOURCES = frozenset({"B0ALERTS01", "A0GRAFANA1"})
BIDI = "\u202eevil\u202c \u200b"


def test_attachments_flatten_title_text_then_fields_verbatim() -> None:
    message = {
        "text": "",
        "attachments": [
            {
                "fallback": "not shown when the rest is",
                "title": "[FIRING:2] *DiskFull* <!channel>",
                "text": "node-7 /var at 97%\n  second line kept as posted  ",
                "fields": [
                    {"title": "host", "value": "10.0.3.17", "short": True},
                    {"title": "runbook", "value": "<https://wiki/x|wiki> <@U0ALICE99>"},
                    {"title": "", "value": "value without a name"},
                ],
                "footer": "Grafana v11",
            },
            {"fallback": "only a fallback here", "color": "danger"},
        ],
    }
    assert message_query(message) == (
        "[FIRING:2] *DiskFull* <!channel>\n"
        "node-7 /var at 97%\n  second line kept as posted  \n"
        "host: 10.0.3.17\n"
        "runbook: <https://wiki/x|wiki> <@U0ALICE99>\n"
        "value without a name\n"
        "only a fallback here"
    )


def test_text_then_attachments_and_pretext_first() -> None:
    message = {
        "text": "Alert from prod ~strike~",
        "attachments": [{"pretext": "pre", "title": "t", "text": "x", "fields": []}],
    }
    assert message_query(message) == "Alert from prod ~strike~\npre\nt\nx"


def test_blocks_replace_the_notification_text() -> None:
    message = {
        "text": "fallback for notifications",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": "Incident #4521"}},
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "*payment-api* 5xx > 5%"},
                "fields": [
                    {"type": "mrkdwn", "text": "*Severity:* SEV2"},
                    {"type": "plain_text", "text": "Since 10:05"},
                ],
            },
            {"type": "divider"},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "PagerDuty"}]},
            {
                "type": "rich_text",
                "elements": [
                    {
                        "type": "rich_text_section",
                        "elements": [
                            {"type": "text", "text": "see "},
                            {"type": "link", "url": "https://pd.example/i/4521", "text": "PD"},
                            {"type": "text", "text": " cc "},
                            {"type": "user", "user_id": "U0BOB"},
                            {"type": "emoji", "name": "fire"},
                        ],
                    },
                    {
                        "type": "rich_text_list",
                        "elements": [
                            {
                                "type": "rich_text_section",
                                "elements": [{"type": "text", "text": "item 1"}],
                            }
                        ],
                    },
                ],
            },
            {"type": "actions", "elements": [{"type": "button", "text": {"text": "Ack"}}]},
        ],
    }
    assert message_query(message) == (
        "Incident #4521\n*payment-api* 5xx > 5%\n*Severity:* SEV2\nSince 10:05\nPagerDuty\n"
        "see <https://pd.example/i/4521|PD> cc <@U0BOB>:fire:\nitem 1"
    )


def test_a_plain_message_is_its_text_as_posted() -> None:
    text = f"  why 5xx <@U0ALICE99>? {BIDI} 订单 ord_10290 🙂\n\nnext  "
    assert message_query({"text": text}) == text


@pytest.mark.parametrize(
    "message",
    [{}, {"text": "   "}, {"attachments": "nope", "blocks": 7}, {"attachments": [{"fields": [1]}]}],
)
def test_no_visible_text_is_empty(message: dict[str, Any]) -> None:
    assert message_query(message) == ""


def test_a_huge_message_is_never_cut() -> None:
    text = "x" * 50_000
    assert message_query({"attachments": [{"text": text}]}) == text


def _alert(**fields: Any) -> dict[str, Any]:
    event = {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": "B0ALERTS01",
        "channel": ADMIN,
        "ts": "1764300000.000100",
        "text": "disk full",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, None),
        ({"subtype": None}, None),
        ({"bot_id": "B0OTHER001", "app_id": "A0GRAFANA1"}, None),
        ({"thread_ts": "1764300000.000100"}, None),  # a thread's root is top-level
        ({"subtype": "message_changed"}, AlertIgnore.EDITED),
        ({"edited": {"user": "B0ALERTS01"}}, AlertIgnore.EDITED),
        ({"subtype": "message_deleted"}, AlertIgnore.DELETED),
        ({"subtype": "channel_join"}, AlertIgnore.OTHER_SUBTYPE),
        ({"subtype": "thread_broadcast"}, AlertIgnore.OTHER_SUBTYPE),
        ({"thread_ts": "1764299999.000001"}, AlertIgnore.THREAD_REPLY),
        ({"bot_id": "B0OTHER001"}, AlertIgnore.NOT_AN_ALERT_SOURCE),
        ({"bot_id": "B0DIAG0001"}, AlertIgnore.OWN_MESSAGE),
        ({"channel": "COTHER0002"}, AlertIgnore.NOT_ADMIN_CHANNEL),
        ({"ts": "1764300000"}, AlertIgnore.MALFORMED),
        ({"channel": 7}, AlertIgnore.MALFORMED),
        # A person's message naming a source as its username, profile or app is no alert.
        ({"bot_id": None, "subtype": None, "user": "U0MALLORY", "username": "B0ALERTS01"},
         AlertIgnore.NOT_AN_ALERT_SOURCE),
        ({"bot_id": None, "app_id": "A0GRAFANA1", "user": "U0MALLORY"},
         AlertIgnore.NOT_AN_ALERT_SOURCE),
        ({"bot_id": "", "bot_profile": {"app_id": "A0GRAFANA1"}},
         AlertIgnore.NOT_AN_ALERT_SOURCE),
    ],
)  # fmt: skip
def test_the_alert_gate(fields: dict[str, Any], reason: AlertIgnore | None) -> None:
    assert gate_alert(_alert(**fields), SOURCES, {ADMIN}, "B0DIAG0001") is reason


def test_no_sources_means_no_automatic_runs() -> None:
    assert gate_alert(_alert(), (), {ADMIN}, None) is AlertIgnore.NO_ALERT_SOURCES


def test_the_app_id_of_a_bot_profile_counts_beside_a_bot_id() -> None:
    event = _alert(bot_id="B0OTHER001", bot_profile={"app_id": "A0GRAFANA1"})
    assert gate_alert(event, SOURCES, {ADMIN}, None) is None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("[FIRING:1] HighLatency host=web-17 p99=1834ms",
         "[FIRING:3] HighLatency host=web-02 p99=912ms"),
        ("disk /var on 10.0.3.17 at 97%\nid 7f3a9c2e-1b2c-4d5e-8f90-123456789abc",
         "disk /var on 10.0.9.4 at 91%\nid 0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"),
        ("订单 ord_10290 支付失败 after 3 retries", "订单 ord_88812 支付失败 after 12 retries"),
    ],
)  # fmt: skip
def test_alerts_differing_only_in_numbers_hosts_ids_share_a_pattern(
    first: str, second: str
) -> None:
    assert alert_pattern(first) == alert_pattern(second)
    assert cooldown_key("A:T", ADMIN, first) == cooldown_key("A:T", ADMIN, second)


def test_other_alerts_channels_and_apps_do_not() -> None:
    key = cooldown_key("A:T", ADMIN, "HighLatency host=web-17")
    assert key != cooldown_key("A:T", ADMIN, "DiskFull host=web-17")
    assert key != cooldown_key("A:T", "CADMIN0003", "HighLatency host=web-17")
    assert key != cooldown_key("B:T", ADMIN, "HighLatency host=web-17")
