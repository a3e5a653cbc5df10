"""Step hooks: observers injected per run (audit, Slack progress, tests).

Hooks see the run's state (``RunState``: session_id, run_id, usage, ledger), never its
dependencies. They are synchronous because
the model-round callbacks of LlamaIndex are; a hook that needs IO schedules it itself. A failing
hook is logged and never changes the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sre_diag.log import log_failure

if TYPE_CHECKING:
    from sre_diag.contract.result import ExecutionResult
    from sre_diag.harness.ledger import Invocation
    from sre_diag.harness.state import ModelRound, RunState
    from sre_diag.tools.base import ToolName

__all__ = ["HookSet", "StepHook"]

_log = logging.getLogger(__name__)


class StepHook:
    """Base observer; override what you need."""

    def on_model_round(self, ctx: RunState, model_round: ModelRound) -> None:
        """A model round finished (or was blocked / failed)."""

    def on_tool_started(self, ctx: RunState, tool: ToolName, scope: str) -> None:
        """The harness is about to run an adapter."""

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        """A canonical invocation was recorded."""

    def on_observation(self, ctx: RunState, invocation: Invocation, observation: str) -> None:
        """The observation text the model is given for ``invocation`` (bounded, CONTRACTS §4)."""

    def on_result(self, ctx: RunState, result: ExecutionResult) -> None:
        """The run ended."""


class HookSet:
    """Fans out to every hook, isolating their failures from the run."""

    def __init__(self, hooks: Sequence[StepHook]) -> None:
        self._hooks = tuple(hooks)

    def model_round(self, ctx: RunState, model_round: ModelRound) -> None:
        for hook in self._hooks:
            self._safe(hook.on_model_round, ctx, model_round)

    def tool_started(self, ctx: RunState, tool: ToolName, scope: str) -> None:
        for hook in self._hooks:
            self._safe(hook.on_tool_started, ctx, tool, scope)

    def tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        for hook in self._hooks:
            self._safe(hook.on_tool_invocation, ctx, invocation)

    def observation(self, ctx: RunState, invocation: Invocation, observation: str) -> None:
        for hook in self._hooks:
            self._safe(hook.on_observation, ctx, invocation, observation)

    def result(self, ctx: RunState, result: ExecutionResult) -> None:
        for hook in self._hooks:
            self._safe(hook.on_result, ctx, result)

    @staticmethod
    def _safe(fn: object, *args: object) -> None:
        try:
            fn(*args)  # type: ignore[operator]
        except Exception as exc:
            log_failure(
                _log,
                logging.WARNING,
                "step hook %s failed: %s",
                getattr(fn, "__qualname__", fn),
                exc=exc,
            )
