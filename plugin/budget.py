"""Run budgets as a frozen value object, and the mutable usage they are checked against."""

from __future__ import annotations

from dataclasses import dataclass

from plugin.errors import BudgetStop, StopReason
from plugin.settings import Settings

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

    @classmethod
    def from_settings(cls, settings: Settings) -> Budgets:
        return cls(
            max_model_calls=settings.max_model_calls,
            max_total_tokens=settings.max_total_tokens,
            deadline_seconds=settings.deadline_seconds,
            max_tool_calls=settings.max_tool_calls,
            no_gain_streak=settings.no_gain_streak,
            max_observation_bytes=settings.max_observation_bytes,
            max_draft_bytes=settings.max_draft_bytes,
            run_capacity_bytes=settings.run_capacity_bytes,
        )

    def check_before_model_call(self, usage: Usage) -> None:
        """Model-call then token budget; raises ``BudgetStop`` naming the limit."""
        if usage.model_calls >= self.max_model_calls:
            raise BudgetStop(
                StopReason.MODEL_CALL_BUDGET_EXHAUSTED,
                f"max_model_calls={self.max_model_calls}, used={usage.model_calls}",
            )
        self.check_tokens(usage)

    def check_tokens(self, usage: Usage) -> None:
        if usage.total_tokens >= self.max_total_tokens:
            raise BudgetStop(
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_total_tokens={self.max_total_tokens}, used={usage.total_tokens}",
            )

    def rounds_left(self, usage: Usage) -> int:
        return self.max_model_calls - usage.model_calls

    def tool_calls_left(self, usage: Usage) -> int:
        return self.max_tool_calls - usage.tool_calls

    def can_hold_observation(self, usage: Usage) -> bool:
        """Room for one more full observation while keeping room for the final Draft."""
        needed = usage.bytes + self.max_observation_bytes + self.max_draft_bytes
        return needed <= self.run_capacity_bytes


@dataclass(slots=True)
class Usage:
    """What the run has consumed so far."""

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    bytes: int = 0
    usage_estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
