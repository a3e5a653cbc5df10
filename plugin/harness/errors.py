"""The harness's errors: what the model answered that a run cannot take."""

from __future__ import annotations

from sre_diag.errors import RunError

__all__ = ["OversizedResponse"]


class OversizedResponse(RunError):
    """A model response's text exceeds the Draft byte limit; it never enters the agent loop.

    ``final`` is True when the response was the final text (then it is an oversized Draft).
    """

    def __init__(self, *, final: bool) -> None:
        self.final = final
        super().__init__("OVERSIZED")
