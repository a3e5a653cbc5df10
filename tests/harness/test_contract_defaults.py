"""Every CONTRACTS §2 default, read from ``Settings`` built in an empty environment.

The table below is keyed by the contract's environment names, and each name is looked up among
the ``Settings`` fields by its alias (not by attribute name), so a renamed field still answers
for the name operators use. A contract row with no ``Settings`` field yet is skipped with a
visible reason; once the field exists, its default is asserted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices, SecretStr

from sre_diag.settings import Settings

Expectation = Any | Callable[[Settings, Any], bool]

# CONTRACTS §2, row by row: name -> default (a value, or a predicate over the settings and the
# field's value where the default is derived).
CONTRACT_DEFAULTS: dict[str, Expectation] = {
    "OPENAI_BASE_URL": None,  # openai SDK default
    "OPENAI_API_KEY": None,  # openai SDK default
    "DIAG_MODEL": "gpt-4o-mini",
    "DIAG_MODEL_CONTEXT_WINDOW": 128000,
    "DIAG_MAX_MODEL_CALLS": 8,
    "DIAG_MAX_TOTAL_TOKENS": 60000,
    "DIAG_DEADLINE_SECONDS": 120,
    "DIAG_MAX_TOOL_CALLS": 6,
    "DIAG_NO_GAIN_STREAK": 2,
    "DIAG_MAX_QUERY_BYTES": 4096,
    "DIAG_MAX_PREVIOUS_TURN_BYTES": 20480,
    "DIAG_MAX_INPUT_BYTES": 24576,
    "DIAG_MAX_OBSERVATION_BYTES": 4096,
    "DIAG_MAX_DRAFT_BYTES": 16384,
    "DIAG_RUN_CAPACITY_BYTES": 65536,
    "DIAG_KNOWLEDGE_DIR": None,  # unset: lookup_knowledge answers NOT_CONFIGURED
    "DIAG_LOGS_SOURCE": None,  # unset: query_logs answers NOT_CONFIGURED
    "DIAG_MYSQL_DSN": None,
    "DIAG_MYSQL_ALLOWED_TABLES": (),  # all tables of the DSN's database
    "DIAG_MYSQL_REQUIRE_READ_ONLY": True,
    "DIAG_MYSQL_SECRET_COLUMNS": (),  # only the columns classified by name
    "DIAG_MYSQL_REQUIRE_COLUMN_GRANTS": True,
    "DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS": 5,
    "DIAG_MYSQL_MAX_ROWS": 50,
    "SLACK_BOT_TOKEN": None,
    "SLACK_APP_TOKEN": None,
    "SLACK_SIGNING_SECRET": None,
    "DIAG_SLACK_API_URL": None,  # Slack's default
    "DIAG_ADMIN_CHANNELS": (),  # none: the bot acts nowhere
    "DIAG_MAX_CONCURRENT_RUNS": 4,
    "DIAG_REDIS_URL": None,
    "DIAG_STATE_DIR": lambda s, v: Path(v) == Path(os.environ["XDG_STATE_HOME"]) / "sre-diag",
    "DIAG_AUDIT_SINK": lambda s, v: v == f"jsonl:{s.state_dir / 'audit'}",
    "DIAG_AUDIT_TIMEOUT_SECONDS": 5,
    "DIAG_MODEL_TIMEOUT_SECONDS": 60,
    "DIAG_CACHE_DIR": lambda s, v: Path(v) == s.state_dir / "cache",
    "DIAG_KNOWLEDGE_RESCAN_SECONDS": 5,
    "DIAG_CATALOG_REFRESH_SECONDS": 300,
    "DIAG_LOKI_SERVICE_LABEL": "service",
    "DIAG_LOKI_LINE_FORMAT": "json",
    "DIAG_LOKI_ORG_ID": None,
    "DIAG_STRUCTURED_OUTPUT": "off",
    "DIAG_PROMPT": "zh",
    "DIAG_LOG_FORMAT": "text",
    "DIAG_LOG_LEVEL": "INFO",
    "DIAG_EVIDENCE_TTL_SECONDS": 86400,
    # deadline + 30: either stored as "derived" (None) or already resolved.
    "DIAG_JOB_CLAIM_SECONDS": lambda s, v: v is None or v == s.deadline_seconds + 30,
    "DIAG_OPS_PORT": None,
    "DIAG_ALERT_SOURCES": (),  # unset: no automatic runs
    "DIAG_ALERT_COOLDOWN_SECONDS": 900,
    "DIAG_ALERT_MAX_RUNS_PER_HOUR": 20,
    "DIAG_REDACT_EMAILS": True,
    "DIAG_GRAFANA_ORG_ID": 1,
    "DIAG_GRAFANA_URL": None,  # unset: no links
    "DIAG_GRAFANA_LOKI_UID": None,
    "DIAG_RUNBOOK_URL": None,  # unset: no links
}

def _aliases(alias: object) -> tuple[str, ...]:
    if isinstance(alias, str):
        return (alias,)
    if isinstance(alias, AliasChoices):
        return tuple(choice for choice in alias.choices if isinstance(choice, str))
    return ()


def _field_for(name: str) -> str | None:
    for field_name, info in Settings.model_fields.items():
        if name in _aliases(info.validation_alias) or name in _aliases(info.alias):
            return field_name
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return tuple(value)
    return value


@pytest.fixture
def empty_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings with no environment and no ``.env``: only the code's defaults."""
    for name in list(os.environ):
        if name.startswith(("DIAG_", "OPENAI_", "SLACK_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)  # a .env in the working directory must not count either
    (tmp_path / ".env").write_text("DIAG_MAX_MODEL_CALLS=99\n", encoding="utf-8")
    return Settings(_env_file=None)


@pytest.mark.parametrize("name", list(CONTRACT_DEFAULTS))
def test_contract_default(name: str, empty_settings: Settings) -> None:
    field_name = _field_for(name)
    if field_name is None:
        pytest.skip(f"{name}: no Settings field yet")
    value = getattr(empty_settings, field_name)
    expected = CONTRACT_DEFAULTS[name]
    if callable(expected):
        assert expected(empty_settings, value), f"{name}: default {value!r}"
    else:
        assert _plain(value) == expected, f"{name}: default {value!r}, contract {expected!r}"


def test_every_settings_field_is_a_contract_name() -> None:
    """No setting outside CONTRACTS §2 (operators read only that table)."""
    names = {
        alias
        for info in Settings.model_fields.values()
        for alias in _aliases(info.validation_alias)
    }
    assert names <= set(CONTRACT_DEFAULTS), sorted(names - set(CONTRACT_DEFAULTS))


def test_input_limit_holds_the_largest_query_and_previous_turn(
    empty_settings: Settings,
) -> None:
    """A query and a previous turn each within their limits fit the input limit together."""
    assert empty_settings.max_previous_turn_bytes + empty_settings.max_query_bytes <= (
        empty_settings.max_input_bytes
    )
