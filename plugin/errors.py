"""Error families of the harness.

::

    ConfigError(Exception)              operator mistake in settings or wiring; not a run outcome
    InputRejected(Exception)            the request is refused before any model call (exit 2)
    RunStop(BaseException)              a controlled stop raised inside the framework loop
    ├── BudgetStop                      cancellation, deadline, model-call or token budget
    └── CollectionStopped               the model asked for a tool after STOP_REQUIRED; its
                                        reason is what caused that STOP_REQUIRED

``RunStop`` derives from ``BaseException`` on purpose: LlamaIndex turns an ordinary exception
raised by a tool into an observation and carries on, while a ``BaseException`` propagates out of
the workflow with its type intact — the stop cannot be swallowed and re-interpreted as evidence.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "BudgetStop",
    "CollectionStopped",
    "ConfigError",
    "InputRejected",
    "InputRejection",
    "RunStop",
    "StopReason",
]


class StopReason(StrEnum):
    """Why a run ended without a Draft but under control (CONTRACTS §6)."""

    INFORMATION_SATURATED = "INFORMATION_SATURATED"
    MODEL_CALL_BUDGET_EXHAUSTED = "MODEL_CALL_BUDGET_EXHAUSTED"
    TOOL_CALL_BUDGET_EXHAUSTED = "TOOL_CALL_BUDGET_EXHAUSTED"
    TOKEN_BUDGET_EXHAUSTED = "TOKEN_BUDGET_EXHAUSTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"


class InputRejection(StrEnum):
    """Stable codes for input refused before any model call."""

    BLANK_QUERY = "BLANK_QUERY"
    QUERY_TOO_LARGE = "QUERY_TOO_LARGE"
    PREVIOUS_TURN_TOO_LARGE = "PREVIOUS_TURN_TOO_LARGE"
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"
    INVALID_PREVIOUS_TURN = "INVALID_PREVIOUS_TURN"
    # Refused by the command line before a request exists (exit 2, ``error.code``):
    INVALID_SETTINGS = "INVALID_SETTINGS"
    """A setting is invalid; the message names each one and what it must be."""
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    """The command line itself is wrong (argparse usage error)."""


class ConfigError(Exception):
    """Settings or wiring are wrong; the operator must fix them."""


class InputRejected(Exception):
    """The request was refused before any model call; nothing was truncated or rewritten."""

    def __init__(
        self, code: InputRejection, *, limit: int | None = None, observed: int | None = None
    ):
        self.code = code
        self.limit = limit
        self.observed = observed
        detail = f" ({observed} > {limit} bytes)" if limit is not None else ""
        super().__init__(f"{code.value}{detail}")


class RunStop(BaseException):
    """A controlled end of the run, carrying its stop reason."""

    def __init__(self, reason: StopReason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.value}{': ' + detail if detail else ''}")


class BudgetStop(RunStop):
    """A budget check failed before a model round (or usage overran it after one)."""


class CollectionStopped(RunStop):
    """The model requested another tool after the harness required the final Draft.

    ``reason`` is the cause of that requirement (CONTRACTS §6): the NO_GAIN streak
    (``INFORMATION_SATURATED``), the last model round, the tool-call or the token budget.
    """

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason, "tool requested after STOP_REQUIRED")
