"""Run budgets as a frozen value object, and the mutable usage they are checked against.

Pure: the harness builds ``Budgets`` from the settings (``sre_diag.harness.run.budgets_from``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sre_diag.errors import BudgetStop, StopReason

__all__ = ["Budgets", "Usage"]


@dataclass(frozen=True, slots=True)
class Budgets:
    """The limits of one run. Each check names the limit and the observed value."""

    max_model_calls: int
    """Model rounds a run may start."""
    max_total_tokens: int
    """Prompt plus completion tokens a run may spend."""
    deadline_seconds: float
    """Wall-clock seconds from the run's start."""
    max_tool_calls: int
    """Business tool calls the harness may execute."""
    no_gain_streak: int
    """Consecutive NO_GAIN evaluations after which the harness requires a stop."""
    max_observation_bytes: int
    """UTF-8 bytes of one observation as sent to the model."""
    max_draft_bytes: int
    """UTF-8 bytes of the final model text."""
    run_capacity_bytes: int
    """Input plus every observation plus the final text."""

    def check_before_model_call(self, usage: Usage) -> None:
        """Model-call then token budget; raises ``BudgetStop`` naming the limit."""
        if usage.model_calls >= self.max_model_calls:
            raise BudgetStop(
                StopReason.MODEL_CALL_BUDGET_EXHAUSTED,
                f"max_model_calls={self.max_model_calls}, used={usage.model_calls}",
            )
        self.check_tokens_before_round(usage)

    def check_tokens_before_round(self, usage: Usage) -> None:
        """A round may start only while some tokens are left: at the budget it is exhausted."""
        if usage.total_tokens >= self.max_total_tokens:
            raise BudgetStop(
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_total_tokens={self.max_total_tokens}, used={usage.total_tokens}",
            )

    def check_tokens_after_round(self, usage: Usage) -> None:
        """A finished round is discarded only when it went OVER the budget.

        A round landing exactly on ``max_total_tokens`` spent what the run was allowed: its
        answer (a final Draft included) stands, and the next round, if any, is refused by
        ``check_tokens_before_round``.
        """
        if usage.total_tokens > self.max_total_tokens:
            raise BudgetStop(
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_total_tokens={self.max_total_tokens}, used={usage.total_tokens}",
            )

    # -- the "must stop" rules the tool interceptor applies ---------------------------------

    def rounds_left(self, usage: Usage) -> int:
        return self.max_model_calls - usage.model_calls

    def tool_calls_left(self, usage: Usage) -> int:
        return self.max_tool_calls - usage.tool_calls

    def tokens_left(self, usage: Usage) -> int:
        return self.max_total_tokens - usage.total_tokens

    def saturated(self, no_gain_streak: int) -> bool:
        """Enough consecutive NO_GAIN evaluations: collecting more evidence is not worth it."""
        return no_gain_streak >= self.no_gain_streak

    def stop_cause(self, usage: Usage, no_gain_streak: int) -> StopReason | None:
        """Why the next tool request is answered STOP_REQUIRED whatever it asks; None: it isn't.

        In order: saturated (``INFORMATION_SATURATED``); no business tool call left
        (``TOOL_CALL_BUDGET_EXHAUSTED``); at most one model round left, kept for the Draft
        (``MODEL_CALL_BUDGET_EXHAUSTED``); the tokens left pay for at most one more round like
        the last one — a round costs at least what the one before it did, the conversation only
        grows — so that round is kept for the Draft (``TOKEN_BUDGET_EXHAUSTED``). Byte capacity
        is checked per observation (``keeps_draft``).
        """
        if self.saturated(no_gain_streak):
            return StopReason.INFORMATION_SATURATED
        if self.tool_calls_left(usage) <= 0:
            return StopReason.TOOL_CALL_BUDGET_EXHAUSTED
        if self.rounds_left(usage) <= 1:
            return StopReason.MODEL_CALL_BUDGET_EXHAUSTED
        if self.tokens_left(usage) < 2 * usage.last_round_tokens:
            return StopReason.TOKEN_BUDGET_EXHAUSTED
        return None

    def keeps_draft(self, usage: Usage, nbytes: int) -> bool:
        """``nbytes`` more observation text still leaves room for a full Draft."""
        return usage.bytes + nbytes + self.max_draft_bytes <= self.run_capacity_bytes

    def within_capacity(self, usage: Usage, nbytes: int) -> bool:
        """``nbytes`` more observation text does not push the run past its capacity."""
        return usage.bytes + nbytes <= self.run_capacity_bytes


@dataclass(slots=True)
class Usage:
    """What the run has consumed so far."""

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    bytes: int = 0
    usage_estimated: bool = False
    last_round_tokens: int = 0
    """Prompt plus completion tokens of the latest model round."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
