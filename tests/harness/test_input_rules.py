"""Input rules: blank or oversized input is refused before any model call, never truncated."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from sre_diag.contract.prompts import system_prompt
from sre_diag.contract.request import (
    DiagnosisRequest,
    InputLimits,
    PreviousTurn,
    model_input,
    parse_asked_at,
    parse_previous_turn,
    slack_ts_moment,
)
from sre_diag.errors import InputRejected, InputRejection
from tests.conftest import StartServer
from tests.harness.support import harness

LIMITS = InputLimits(max_query_bytes=64, max_previous_turn_bytes=96, max_input_bytes=160)


def _code(request: DiagnosisRequest, limits: InputLimits = LIMITS) -> InputRejection:
    with pytest.raises(InputRejected) as info:
        model_input(request, limits)
    return info.value.code


def test_blank_query_is_rejected() -> None:
    for query in ("", "   ", "\n\t"):
        assert _code(DiagnosisRequest(query)) is InputRejection.BLANK_QUERY


def test_query_at_the_limit_passes_verbatim_and_one_byte_more_is_rejected() -> None:
    query = "a" * 63 + " "
    asked = datetime(2026, 11, 28, 18, 20, tzinfo=timezone(timedelta(hours=8)))
    message = json.loads(model_input(DiagnosisRequest(query, asked_at=asked), LIMITS))
    assert message == {"query": query, "previous_turn": None, "asked_at": "2026-11-28T10:20:00Z"}
    assert _code(DiagnosisRequest(query + "b")) is InputRejection.QUERY_TOO_LARGE


def test_previous_turn_and_total_input_limits() -> None:
    big_turn = PreviousTurn(query="q", conclusion="c" * 90, missing_info=())
    assert _code(DiagnosisRequest("q", big_turn)) is InputRejection.PREVIOUS_TURN_TOO_LARGE
    turn = PreviousTurn(query="q" * 20, conclusion=None, missing_info=("m" * 20,))
    tight = InputLimits(max_query_bytes=64, max_previous_turn_bytes=96, max_input_bytes=100)
    assert _code(DiagnosisRequest("x" * 60, turn), tight) is InputRejection.INPUT_TOO_LARGE


@pytest.mark.parametrize(
    "text",
    [
        '{"query": "q", "conclusion": null}',
        '{"query": "q", "conclusion": null, "missing_info": [], "history": []}',
        '{"query": "", "conclusion": null, "missing_info": []}',
        '{"query": "q", "conclusion": 3, "missing_info": []}',
        "not json",
    ],
)
def test_previous_turn_has_exactly_the_contract_keys(text: str) -> None:
    with pytest.raises(InputRejected) as info:
        parse_previous_turn(text)
    assert info.value.code is InputRejection.INVALID_PREVIOUS_TURN


async def test_rejection_happens_before_any_model_call(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([])
    h = harness(server, tmp_path, DIAG_MAX_INPUT_BYTES=40)
    with pytest.raises(InputRejected) as info:
        await h.diagnose(DiagnosisRequest("payment-api 5xx since 10:05 please"))
    assert info.value.code is InputRejection.INPUT_TOO_LARGE
    assert server.request_count == 0


def test_asked_at_defaults_to_now_and_must_carry_a_zone() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    message = json.loads(model_input(DiagnosisRequest("q"), LIMITS))
    told = datetime.fromisoformat(message["asked_at"])
    assert before <= told <= datetime.now(UTC)
    with pytest.raises(ValueError):
        parse_asked_at("2026-11-28T10:20:00")
    with pytest.raises(ValueError):
        parse_asked_at("yesterday")
    assert parse_asked_at("2026-11-28T10:20:00+01:00") == datetime(2026, 11, 28, 9, 20, tzinfo=UTC)
    moment = slack_ts_moment("1795861200.250000")
    assert moment == datetime(2026, 11, 28, 10, 20, 0, 250000, tzinfo=UTC)
    assert slack_ts_moment("1e999") is None


def test_prompt_tells_the_model_to_resolve_relative_times_against_asked_at() -> None:
    prompt = system_prompt()
    rule = next(line for line in prompt.splitlines() if "相对时间" in line)
    assert "`asked_at`" in rule and "checked_scope" in rule
    assert "只有三个字段" in prompt
