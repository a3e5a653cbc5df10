"""Live progress: a step hook that keeps the thread's status message current, about once a second.

The hook itself only records state (model-round callbacks are synchronous); a small updater task
per run turns changes into ``chat.update`` calls, at most one per interval, plus a final one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from plugin.context import RunContext
from plugin.hooks import ModelRound, StepHook
from plugin.ledger import Invocation
from plugin.slack.render import StatusView
from tools.base import ToolName

__all__ = ["QUEUED_EVERY_TICKS", "ProgressTracker"]

QUEUED_EVERY_TICKS = 10

_log = logging.getLogger(__name__)


@dataclass
class ProgressTracker(StepHook):
    """Collects progress from the run and pushes status views through ``publish``."""

    view: StatusView
    publish: Callable[[StatusView], Awaitable[None]]
    interval_seconds: float = 1.0
    poll_cancel: Callable[[], Awaitable[bool]] | None = None
    on_cancel_requested: Callable[[], None] | None = None
    _version: int = 0
    _published: int = -1
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def update(self, **changes: object) -> None:
        self.view = replace(self.view, **changes)  # type: ignore[arg-type]
        self._version += 1

    # -- StepHook --------------------------------------------------------------------------

    def on_model_round(self, ctx: RunContext, model_round: ModelRound) -> None:
        self.update(state="RUNNING", rounds_used=model_round.index, current_check=None)

    def on_tool_started(self, ctx: RunContext, tool: ToolName, scope: str) -> None:
        self.update(state="RUNNING", current_check=f"{tool.value} · {scope}")

    def on_tool_invocation(self, ctx: RunContext, invocation: Invocation) -> None:
        if invocation.executed():
            self.update(checks_done=self.view.checks_done + 1)

    # -- updater ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        tick = 0
        while True:
            await asyncio.sleep(self.interval_seconds)
            tick += 1
            if self.poll_cancel is not None and self.on_cancel_requested is not None:
                with contextlib.suppress(Exception):
                    if await self.poll_cancel():
                        self.on_cancel_requested()
            # A queue position moves for every waiting run whenever a slot frees: refreshing
            # them all every second would spend Slack's chat.update rate limit on "position n".
            if self.view.state != "QUEUED" or tick % QUEUED_EVERY_TICKS == 0:
                await self._flush()

    async def _flush(self) -> None:
        if self._published == self._version:
            return
        version = self._version
        try:
            await self.publish(self.view)
        except Exception as exc:
            _log.warning("status update failed: %s", type(exc).__name__)
        self._published = version

    async def finish(self, note: str) -> None:
        """Stop the updater and publish the final state (no Cancel button)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.update(state="FINISHED", final_note=note, current_check=None)
        await self._flush()
