"""Settings, read once from the environment (or a ``.env`` file) with pydantic-settings.

This is the only place the process environment is read (CONTRACTS §2 names).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import SplitResult, unquote, urlsplit

import annotated_types
from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/sre-diag``, else ``~/.local/state/sre-diag`` (never the current folder:
    under systemd that is ``/``)."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    home = Path(os.path.expanduser("~"))  # "~" itself when there is no home: refused as relative
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "state"
    return base / "sre-diag"


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
    structured_output: Literal["off", "json_schema"] = Field(
        default="off", validation_alias="DIAG_STRUCTURED_OUTPUT"
    )
    """``json_schema``: every model request asks for the Draft through ``response_format``
    (strict) and sends the tool definitions with ``strict: true``; the strict parsers decide."""

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

    state_dir: Path = Field(default_factory=default_state_dir, validation_alias="DIAG_STATE_DIR")
    """Where the product keeps its own files (the audit default, the runbook cache, the demo
    account's password): ``$XDG_STATE_HOME/sre-diag``, else ``~/.local/state/sre-diag``."""

    knowledge_dir: Path | None = Field(default=None, validation_alias="DIAG_KNOWLEDGE_DIR")
    """Folder of Markdown runbooks for ``lookup_knowledge`` (regular files inside it only);
    unset: it answers ``NOT_CONFIGURED`` (only ``demo`` and ``eval`` use bundled runbooks)."""
    logs_source: str | None = Field(default=None, validation_alias="DIAG_LOGS_SOURCE")
    """A JSON-lines folder or a Loki base URL; unset: ``query_logs`` answers ``NOT_CONFIGURED``."""
    loki_service_label: str = Field(
        default="service",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        validation_alias="DIAG_LOKI_SERVICE_LABEL",
    )
    """The Loki stream label that names a service (``app``, ``service_name``, ``job``, …)."""
    loki_line_format: Literal["json", "logfmt"] = Field(
        default="json", validation_alias="DIAG_LOKI_LINE_FORMAT"
    )
    """How ``level`` and the message are read from Loki lines."""
    loki_org_id: str | None = Field(default=None, validation_alias="DIAG_LOKI_ORG_ID")
    """Sent as ``X-Scope-OrgID`` to a multi-tenant Loki."""
    mysql_dsn: SecretStr | None = Field(default=None, validation_alias="DIAG_MYSQL_DSN")
    mysql_allowed_tables: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="DIAG_MYSQL_ALLOWED_TABLES"
    )
    mysql_require_read_only: bool = Field(
        default=True, validation_alias="DIAG_MYSQL_REQUIRE_READ_ONLY"
    )
    mysql_secret_columns: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="DIAG_MYSQL_SECRET_COLUMNS"
    )
    """More columns classified secret, ``table.column`` (``*`` allowed in either part)."""
    mysql_require_column_grants: bool = Field(
        default=True, validation_alias="DIAG_MYSQL_REQUIRE_COLUMN_GRANTS"
    )
    """``query_mysql`` runs nothing while the account can read a column classified secret."""
    mysql_statement_timeout_seconds: float = Field(
        default=5.0, gt=0, le=3600, validation_alias="DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS"
    )
    mysql_max_rows: int = Field(default=50, ge=1, le=1000, validation_alias="DIAG_MYSQL_MAX_ROWS")
    knowledge_rescan_seconds: float = Field(
        default=5.0, ge=0, validation_alias="DIAG_KNOWLEDGE_RESCAN_SECONDS"
    )
    cache_dir: Path = Field(
        default_factory=lambda data: data["state_dir"] / "cache", validation_alias="DIAG_CACHE_DIR"
    )
    """The persisted runbook index (default: ``cache`` in ``DIAG_STATE_DIR``)."""
    catalog_refresh_seconds: float = Field(
        default=300.0, ge=0, validation_alias="DIAG_CATALOG_REFRESH_SECONDS"
    )
    """How often the services, tables and runbook titles in the tool descriptions are re-read."""
    prompt: str = Field(default="zh", validation_alias="DIAG_PROMPT")
    """``zh``, ``en``, or the path of a system prompt file with the same slots: the language
    of the system prompt, tool descriptions and hints (the model answers in the question's)."""

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
    ops_port: int | None = Field(default=None, ge=1, le=65535, validation_alias="DIAG_OPS_PORT")
    """Socket Mode: serve /healthz, /readyz and /metrics on this port (HTTP mode: the main
    port)."""
    redis_url: SecretStr | None = Field(default=None, validation_alias="DIAG_REDIS_URL")
    job_claim_seconds: float | None = Field(
        default=None, gt=0, validation_alias="DIAG_JOB_CLAIM_SECONDS"
    )
    """After this, a queued job whose worker vanished is claimed by another worker and answered
    ``FAILED AGENT_ERROR WORKER_LOST`` (default: ``DIAG_DEADLINE_SECONDS`` + 30)."""
    evidence_ttl_seconds: float = Field(
        default=86400.0, gt=0, validation_alias="DIAG_EVIDENCE_TTL_SECONDS"
    )
    """How long the Slack plugin keeps a run's observations for the Evidence button (memory,
    or Redis with ``DIAG_REDIS_URL``); they never enter the audit record."""
    alert_sources: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="DIAG_ALERT_SOURCES"
    )
    """Bot ids (``B…``) or app ids (``A…``) whose new top-level messages in an admin channel
    start a diagnosis automatically; empty: no automatic runs."""
    alert_cooldown_seconds: float = Field(
        default=900.0, ge=0, validation_alias="DIAG_ALERT_COOLDOWN_SECONDS"
    )
    """An alert whose pattern started an automatic run in its channel within this time gets a
    pointer to that run's thread instead of a new run."""
    alert_max_runs_per_hour: int = Field(
        default=20, ge=1, le=10_000, validation_alias="DIAG_ALERT_MAX_RUNS_PER_HOUR"
    )
    """Automatic runs started per channel in any hour; beyond it, alerts get their pattern's
    one pointer message instead of a run."""
    grafana_org_id: int = Field(default=1, ge=1, validation_alias="DIAG_GRAFANA_ORG_ID")
    """The Grafana organisation the Explore links open in."""
    redact_emails: bool = Field(default=True, validation_alias="DIAG_REDACT_EMAILS")
    """E-mail addresses in evidence are masked like secrets before the model, the audit or Slack
    see them; ``false`` keeps them."""
    grafana_url: str | None = Field(default=None, validation_alias="DIAG_GRAFANA_URL")
    grafana_loki_uid: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        validation_alias="DIAG_GRAFANA_LOKI_UID",
    )
    """With ``DIAG_GRAFANA_URL``: each Loki log check in the Evidence view links to Explore."""
    runbook_url: str | None = Field(default=None, validation_alias="DIAG_RUNBOOK_URL")
    """``https://wiki.example.com/runbooks/{path}#{anchor}``: each cited runbook section links
    to its page and heading."""
    audit_sink: str = Field(
        default_factory=lambda data: f"jsonl:{data['state_dir'] / 'audit'}",
        validation_alias=AliasChoices("DIAG_AUDIT_SINK"),
    )
    """``jsonl:DIR`` or a ``mysql://`` DSN of a writable audit account (default: ``audit`` in
    ``DIAG_STATE_DIR``)."""
    audit_timeout_seconds: float = Field(
        default=5.0, gt=0, validation_alias="DIAG_AUDIT_TIMEOUT_SECONDS"
    )
    """One audit write end to end (connect, greeting, lock waits, write); never delays an answer."""

    log_format: Literal["text", "json"] = Field(default="text", validation_alias="DIAG_LOG_FORMAT")
    """``text`` or ``json`` (one object a line: time with zone, level, logger, message, run_id)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", validation_alias="DIAG_LOG_LEVEL"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: object) -> object:
        if isinstance(value, str):
            upper = value.strip().upper()
            return "WARNING" if upper == "WARN" else upper
        return value

    @field_validator("alert_sources", mode="after")
    @classmethod
    def _alert_sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        check_alert_sources(value)
        return value

    @field_validator("runbook_url", mode="after")
    @classmethod
    def _runbook_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_runbook_url(value)
        return value

    @field_validator("openai_base_url", "slack_api_url", "grafana_url", mode="after")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_http_url(value)
        return value

    @field_validator("logs_source", mode="after")
    @classmethod
    def _logs_source(cls, value: str | None) -> str | None:
        if value is not None and re.match(r"(?i)\s*[a-z][a-z0-9+.-]*://", value):
            check_http_url(
                value, what="a folder, or a Loki base URL http(s)://[user:pass@]host[:port]"
            )
        return value

    @field_validator("prompt", mode="after")
    @classmethod
    def _prompt(cls, value: str) -> str:
        from sre_diag.contract.prompts import PromptError, prompt_set

        try:
            prompt_set(value)
        except PromptError as exc:
            raise _bad(f"zh, en, or a readable prompt file with the same slots ({exc})") from None
        return value

    @field_validator("mysql_dsn", mode="after")
    @classmethod
    def _mysql_dsn(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_mysql_dsn(value.get_secret_value())
        return value

    @field_validator("audit_sink", mode="after")
    @classmethod
    def _audit_sink(cls, value: str) -> str:
        check_audit_sink(value)
        return value

    @field_validator("state_dir", mode="after")
    @classmethod
    def _absolute_state_dir(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise _bad("an absolute folder path (never the current folder)")
        return value

    @model_validator(mode="after")
    def _state_dir_usable(self) -> Settings:
        """The state folder is created (0700) and must be writable when a default lives in it:
        a clear settings error at start, not a traceback at the first run."""
        if self.uses_state_dir:
            check_writable_folder(self.state_dir)
        return self

    @property
    def uses_state_dir(self) -> bool:
        """Whether the audit sink or the cache lives in ``DIAG_STATE_DIR``."""
        audit = self.audit_sink.removeprefix("jsonl:")
        return self.cache_dir == self.state_dir / "cache" or audit == str(
            self.state_dir / "audit"
        )

    @property
    def model_configured(self) -> bool:
        """Whether a model endpoint is set (``OPENAI_BASE_URL`` or ``OPENAI_API_KEY``)."""
        return self.openai_base_url is not None or self.openai_api_key is not None

    @property
    def job_claim_after_seconds(self) -> float:
        """``DIAG_JOB_CLAIM_SECONDS``, or the run deadline plus 30 s."""
        if self.job_claim_seconds is not None:
            return self.job_claim_seconds
        return self.deadline_seconds + 30.0

    @property
    def no_evidence_source(self) -> str | None:
        """A warning when none of the three evidence sources is set (every tool would answer
        ``NOT_CONFIGURED``); ``None`` when at least one is."""
        if self.knowledge_dir or self.logs_source or self.mysql_dsn:
            return None
        return (
            "no evidence source is set (DIAG_KNOWLEDGE_DIR, DIAG_LOGS_SOURCE, DIAG_MYSQL_DSN):"
            " every tool answers NOT_CONFIGURED, so a diagnosis can only say what it could not"
            " check"
        )

    @field_validator("redis_url", mode="after")
    @classmethod
    def _redis_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_redis_url(value.get_secret_value())
        return value

    @field_validator("admin_channels", mode="after")
    @classmethod
    def _channel_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        check_channel_ids(value)
        return value

    @field_validator(
        "mysql_allowed_tables", "mysql_secret_columns", "admin_channels", "alert_sources",
        mode="before",
    )
    @classmethod
    def _csv(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("mysql_secret_columns", mode="after")
    @classmethod
    def _secret_columns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            table, dot, column = entry.partition(".")
            if not (dot and table and column and "." not in column):
                raise _bad("comma-separated table.column entries (* allowed in either part)")
        return value

    @field_validator(
        "mysql_dsn",
        "redis_url",
        "openai_api_key",
        "knowledge_dir",
        "logs_source",
        "grafana_url",
        "grafana_loki_uid",
        "runbook_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value


# --- validation that teaches: what each setting must be -------------------------------------

_FORM = "setting_form"
_MYSQL_FORM = "mysql://user:password@host[:port]/database"
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{6,20}")
_SHOWN_CHARS = 40


def _bad(requirement: str) -> PydanticCustomError:
    """A validation error whose message is what the setting must be (never its value)."""
    return PydanticCustomError(_FORM, "{requirement}", {"requirement": requirement})


def _split(value: str) -> SplitResult:
    parts = urlsplit(value.strip())
    try:
        parts.port  # noqa: B018  # raises on a non-numeric or out-of-range port
    except ValueError:
        raise _bad("with a port that is a number from 1 to 65535") from None
    return parts


def check_http_url(value: str, *, what: str = "an http(s)://host[:port][/path] URL") -> None:
    """An ``http://`` or ``https://`` URL with a host and a numeric port, if any."""
    try:
        parts = _split(value)
    except PydanticCustomError:
        raise _bad(f"{what}, with a port from 1 to 65535") from None
    if parts.scheme.lower() not in {"http", "https"}:
        raise _bad(f"{what} (the scheme must be http or https)")
    if not parts.hostname:
        raise _bad(f"{what} (the host is missing)")


