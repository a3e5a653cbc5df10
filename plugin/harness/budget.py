"""Run budgets as a frozen value object, and the mutable usage they are checked against.

Pure: the harness builds ``Budgets`` from the settings (``sre_diag.harness.run.budgets_from``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sre_diag.errors import BudgetStop, StopReason

__all__ = ["BYTES_PER_TOKEN", "Budgets", "Usage", "estimated_tokens"]

BYTES_PER_TOKEN = 4
"""Where a size in tokens must be estimated from UTF-8 bytes: about four bytes a token."""


def estimated_tokens(nbytes: int) -> int:
    """``nbytes`` UTF-8 bytes as tokens (``BYTES_PER_TOKEN`` a token, rounded up)."""
    return -(-nbytes // BYTES_PER_TOKEN)


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
        """A round may start only while it can be answered within the budget.

        At the budget it is exhausted; and a round whose prompt alone (at least the previous
        round's prompt plus its completion: the conversation only grows) would leave no
        completion token (``completion_tokens_left`` below 1) is never sent either.
        """
        if usage.total_tokens >= self.max_total_tokens or self.completion_tokens_left(usage) < 1:
            raise BudgetStop(
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_total_tokens={self.max_total_tokens}, used={usage.total_tokens},"
                f" last_round={usage.last_round_tokens}",
            )

    def completion_tokens_left(self, usage: Usage) -> int:
        """The completion tokens the next round may use: the tokens left minus its prompt,
        counted as at least the previous round's prompt plus completion.

        Each model request carries this as ``max_tokens`` (at most ``max_draft_bytes``, see
        ``max_tokens``), so a round can overrun the budget only by what its prompt grew since
        the previous round (the observations and the previous answer), never by a runaway
        completion.
        """
        return self.tokens_left(usage) - usage.last_round_tokens

    def max_tokens(self, usage: Usage) -> int:
        """The ``max_tokens`` of the next model request: ``completion_tokens_left``, and never
        more than ``max_draft_bytes`` (a token stands for at least one byte of text, so no
        answer the harness can accept needs more). At least 1: a round with nothing left is
        refused before it is sent (``check_tokens_before_round``)."""
        return max(1, min(self.completion_tokens_left(usage), self.max_draft_bytes))

    def overrun(self, usage: Usage) -> int:
        """Tokens past ``max_total_tokens`` (0 within the budget)."""
        return max(0, usage.total_tokens - self.max_total_tokens)

    def check_tokens_after_round(self, usage: Usage) -> None:
        """A finished round asking for tools is discarded only when it went OVER the budget.

        A round landing exactly on ``max_total_tokens`` spent what the run was allowed: its
        answer stands, and the next round, if any, is refused by ``check_tokens_before_round``.
        A final answer (the Draft) is never discarded here: the gate authorized its round, so
        an overrun is recorded (``overrun``), not thrown away.
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

    @property
    def observation_tokens(self) -> int:
        """The estimate of one observation in tokens: ``max_observation_bytes`` at
        ``BYTES_PER_TOKEN`` (what the next round's prompt may grow by for one tool result)."""
        return estimated_tokens(self.max_observation_bytes)

    def stop_cause(self, usage: Usage, no_gain_streak: int) -> StopReason | None:
        """Why the next tool request is answered STOP_REQUIRED whatever it asks; None: it isn't.

        One round of headroom: a tool runs when a model round remains after the current one
        to read its result and the tokens left cover one more round like the last plus the
        observation. In order: saturated (``INFORMATION_SATURATED``); no business tool call
        left (``TOOL_CALL_BUDGET_EXHAUSTED``); no model round left after this one
        (``MODEL_CALL_BUDGET_EXHAUSTED``); the tokens left are fewer than the last round's plus
        ``observation_tokens`` — the next round costs at least what the last one did, the
        conversation only grows — (``TOKEN_BUDGET_EXHAUSTED``). Byte capacity is checked per
        observation (``keeps_draft``).
        """
        if self.saturated(no_gain_streak):
            return StopReason.INFORMATION_SATURATED
        if self.tool_calls_left(usage) <= 0:
            return StopReason.TOOL_CALL_BUDGET_EXHAUSTED
        if self.rounds_left(usage) <= 0:
            return StopReason.MODEL_CALL_BUDGET_EXHAUSTED
        if self.tokens_left(usage) < usage.last_round_tokens + self.observation_tokens:
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
    overrun_tokens: int = 0
    """Tokens the final round's reported usage went past ``max_total_tokens`` (its Draft is
    kept: the round was authorized before it was sent)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
