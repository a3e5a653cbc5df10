"""The input rules at their exact boundaries, in UTF-8 bytes (written from the cosmic-ray
survivors of ``plugin/contract/request.py``): a previous turn or a whole message of exactly its
limit is
accepted and one byte more is refused; CJK text is counted and sent as UTF-8, never as ``\\u``
escapes (which would triple its size); the frozen turn is immutable; the turn budget leaves
room for a full-size follow-up query next to it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from plugin.contract.request import (
    ENVELOPE_BYTES,
    DiagnosisRequest,
    InputLimits,
    PreviousTurn,
    model_input,
)
from plugin.errors import InputRejected, InputRejection

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