def check_mysql_dsn(value: str, *, form: str = _MYSQL_FORM) -> None:
    """The DSN shape ``sre_diag.tools.mysql.parse_dsn`` accepts; the DSN itself is never echoed."""
    try:
        parts = _split(value)
    except PydanticCustomError:
        raise _bad(f"{form} (the port must be a number from 1 to 65535)") from None
    if parts.scheme.lower() not in {"mysql", "mariadb"}:
        raise _bad(f"{form} (the scheme must be mysql://)")
    database = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not parts.username:
        raise _bad(f"{form} (the user or the host is missing)")
    if not database or "/" in database:
        raise _bad(f"{form} (exactly one database name after the host)")


def check_audit_sink(value: str) -> None:
    """``jsonl:DIR`` or a ``mysql://`` DSN of a writable audit account."""
    kind, _, target = value.partition(":")
    if kind == "jsonl" and target.strip():
        return
    if kind.lower() in {"mysql", "mariadb"}:
        check_mysql_dsn(value, form=f"jsonl:DIR or {_MYSQL_FORM}")
        return
    raise _bad(f"jsonl:DIR or {_MYSQL_FORM}")


def check_writable_folder(folder: Path) -> None:
    """Create ``folder`` (mode 0700) if needed; refuse one this process cannot write."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        writable = folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    if not writable:
        raise _bad(
            "a folder this process can create and write (or set DIAG_AUDIT_SINK and"
            " DIAG_CACHE_DIR elsewhere)"
        )


def check_redis_url(value: str) -> None:
    """What ``redis.asyncio.Redis.from_url`` accepts: redis://, rediss:// or unix://."""
    form = "redis://[user:password@]host[:port][/db], rediss://… or unix:///path/to/socket"
    try:
        parts = _split(value)
    except PydanticCustomError:
        raise _bad(f"{form} (the port must be a number from 1 to 65535)") from None
    scheme = parts.scheme.lower()
    if scheme == "unix":
        if not parts.path:
            raise _bad(f"{form} (the socket path is missing)")
        return
    if scheme not in {"redis", "rediss"}:
        raise _bad(f"{form} (the scheme must be redis, rediss or unix)")
    if not parts.hostname:
        raise _bad(f"{form} (the host is missing)")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise _bad(f"{form} (the database after the host must be a number)")


