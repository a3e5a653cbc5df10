"""Settings, read once from the environment (or a ``.env`` file) with pydantic-settings.

This is the only place the process environment is read (CONTRACTS §2 names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_REPO = Path(__file__).resolve().parent.parent
BUNDLED_INCIDENT = _REPO / "examples" / "incident"
BUNDLED_KNOWLEDGE = BUNDLED_INCIDENT / "runbooks"
BUNDLED_LOGS = BUNDLED_INCIDENT / "logs"


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class Settings(BaseSettings):
    """Every tunable of the product; see CONTRACTS §2 for meanings and defaults."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    model: str = Field(default="gpt-4o-mini", validation_alias="DIAG_MODEL")
    model_context_window: int = Field(
        default=128000, gt=0, validation_alias="DIAG_MODEL_CONTEXT_WINDOW"
    )
    model_request_timeout_seconds: float = Field(
        default=60.0, gt=0, validation_alias="DIAG_MODEL_TIMEOUT_SECONDS"
    )

    max_model_calls: int = Field(default=8, ge=1, validation_alias="DIAG_MAX_MODEL_CALLS")
    max_total_tokens: int = Field(default=60000, ge=1, validation_alias="DIAG_MAX_TOTAL_TOKENS")
    deadline_seconds: float = Field(default=120.0, gt=0, validation_alias="DIAG_DEADLINE_SECONDS")
    max_tool_calls: int = Field(default=6, ge=0, validation_alias="DIAG_MAX_TOOL_CALLS")
    no_gain_streak: int = Field(default=2, ge=1, validation_alias="DIAG_NO_GAIN_STREAK")

    max_query_bytes: int = Field(default=4096, ge=1, validation_alias="DIAG_MAX_QUERY_BYTES")
    max_previous_turn_bytes: int = Field(
        default=20480, ge=1, validation_alias="DIAG_MAX_PREVIOUS_TURN_BYTES"
    )
    max_input_bytes: int = Field(default=24576, ge=1, validation_alias="DIAG_MAX_INPUT_BYTES")
    max_observation_bytes: int = Field(
        default=4096, ge=256, validation_alias="DIAG_MAX_OBSERVATION_BYTES"
    )
    max_draft_bytes: int = Field(default=16384, ge=1, validation_alias="DIAG_MAX_DRAFT_BYTES")
    run_capacity_bytes: int = Field(default=65536, ge=1, validation_alias="DIAG_RUN_CAPACITY_BYTES")

    knowledge_dir: Path = Field(default=BUNDLED_KNOWLEDGE, validation_alias="DIAG_KNOWLEDGE_DIR")
    logs_source: str = Field(default=str(BUNDLED_LOGS), validation_alias="DIAG_LOGS_SOURCE")
    mysql_dsn: SecretStr | None = Field(default=None, validation_alias="DIAG_MYSQL_DSN")
    mysql_allowed_tables: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="DIAG_MYSQL_ALLOWED_TABLES"
    )
    mysql_require_read_only: bool = Field(
        default=True, validation_alias="DIAG_MYSQL_REQUIRE_READ_ONLY"
    )
    mysql_statement_timeout_seconds: float = Field(
        default=5.0, gt=0, le=3600, validation_alias="DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS"
    )
    mysql_max_rows: int = Field(default=50, ge=1, le=1000, validation_alias="DIAG_MYSQL_MAX_ROWS")
    knowledge_rescan_seconds: float = Field(
        default=5.0, ge=0, validation_alias="DIAG_KNOWLEDGE_RESCAN_SECONDS"
    )
    cache_dir: Path = Field(default=Path(".diag-cache"), validation_alias="DIAG_CACHE_DIR")

    slack_bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    slack_app_token: SecretStr | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias="SLACK_SIGNING_SECRET"
    )
    slack_api_url: str | None = Field(default=None, validation_alias="DIAG_SLACK_API_URL")
    admin_channels: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="DIAG_ADMIN_CHANNELS"
    )
    max_concurrent_runs: int = Field(default=4, ge=1, validation_alias="DIAG_MAX_CONCURRENT_RUNS")
    redis_url: SecretStr | None = Field(default=None, validation_alias="DIAG_REDIS_URL")
    audit_sink: str = Field(
        default="jsonl:./audit", validation_alias=AliasChoices("DIAG_AUDIT_SINK")
    )
    audit_timeout_seconds: float = Field(
        default=5.0, gt=0, validation_alias="DIAG_AUDIT_TIMEOUT_SECONDS"
    )
    """One audit write end to end (connect, greeting, lock waits, write); never delays an answer."""

    @field_validator("mysql_allowed_tables", "admin_channels", mode="before")
    @classmethod
    def _csv(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("mysql_dsn", "redis_url", "openai_api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value
