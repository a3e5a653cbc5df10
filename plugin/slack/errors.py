"""The Slack edge's errors: what a run met on its way out to Slack."""

from __future__ import annotations

from sre_diag.errors import RunError

__all__ = ["NotSent"]


class NotSent(RunError):
    """The call's deadline passed while it waited for its turn in the channel's lane: nothing
    was sent."""
