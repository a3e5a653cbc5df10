"""The one exception tree of the product: a root, operator mistakes vs run failures, stop signals.

Every exception class of ``sre_diag`` (``sre_diag.tools`` included) is defined in an ``errors``
module — this one or the ``errors.py`` of its package — and derives from
:class:`SreDiagException`. Catch a family, never the root.

::

    SreDiagException(BaseException)       everything the product raises
    ├── RunStop                           a controlled end of a run: a signal, not an error
    │   ├── BudgetStop                    cancellation, deadline, model-call or token budget
    │   └── CollectionStopped             the model asked for a tool after STOP_REQUIRED; its
    │                                     reason is what caused that STOP_REQUIRED
    └── DiagError(Exception)              every error
        ├── OperatorError                 the operator must fix something; not a run outcome
        │   ├── ConfigError               settings or wiring (exit 2 ``INVALID_SETTINGS``)
        │   ├── contract.PromptError      a prompt choice or file that cannot be used
        │   └── commands.errors.*         EvalUsageError, ReplayError, …
        ├── InputRejected                 the request is refused before any model call (exit 2)
        ├── doubles.errors.*              a shipped double and its run disagree (ModelScriptError)
        └── RunError                      what one run met: the model, a tool, the Draft, audit
            ├── contract.errors.*         EnvelopeError, DraftRejected, DuplicateKey
            ├── harness.errors.*          OversizedResponse, Unprojectable (an adapter's result)
            ├── tools.errors.*            evidence backends and the SQL guard (EvidenceError)
            ├── audit.errors.*            AuditWriteError
            └── slack.errors.*            NotSent (a Slack call's turn came too late)

``RunStop`` derives from ``BaseException`` on purpose: LlamaIndex turns an ordinary exception
raised by a tool into an observation and carries on, while a ``BaseException`` propagates out of
the workflow with its type intact — the stop cannot be swallowed and re-interpreted as evidence.
Every other class is also an ``Exception``, so ``except Exception`` still catches them all.
"""

from __future__ import annotations

from enum import StrEnum

import httpx

__all__ = [
    "AnswerTooLarge",
    "BudgetStop",
    "CollectionStopped",
    "ConfigError",
    "DiagError",
    "InputRejected",
    "InputRejection",
    "OperatorError",
    "RunError",
    "RunStop",
    "SreDiagException",
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
    MODEL_NOT_CONFIGURED = "MODEL_NOT_CONFIGURED"
    """Neither ``OPENAI_BASE_URL`` nor ``OPENAI_API_KEY`` is set: a command that would call the
    model refuses before any request."""


class SreDiagException(BaseException):
    """The root of everything the product raises (see the tree above)."""


class DiagError(SreDiagException, Exception):
    """Every error of the product (an ``Exception``, unlike the stop signals)."""


class OperatorError(DiagError):
    """The operator must fix something: settings, wiring, a file, the command line."""


class RunError(DiagError):
    """Something one run met: the model, a tool or its backend, the Draft, the audit sink."""


class ConfigError(OperatorError):
    """Settings or wiring are wrong; the operator must fix them."""


class InputRejected(DiagError):
    """The request was refused before any model call; nothing was truncated or rewritten."""

    def __init__(
        self, code: InputRejection, *, limit: int | None = None, observed: int | None = None
    ):
        self.code = code
        self.limit = limit
        self.observed = observed
        detail = f" ({observed} > {limit} bytes)" if limit is not None else ""
        super().__init__(f"{code.value}{detail}")


class RunStop(SreDiagException):
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


class AnswerTooLarge(RunError, httpx.TransportError):
    """An answer's (decoded) body is larger than the client's cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"answer larger than {limit} bytes")
