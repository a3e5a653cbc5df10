"""The shipped doubles' errors: a model script and the run that used it disagree.

They are also ``AssertionError`` instances, so a test using a double fails with its message.
"""

from __future__ import annotations

from sre_diag.errors import DiagError

__all__ = ["ModelScriptError", "UnconsumedModelSteps", "UnexpectedModelCall"]


class ModelScriptError(DiagError, AssertionError):
    """The model script and the run disagree (see the module docstring)."""


class UnexpectedModelCall(ModelScriptError):
    """The run asked the model more often than the script has steps."""

    def __init__(self, extra: int) -> None:
        super().__init__(f"model server got {extra} unexpected extra request(s)")
        self.extra = extra


class UnconsumedModelSteps(ModelScriptError):
    """The run ended before it asked for every scripted step."""

    def __init__(self, steps: int, requested: int) -> None:
        super().__init__(f"model server script has {steps} steps, but {requested} were requested")
        self.steps = steps
        self.requested = requested
