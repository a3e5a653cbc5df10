"""What started a run (CONTRACTS §10): ``mention``, ``shortcut``, ``alert`` or ``replay``.

The Slack edge knows why it starts a run; the audit record and ``diag_runs_total`` are built
from the run's context deep inside the harness. The trigger travels between them as a context
variable, set by the Slack run manager around the one call that runs (or records) the run:
``asyncio`` copies the context into every task the run starts, so each run sees its own
trigger and nothing else can. A run started outside Slack (``diagnose``, ``demo``, ``eval``)
has none: its audit record says ``trigger: null``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum

__all__ = ["Trigger", "current_trigger", "run_triggered"]


class Trigger(StrEnum):
    """Why a Slack run started."""

    MENTION = "mention"
    """A mention of the bot (a first question, or a follow-up in a thread)."""
    SHORTCUT = "shortcut"
    """The "Diagnose this" message shortcut on a message."""
    ALERT = "alert"
    """A new top-level message of a ``DIAG_ALERT_SOURCES`` bot or app."""
    REPLAY = "replay"
    """The Replay shortcut, or ``python -m sre_diag replay``."""


_CURRENT: ContextVar[Trigger | None] = ContextVar("diag_run_trigger", default=None)


def current_trigger() -> Trigger | None:
    """The trigger of the run this code runs in; None outside a Slack run."""
    return _CURRENT.get()


@contextmanager
def run_triggered(trigger: Trigger) -> Iterator[None]:
    """Within this block (and the tasks it starts), runs are started by ``trigger``."""
    token = _CURRENT.set(trigger)
    try:
        yield
    finally:
        _CURRENT.reset(token)
