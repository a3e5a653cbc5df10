"""Exit codes of the commands (CONTRACTS §1) and the one way a command reads its settings."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sre_diag.contract.result import ExecutionResult, Outcome
from sre_diag.errors import ConfigError
from sre_diag.settings import Settings, describe_invalid_settings

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_REJECTED", "exit_code", "load_settings"]

EXIT_OK, EXIT_FAILED, EXIT_REJECTED = 0, 1, 2


def exit_code(result: ExecutionResult) -> int:
    """0 for a Draft or a controlled stop, 1 when the run failed closed."""
    return EXIT_FAILED if result.outcome is Outcome.FAILED else EXIT_OK


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment; a bad value is an operator error naming the setting."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        # One message naming every bad setting and what it must be; values of secrets, URLs
        # and DSNs are never echoed (the ValidationError itself is not chained: it carries them).
        raise ConfigError(describe_invalid_settings(exc)) from None
