"""The harness's errors: what the model answered, or an adapter returned, that a run cannot
take."""

from __future__ import annotations

from sre_diag.errors import RunError

__all__ = ["OversizedResponse", "Unprojectable"]


class OversizedResponse(RunError):
    """A model response's text exceeds the Draft byte limit; it never enters the agent loop.

    ``final`` is True when the response was the final text (then it is an oversized Draft).
    """

    def __init__(self, *, final: bool) -> None:
        self.final = final
        super().__init__("OVERSIZED")


class Unprojectable(RunError):
    """An adapter result that does not fit its tool's whitelist; ``reason`` names the field
    or the shape, never a value."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
