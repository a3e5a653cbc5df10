"""``slack_error_code``, the one reading of a Slack Web API error: Slack's short error code when
the response carries one, None otherwise — whatever else an answer holds never comes out raw."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse

from sre_diag.slack.posting import failure_name, slack_error_code

_CODE = re.compile(r"[a-z0-9_.]{1,64}")


def _refused(data: Any, status: int = 200) -> SlackApiError:
    """The error slack_sdk raises for an answer ``data`` (what ``chat.postMessage`` got)."""
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.test/api/chat.postMessage",
        req_args={},
        data=data,
        headers={},
        status_code=status,
    )
    return SlackApiError("The request to the Slack API failed.", response)


@pytest.mark.parametrize(
    "code", ["invalid_blocks", "ratelimited", "channel_not_found", "msg_too_long", "a" * 64]
)
def test_a_slack_code_comes_out_as_it_is(code: str) -> None:
    exc = _refused({"ok": False, "error": code})
    assert slack_error_code(exc) == code
    assert failure_name(exc) == code


@pytest.mark.parametrize(
    "error",
    [
        "<!here> token xoxb-CANARY",
        "Invalid_Blocks",
        "invalid blocks",
        "invalid_blocks\nsecond line",
        "a" * 65,
        "",
        None,
        123,
        ["invalid_blocks"],
    ],
)
def test_anything_else_is_no_code(error: object) -> None:
    exc = _refused({"ok": False, "error": error})
    assert slack_error_code(exc) is None
    assert failure_name(exc) == "SlackApiError"


def test_an_answer_without_an_error_field_or_a_proxy_page_is_no_code() -> None:
    assert slack_error_code(_refused({"ok": False})) is None
    assert slack_error_code(_refused("<html>502 Bad Gateway CANARY</html>", status=502)) is None


def test_a_failure_that_is_not_slack_answering_is_named_by_its_type() -> None:
    assert slack_error_code(TimeoutError("CANARY")) is None
    assert failure_name(TimeoutError("CANARY")) == "TimeoutError"
    assert failure_name(ConnectionRefusedError("CANARY")) == "ConnectionRefusedError"


@given(st.one_of(st.text(max_size=80), st.from_regex(_CODE, fullmatch=True)))
def test_the_code_is_the_answer_or_nothing(error: str) -> None:
    code = slack_error_code(_refused({"ok": False, "error": error}))
    assert code is None or (code == error and _CODE.fullmatch(code))
