"""The input rules at their exact boundaries, in UTF-8 bytes (written from the cosmic-ray
survivors of ``plugin/contract/request.py``): a previous turn or a whole message of exactly its
limit is
accepted and one byte more is refused; CJK text is counted and sent as UTF-8, never as ``\\u``
escapes (which would triple its size); the frozen turn, the request and its limits are
immutable; the turn budget leaves room for a full-size follow-up query next to it (a turn of
exactly that budget and a query of exactly its limit are accepted together). Also here, so the
mutation run kills them in its fast first step: the query limit at its exact byte, blank
queries, ``asked_at`` rendered and parsed, odd Slack ``ts`` values that have no moment."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from sre_diag.contract.request import (
    ENVELOPE_BYTES,
    DiagnosisRequest,
    InputLimits,
    PreviousTurn,
    format_asked_at,
    model_input,
    parse_asked_at,
    slack_ts_moment,
)
from sre_diag.errors import InputRejected, InputRejection

ASKED = datetime(2026, 11, 28, 10, 30, tzinfo=UTC)
BIG = 1 << 20


def _turn(conclusion: str) -> PreviousTurn:
    return PreviousTurn(query="payment-api 5xx", conclusion=conclusion, missing_info=("连接池",))


def _message(query: str, turn: PreviousTurn | None = None) -> str:
    return model_input(DiagnosisRequest(query, turn, ASKED), InputLimits(BIG, BIG, BIG))


@pytest.mark.parametrize("filler", ["x", "连", "🚀"])
def test_a_previous_turn_of_exactly_its_limit_is_accepted(filler: str) -> None:
    turn = _turn(filler * 50)
    size = len(turn.to_json().encode("utf-8"))
    model_input(DiagnosisRequest("q", turn, ASKED), InputLimits(BIG, size, BIG))
    with pytest.raises(InputRejected) as refused:
        model_input(DiagnosisRequest("q", turn, ASKED), InputLimits(BIG, size - 1, BIG))
    assert refused.value.code is InputRejection.PREVIOUS_TURN_TOO_LARGE


@pytest.mark.parametrize("query", ["payment-api 5xx", "支付接口 5xx 从 10:05 开始", "🔥 ord_10290"])
def test_a_message_of_exactly_its_limit_is_accepted(query: str) -> None:
    size = len(_message(query, _turn("池")).encode("utf-8"))
    model_input(DiagnosisRequest(query, _turn("池"), ASKED), InputLimits(BIG, BIG, size))
    with pytest.raises(InputRejected) as refused:
        model_input(DiagnosisRequest(query, _turn("池"), ASKED), InputLimits(BIG, BIG, size - 1))
    assert refused.value.code is InputRejection.INPUT_TOO_LARGE


def test_cjk_is_sent_and_counted_as_utf8_never_as_escapes() -> None:
    query = "支付接口连接池耗尽"
    message = _message(query, _turn("连接池耗尽"))
    assert query in message and "连接池耗尽" in message and "\\u" not in message
    assert json.loads(message)["previous_turn"]["missing_info"] == ["连接池"]
    # The frozen turn's own JSON (what its byte limit counts) is UTF-8 too: 3 bytes a character.
    turn_json = _turn("连" * 100).to_json()
    assert "\\u" not in turn_json
    assert len(turn_json.encode("utf-8")) < 100 * 6


def test_the_frozen_turn_is_immutable_and_strict() -> None:
    turn = _turn("x")
    with pytest.raises(ValidationError):
        turn.query = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        PreviousTurn.model_validate({"query": "q", "conclusion": None, "missing_info": "abc"})
    with pytest.raises(ValidationError):
        PreviousTurn.model_validate({"query": b"q", "conclusion": None, "missing_info": []})


@pytest.mark.parametrize(
    ("query", "turn", "total", "budget"),
    [
        (4096, 20480, 24576, 20480 - ENVELOPE_BYTES),
        (4096, 10000, 24576, 10000),
        (1000, 20480, 1200, 0),
        (1000, 5000, 1000 + ENVELOPE_BYTES + 1, 1),
    ],
)
def test_the_turn_budget_leaves_room_for_a_full_size_follow_up(
    query: int, turn: int, total: int, budget: int
) -> None:
    assert InputLimits(query, turn, total).turn_budget() == budget


@pytest.mark.parametrize(
    ("ts", "moment"),
    [
        ("1764324000.000100", datetime(2025, 11, 28, 10, 0, 0, 100, tzinfo=UTC)),
        ("0.0", datetime(1970, 1, 1, tzinfo=UTC)),
        ("abc", None),  # ValueError
        ("nan", None),  # ValueError
        ("1e12", None),  # ValueError: year out of range
        ("1e400", None),  # OverflowError
        ("1e18", None),  # OSError
    ],
)
def test_an_odd_slack_ts_has_no_moment(ts: str, moment: datetime | None) -> None:
    assert slack_ts_moment(ts) == moment


def test_asked_at_is_rendered_in_utc_to_the_second() -> None:
    paris = timezone(timedelta(hours=1))
    assert format_asked_at(datetime(2026, 11, 28, 11, 30, 59, 999999, tzinfo=paris)) == (
        "2026-11-28T10:30:59Z"
    )
    with pytest.raises(ValueError):
        format_asked_at(datetime(2026, 11, 28, 10, 30))


def test_asked_at_is_parsed_with_its_zone_or_refused() -> None:
    assert parse_asked_at(" 2026-11-28T11:30:00+01:00\n") == ASKED
    assert parse_asked_at("2026-11-28T10:30:00Z").utcoffset() == timedelta(0)
    for odd in ("2026-11-28T10:30:00", "yesterday", "2026-11-28T10:30:00 UTC"):
        with pytest.raises(ValueError):
            parse_asked_at(odd)
    for edge in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-00:01"):
        # out of range once in UTC: refused here (a ValueError, as documented), not in a run
        with pytest.raises(ValueError, match="out of range"):
            parse_asked_at(edge)


@pytest.mark.parametrize("query", ["q" * 40, "连" * 13 + "x"])
def test_a_query_of_exactly_its_limit_is_accepted(query: str) -> None:
    size = len(query.encode("utf-8"))
    assert json.loads(
        model_input(DiagnosisRequest(query, None, ASKED), InputLimits(size, BIG, BIG))
    ) == {"query": query, "previous_turn": None, "asked_at": "2026-11-28T10:30:00Z"}
    with pytest.raises(InputRejected) as refused:
        model_input(DiagnosisRequest(query, None, ASKED), InputLimits(size - 1, BIG, BIG))
    assert refused.value.code is InputRejection.QUERY_TOO_LARGE
    for blank in ("", " \n\t"):
        with pytest.raises(InputRejected) as refused:
            model_input(DiagnosisRequest(blank, None, ASKED), InputLimits(BIG, BIG, BIG))
        assert refused.value.code is InputRejection.BLANK_QUERY


@pytest.mark.parametrize("char", ["x", "连"])
def test_a_turn_of_its_budget_leaves_room_for_a_full_size_follow_up(char: str) -> None:
    limits = InputLimits(max_query_bytes=600, max_previous_turn_bytes=4096, max_input_bytes=1400)
    budget = limits.turn_budget()
    assert budget == 1400 - 600 - ENVELOPE_BYTES
    turn = _turn("")
    filler = budget - len(turn.to_json().encode("utf-8"))
    turn = _turn(char * (filler // len(char.encode("utf-8"))) + "x" * (filler % len(char.encode())))
    assert len(turn.to_json().encode("utf-8")) == budget
    query = "q" * 600
    message = model_input(DiagnosisRequest(query, turn, ASKED), limits)
    assert len(message.encode("utf-8")) <= limits.max_input_bytes


def test_a_request_and_its_limits_cannot_change_once_made() -> None:
    request = DiagnosisRequest("payment-api 5xx", None, ASKED)
    limits = InputLimits(100, 100, 1000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.query = "  "  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_input_bytes = BIG  # type: ignore[misc]
    assert (request.query, limits.max_input_bytes) == ("payment-api 5xx", 1000)