def check_channel_ids(channels: tuple[str, ...]) -> None:
    """Slack channel IDs such as ``C0123ABC`` or ``G0123ABC`` (not names like ``#ops``)."""
    bad = [c for c in channels if not _CHANNEL_ID.fullmatch(c)]
    if bad:
        shown = ", ".join(repr(c[:_SHOWN_CHARS]) for c in bad[:5])
        raise _bad(
            "comma-separated Slack channel IDs such as C0123ABC or G0123ABC (C or G, then"
            f" upper-case letters and digits), not names; not IDs: {shown}"
        )


_ALERT_SOURCE = re.compile(r"[AB][A-Z0-9]{2,20}")
_RUNBOOK_FORM = (
    "an http(s) URL template with {path} and optionally {anchor}, such as "
    "https://wiki.example.com/runbooks/{path}#{anchor}"
)
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def check_alert_sources(sources: tuple[str, ...]) -> None:
    """Slack bot ids (``B…``) or app ids (``A…``), never user ids or names."""
    bad = [s for s in sources if not _ALERT_SOURCE.fullmatch(s)]
    if bad:
        shown = ", ".join(repr(s[:_SHOWN_CHARS]) for s in bad[:5])
        raise _bad(
            "comma-separated Slack bot IDs (B…) or app IDs (A…), upper-case letters and"
            f" digits, not user IDs or names; not IDs: {shown}"
        )


