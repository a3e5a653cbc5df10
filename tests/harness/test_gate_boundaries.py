"""The admission gate (``plugin/slack/gate.py``) at its exact boundaries (written for its
cosmic-ray run): which ``app_mention`` events may start a diagnosis, each reason to ignore one
and the order they are checked in, Slack timestamps and user ids at their exact lengths, the
retry header, and the bot's own mention removed with its one separator and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from sre_diag.slack.gate import (
    IgnoreReason,
    gate_mention,
    is_slack_ts,
    malformed_detail,
    own_mention_removed,
    retry_number,
    slack_ts,
)

ADMIN = "C0ADMIN01"
TS = "1764300000.000100"
FIRST: dict[str, list[str]] = {"x-slack-retry-num": ["0"]}


def _event(**fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"channel": ADMIN, "text": "<@UDIAG0001> why", "ts": TS}
    event.update(fields)
    return {k: v for k, v in event.items() if v is not _DROP}


_DROP = object()


def _gate(event: dict[str, Any], headers: dict[str, list[str]] | None = None) -> object:
    return gate_mention(event, FIRST if headers is None else headers, {ADMIN})


# -- gate_mention ----------------------------------------------------------------------------


def test_a_well_formed_mention_in_an_admin_channel_is_admitted() -> None:
    assert _gate(_event()) is None
    assert _gate(_event(), {}) is None
    assert _gate(_event(thread_ts=TS, channel_type="channel", bot_id="", edited=None)) is None
    assert _gate(_event(subtype="thread_broadcast")) is None


@pytest.mark.parametrize(
    ("retry", "admitted"), [("0", True), ("1", False), ("2", False), ("-1", True)]
)
def test_a_slack_retry_is_ignored_from_the_first_retry_on(retry: str, admitted: bool) -> None:
    reason = _gate(_event(), {"x-slack-retry-num": [retry]})
    assert reason is (None if admitted else IgnoreReason.SLACK_RETRY)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"bot_id": "B01"}, IgnoreReason.FROM_BOT),
        ({"subtype": "bot_message"}, IgnoreReason.FROM_BOT),
        ({"edited": {"user": "U1", "ts": TS}}, IgnoreReason.EDITED),
        ({"subtype": "message_changed"}, IgnoreReason.EDITED),
        ({"channel_type": "im"}, IgnoreReason.DIRECT_MESSAGE),
        ({"channel": "D0DIRECT1"}, IgnoreReason.DIRECT_MESSAGE),
        ({"channel": "C0OTHER01"}, IgnoreReason.NOT_ADMIN_CHANNEL),
        ({"channel": "c0admin01"}, IgnoreReason.NOT_ADMIN_CHANNEL),
        ({"ts": _DROP}, IgnoreReason.MALFORMED),
        ({"channel": ""}, IgnoreReason.MALFORMED),
    ],
)
def test_each_reason_to_ignore_a_mention(fields: dict[str, Any], reason: IgnoreReason) -> None:
    assert _gate(_event(**fields)) is reason


def test_the_reasons_are_checked_in_order() -> None:
    retry = {"x-slack-retry-num": ["1"]}
    everything = _event(bot_id="B01", edited={"ts": TS}, ts=_DROP, channel_type="im")
    assert _gate(everything, retry) is IgnoreReason.SLACK_RETRY
    assert _gate(everything) is IgnoreReason.FROM_BOT
    assert _gate(_event(edited={"ts": TS}, ts=_DROP, channel_type="im")) is IgnoreReason.EDITED
    assert _gate(_event(ts=_DROP, channel="D0DIRECT1")) is IgnoreReason.MALFORMED
    assert _gate(_event(channel="D0DIRECT1")) is IgnoreReason.DIRECT_MESSAGE
    # A direct message is one even when its id is listed as an admin channel.
    assert gate_mention(_event(channel="D0DIRECT1"), FIRST, {"D0DIRECT1"}) is (
        IgnoreReason.DIRECT_MESSAGE
    )
    assert gate_mention(_event(), FIRST, set()) is IgnoreReason.NOT_ADMIN_CHANNEL


# -- retry_number ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "number"),
    [
        ({}, 0),
        ({"x-slack-retry-num": []}, 0),
        ({"x-slack-retry-num": ["0"]}, 0),
        ({"x-slack-retry-num": ["1"]}, 1),
        ({"x-slack-retry-num": ["3", "1"]}, 3),
        ({"x-slack-retry-num": ["many"]}, 0),
        ({"x-slack-retry-num": [None]}, 0),  # type: ignore[list-item]
        ({"X-Slack-Retry-Num": ["2"]}, 0),
    ],
)
def test_the_retry_number(headers: dict[str, list[str]], number: int) -> None:
    assert retry_number(headers) == number


# -- malformed_detail ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({}, None),
        ({"thread_ts": TS}, None),
        ({"channel": _DROP}, "no channel"),
        ({"channel": ""}, "no channel"),
        ({"channel": 42}, "no channel"),
        ({"text": _DROP}, "no text"),
        ({"text": None}, "no text"),
        ({"text": ""}, None),
        ({"ts": _DROP}, "no ts"),
        ({"ts": "yesterday"}, "no well-formed ts"),
        ({"ts": 1764300000.0001}, "no well-formed ts"),
        ({"thread_ts": "x"}, "malformed thread_ts"),
        ({"thread_ts": None}, "malformed thread_ts"),
    ],
)
def test_why_a_mention_is_malformed(fields: dict[str, Any], detail: str | None) -> None:
    assert malformed_detail(_event(**fields)) == detail


def test_the_first_malformed_field_is_named() -> None:
    assert malformed_detail({"text": 1, "ts": "x"}) == "no channel"
    assert malformed_detail({"channel": ADMIN, "ts": "x"}) == "no text"
    assert malformed_detail({"channel": ADMIN, "text": "", "thread_ts": "x"}) == "no ts"


# -- Slack timestamps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "well_formed"),
    [
        (TS, True),
        ("1.1", True),
        ("123456789012.123456789", True),  # 12 digits, a dot, 9 digits: the longest
        ("1234567890123.1", False),
        ("1.1234567890", False),
        (".1", False),
        ("1.", False),
        ("1764300000", False),
        (" 1764300000.000100", False),
        ("1764300000.000100\n", False),
        ("1764300000,000100", False),
        ("１７６４.１", False),  # full-width digits are not ASCII
        (1764300000.0001, False),
        (None, False),
    ],
)
def test_a_slack_ts_is_a_bounded_ascii_string(value: object, well_formed: bool) -> None:
    assert slack_ts(value) == (value if well_formed else None)
    assert is_slack_ts(value) is well_formed


# -- own_mention_removed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bot", "removed"),
    [
        ("UA", True),  # the shortest id: one character after U/W
        ("W0BOT", True),
        ("U" + "A" * 40, True),  # the longest
        ("U" + "A" * 41, False),
        ("U", False),
        ("X0BOT", False),
        ("u0bot", False),
        ("U0BOT\n", False),
    ],
)
def test_the_bot_id_is_checked_before_use(bot: str, removed: bool) -> None:
    text = f"<@{bot}> why"
    assert own_mention_removed(text, bot) == ("why" if removed else text)


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("<@UB>", ""),
        ("<@UB>", ""),
        ("  <@UB>", ""),
        ("why\n <@UB> \n", "why"),
        ("why <@UB>\t", "why"),
        ("<@UB> why", "why"),
        ("<@UB> \n why", "why"),
        ("a <@UB> b", "a b"),
        ("a  <@UB> b", "a b"),
        ("a\n<@UB> b", "a\nb"),
        ("a\n <@UB> b", "a\n b"),
        ("a <@UB>\nb", "a\nb"),
        ("a\n\n<@UB>\n\nb", "a\n\nb"),
        ("a<@UB>b", "ab"),
        ("a <@UB><@UB> b", "a b"),
        ("<@UB>\n<@UB> b", "b"),
        ("a\n<@UB>\n<@UB> b", "a\nb"),
        ("x <@UB> y <@UB> z", "x y z"),
        ("x <@UB>y <@UB>z", "xyz"),
        ("x\n<@UB>y\n<@UB>z", "x\ny\nz"),
        ("a\t<@UB> b", "a b"),  # a tab is a space before it, only a line break stays
        ("x" * 300 + "\n<@UB>", "x" * 300),  # at the end of a long text (not a cached int)
        ("a\n<@UB> x <@UB><@UB>\tb", "a\nx\tb"),  # glued to the one before, not at a line start
        ("a\n<@UB> <@UB> <@UB>\tb", "a\nb"),  # each goes with its separator after a line break
        ("<@UB|diag> why", "why"),
        ("<@UB|> why", "why"),
        ("<@UB|a|b> why", "why"),
        ("<@UBC> why", "<@UBC> why"),
        ("<@UB why", "<@UB why"),
    ],
)
def test_the_bots_mention_goes_with_its_one_separator(text: str, query: str) -> None:
    assert own_mention_removed(text, "UB") == query
