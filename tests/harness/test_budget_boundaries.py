"""The exact edges of every budget rule (``sre_diag.harness.budget``; mutation testing, issue 22).

Each limit is tested AT its value and one past it, so that ``<=`` turned into ``<`` (or ``>=``
into ``>``) fails a test: the byte capacity kept for the Draft, the run capacity, the NO_GAIN
streak, the tool-call and model-round budgets (one round of headroom), the token budget before
and after a round, the completion tokens a request may ask for and the overrun of a final round.
"""

from __future__ import annotations

from typing import Any

import pytest

from sre_diag.errors import BudgetStop, StopReason
from sre_diag.harness.budget import Budgets, Usage, estimated_tokens

BUDGETS_FIELDS: dict[str, Any] = dict(
    max_model_calls=8, max_total_tokens=60_000, deadline_seconds=120.0, max_tool_calls=6,
    no_gain_streak=2, max_observation_bytes=4096, max_draft_bytes=16_384,
    run_capacity_bytes=65_536,
)  # fmt: skip
BUDGETS = Budgets(**BUDGETS_FIELDS)


def test_the_draft_room_is_kept_up_to_the_last_byte() -> None:
    room = BUDGETS.run_capacity_bytes - BUDGETS.max_draft_bytes
    used = Usage(bytes=1000)
    assert BUDGETS.keeps_draft(used, room - 1000) is True  # exactly the Draft's room left
    assert BUDGETS.keeps_draft(used, room - 999) is False


def test_the_run_capacity_is_reached_not_passed() -> None:
    used = Usage(bytes=1000)
    assert BUDGETS.within_capacity(used, BUDGETS.run_capacity_bytes - 1000) is True
    assert BUDGETS.within_capacity(used, BUDGETS.run_capacity_bytes - 999) is False


def test_saturation_at_exactly_the_streak() -> None:
    assert BUDGETS.saturated(BUDGETS.no_gain_streak - 1) is False
    assert BUDGETS.saturated(BUDGETS.no_gain_streak) is True
    assert BUDGETS.saturated(BUDGETS.no_gain_streak + 1) is True  # past it too, not only at it
    assert BUDGETS.stop_cause(Usage(), BUDGETS.no_gain_streak) is StopReason.INFORMATION_SATURATED
    assert BUDGETS.stop_cause(Usage(), BUDGETS.no_gain_streak - 1) is None


def test_the_last_tool_call_and_the_last_round() -> None:
    one_tool_left = Usage(tool_calls=BUDGETS.max_tool_calls - 1)
    assert BUDGETS.stop_cause(one_tool_left, 0) is None
    no_tool_left = Usage(tool_calls=BUDGETS.max_tool_calls)
    assert BUDGETS.stop_cause(no_tool_left, 0) is StopReason.TOOL_CALL_BUDGET_EXHAUSTED
    # One round of headroom: in round N-1 of N a tool still runs (round N reads it).
    one_round_after = Usage(model_calls=BUDGETS.max_model_calls - 1)
    assert BUDGETS.stop_cause(one_round_after, 0) is None
    last_round = Usage(model_calls=BUDGETS.max_model_calls)
    assert BUDGETS.stop_cause(last_round, 0) is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    # Past the limits as well (a comparison that holds only AT the limit is not the rule).
    over_tools = Usage(tool_calls=BUDGETS.max_tool_calls + 1)
    assert BUDGETS.stop_cause(over_tools, 0) is StopReason.TOOL_CALL_BUDGET_EXHAUSTED
    past_rounds = Usage(model_calls=BUDGETS.max_model_calls + 1)
    assert BUDGETS.stop_cause(past_rounds, 0) is StopReason.MODEL_CALL_BUDGET_EXHAUSTED


def test_tokens_for_one_more_round_like_the_last_plus_the_observation() -> None:
    last, observation = 10_000, BUDGETS.observation_tokens
    assert observation == 1024  # 4096 bytes at four bytes a token
    room = BUDGETS.max_total_tokens - last - observation
    exactly = Usage(prompt_tokens=room, last_round_tokens=last)
    assert BUDGETS.stop_cause(exactly, 0) is None
    short_by_one = Usage(prompt_tokens=room + 1, last_round_tokens=last)
    assert BUDGETS.stop_cause(short_by_one, 0) is StopReason.TOKEN_BUDGET_EXHAUSTED
    # The observation's estimate counts: the last round alone would fit.
    without_it = Usage(prompt_tokens=room + observation, last_round_tokens=last)
    assert BUDGETS.stop_cause(without_it, 0) is StopReason.TOKEN_BUDGET_EXHAUSTED