def check_runbook_url(value: str) -> None:
    """An http(s) URL template whose only placeholders are ``{path}`` and ``{anchor}``."""
    placeholders = set(_PLACEHOLDER.findall(value))
    if "{path}" not in placeholders or not placeholders <= {"{path}", "{anchor}"}:
        raise _bad(_RUNBOOK_FORM)
    check_http_url(_PLACEHOLDER.sub("x", value), what=_RUNBOOK_FORM)


def _env_name(loc: str) -> str:
    """The operator's name of a setting (its environment variable) from an error location."""
    info = Settings.model_fields.get(loc)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return loc


def _field_of(name: str) -> str | None:
    for field_name in Settings.model_fields:
        if name == field_name or name == _env_name(field_name):
            return field_name
    return None


def _range(field_name: str | None) -> str:
    """The numeric range of a field, e.g. ``at least 1`` or ``greater than 0 and at most 3600``."""
    if field_name is None:
        return ""
    words = []
    for item in Settings.model_fields[field_name].metadata:
        if isinstance(item, annotated_types.Ge):
            words.append(f"at least {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            words.append(f"greater than {item.gt}")
        elif isinstance(item, annotated_types.Le):
            words.append(f"at most {item.le}")
        elif isinstance(item, annotated_types.Lt):
            words.append(f"less than {item.lt}")
    return " and ".join(words)


def _plain_type(annotation: Any) -> bool:
    """A number, a switch or a fixed choice (optional or not): safe to echo back."""
    if annotation in (int, float, bool) or get_origin(annotation) is Literal:
        return True
    args = [a for a in get_args(annotation) if a is not type(None)]
    return bool(args) and all(a in (int, float, bool) for a in args)


def _shown(field_name: str | None, value: Any) -> str:
    """The rejected value, only for plain numbers, switches and choices (never a string that
    may carry a credential: URLs, DSNs, tokens, paths)."""
    if field_name is None or not isinstance(value, str | int | float):
        return ""
    if not _plain_type(Settings.model_fields[field_name].annotation):
        return ""
    text = str(value)
    return f" (got {text[:_SHOWN_CHARS]!r})" if text.strip() else " (got an empty value)"


_KINDS = {
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "int_type": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false (also 1/0, yes/no, on/off)",
    "bool_type": "true or false",
    "finite_number": "a finite number",
}
_BOUNDS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _requirement(error: Any, field_name: str | None) -> str:
    kind, bounds = error["type"], _range(field_name)
    if kind == _FORM:
        return str(error["ctx"]["requirement"])
    if kind in _KINDS:
        return _KINDS[kind] + (f" ({bounds})" if bounds else "")
    if kind in _BOUNDS:
        return bounds or "within its range"
    if kind == "literal_error":
        return str(error["ctx"]["expected"])
    if kind == "string_pattern_mismatch":
        return f"text matching {error['ctx']['pattern']}"
    return f"valid ({kind})"


def describe_invalid_settings(exc: ValidationError) -> str:
    """ONE message naming every invalid setting and what it must be; secrets are never shown.

    ``DIAG_MAX_MODEL_CALLS=abc`` reads "must be a whole number (at least 1) (got 'abc')" and
    ``=0`` reads "must be at least 1 (got 0)"; a DSN or URL is described, never echoed.
    """
    parts: list[str] = []
    seen: set[str] = set()
    for error in exc.errors():
        if error["type"] == "default_factory_not_called":
            continue  # a default derived from a setting that is itself invalid (named already)
        # The one model-level check is the state folder's (``_state_dir_usable``).
        loc = str(error["loc"][0]) if error["loc"] else "state_dir"
        field_name = _field_of(loc)
        name = _env_name(field_name) if field_name else loc
        if name in seen:
            continue
        seen.add(name)
        requirement = _requirement(error, field_name)
        parts.append(f"{name} must be {requirement}{_shown(field_name, error.get('input'))}")
    return "invalid settings: " + "; ".join(parts)