@pytest.mark.parametrize(("nbytes", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (4097, 1025)])
def test_bytes_are_estimated_at_four_a_token_rounded_up(nbytes: int, tokens: int) -> None:
    assert estimated_tokens(nbytes) == tokens
    odd = Budgets(**{**BUDGETS_FIELDS, "max_observation_bytes": nbytes or 1})
    assert odd.observation_tokens == max(tokens, 1)


def test_the_completion_tokens_left_are_the_tokens_left_minus_the_next_prompt() -> None:
    last = 3_000
    used = Usage(prompt_tokens=40_000, completion_tokens=1_000, last_round_tokens=last)
    left = BUDGETS.max_total_tokens - 41_000 - last
    assert BUDGETS.completion_tokens_left(used) == left
    assert BUDGETS.max_tokens(used) == min(left, BUDGETS.max_draft_bytes) == left
    # Never more than the largest Draft (a token is at least a byte): the first round.
    assert BUDGETS.max_tokens(Usage()) == BUDGETS.max_draft_bytes
    assert BUDGETS.completion_tokens_left(Usage()) == BUDGETS.max_total_tokens
    # One token left for the completion is still a round; none is not.
    one = Usage(prompt_tokens=BUDGETS.max_total_tokens - last - 1, last_round_tokens=last)
    assert BUDGETS.max_tokens(one) == 1
    BUDGETS.check_tokens_before_round(one)
    none = Usage(prompt_tokens=BUDGETS.max_total_tokens - last, last_round_tokens=last)
    assert BUDGETS.max_tokens(none) == 1  # never 0 or negative on the wire
    with pytest.raises(BudgetStop) as refused:
        BUDGETS.check_tokens_before_round(none)
    assert refused.value.reason is StopReason.TOKEN_BUDGET_EXHAUSTED


def test_the_overrun_is_what_went_past_the_budget() -> None:
    budget = BUDGETS.max_total_tokens
    assert BUDGETS.overrun(Usage(prompt_tokens=budget)) == 0
    assert BUDGETS.overrun(Usage(prompt_tokens=budget - 5)) == 0
    assert BUDGETS.overrun(Usage(prompt_tokens=budget, completion_tokens=1)) == 1
    assert BUDGETS.overrun(Usage(prompt_tokens=10**15, completion_tokens=3)) == 10**15 + 3 - budget


def test_token_budget_before_and_after_a_round() -> None:
    at_limit = Usage(prompt_tokens=BUDGETS.max_total_tokens - 1, completion_tokens=1)
    BUDGETS.check_tokens_after_round(at_limit)  # landing exactly on the budget stands
    with pytest.raises(BudgetStop) as before:
        BUDGETS.check_tokens_before_round(at_limit)  # and no round follows it
    assert before.value.reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    over = Usage(prompt_tokens=BUDGETS.max_total_tokens, completion_tokens=1)
    with pytest.raises(BudgetStop):
        BUDGETS.check_tokens_after_round(over)
    BUDGETS.check_tokens_before_round(Usage(prompt_tokens=BUDGETS.max_total_tokens - 1))
    with pytest.raises(BudgetStop):  # past the budget (a round that overran it) as well
        BUDGETS.check_tokens_before_round(over)


def test_model_calls_up_to_the_budget() -> None:
    BUDGETS.check_before_model_call(Usage(model_calls=BUDGETS.max_model_calls - 1))
    with pytest.raises(BudgetStop) as stopped:
        BUDGETS.check_before_model_call(Usage(model_calls=BUDGETS.max_model_calls))
    assert stopped.value.reason is StopReason.MODEL_CALL_BUDGET_EXHAUSTED
    with pytest.raises(BudgetStop):
        BUDGETS.check_before_model_call(Usage(model_calls=BUDGETS.max_model_calls + 1))


def test_a_run_starts_having_consumed_nothing() -> None:
    fresh = Usage()
    assert (fresh.model_calls, fresh.prompt_tokens, fresh.completion_tokens) == (0, 0, 0)
    assert (fresh.tool_calls, fresh.bytes, fresh.last_round_tokens) == (0, 0, 0)
    assert fresh.overrun_tokens == 0
    assert fresh.total_tokens == 0 and fresh.usage_estimated is False


def test_a_misspelt_counter_is_an_error_not_a_new_field() -> None:
    # Slots: ``usage.tool_cals += 1`` must fail loudly, never start a counter nobody reads.
    usage = Usage()
    with pytest.raises(AttributeError):
        usage.tool_cals = 1  # type: ignore[attr-defined]


def test_a_runs_budgets_cannot_change_under_it() -> None:
    with pytest.raises((AttributeError, TypeError)):  # FrozenInstanceError is an AttributeError
        BUDGETS.max_tool_calls = 100  # type: ignore[misc]
    assert BUDGETS.max_tool_calls == 6
