"""Settings errors that teach (issue 12 item 3): every invalid setting named with what it must be,
in ONE message, exit 2; secrets, DSNs and URLs never echoed; argparse usage errors end in the
JSON ``error`` object on stdout too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sre_diag.settings import Settings, describe_invalid_settings
from tests.cli.test_cli import run_cli, single_json

CANARY = "CANARY-secret-55"


def message_for(**env: str) -> str:
    """The INVALID_SETTINGS message for these values (no environment, no ``.env``)."""
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, **env)  # type: ignore[arg-type]
    return describe_invalid_settings(info.value)


def settings_with(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[arg-type]


def test_not_a_number_and_out_of_range_read_differently() -> None:
    not_a_number = message_for(DIAG_MAX_MODEL_CALLS="abc")
    zero = message_for(DIAG_MAX_MODEL_CALLS="0")
    assert not_a_number != zero
    assert not_a_number == (
        "invalid settings: DIAG_MAX_MODEL_CALLS must be a whole number (at least 1) (got 'abc')"
    )
    assert zero == "invalid settings: DIAG_MAX_MODEL_CALLS must be at least 1 (got '0')"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"DIAG_DEADLINE_SECONDS": "soon"},
            "DIAG_DEADLINE_SECONDS must be a number (greater than 0)",
        ),
        ({"DIAG_DEADLINE_SECONDS": "-1"}, "DIAG_DEADLINE_SECONDS must be greater than 0"),
        (
            {"DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS": "7200"},
            "DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS must be greater than 0 and at most 3600",
        ),
        (
            {"DIAG_MYSQL_MAX_ROWS": "5000"},
            "DIAG_MYSQL_MAX_ROWS must be at least 1 and at most 1000",
        ),
        (
            {"DIAG_MYSQL_REQUIRE_READ_ONLY": "maybe"},
            "DIAG_MYSQL_REQUIRE_READ_ONLY must be true or false",
        ),
        ({"DIAG_LOG_FORMAT": "xml"}, "DIAG_LOG_FORMAT must be 'text' or 'json' (got 'xml')"),
        ({"DIAG_LOG_LEVEL": "loud"}, "DIAG_LOG_LEVEL must be 'DEBUG', 'INFO', 'WARNING'"),
    ],
)
def test_numbers_switches_and_choices_say_type_and_range(
    env: dict[str, str], expected: str
) -> None:
    assert expected in message_for(**env)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "DIAG_MYSQL_DSN",
            f"postgres://u:{CANARY}@db/x",
            "mysql://user:password@host[:port]/database",
        ),
        ("DIAG_MYSQL_DSN", f"mysql://u:{CANARY}@db:port/x", "port must be a number"),
        ("DIAG_MYSQL_DSN", f"mysql://u:{CANARY}@db", "exactly one database name"),
        ("DIAG_MYSQL_DSN", f"mysql://:{CANARY}@/x", "the user or the host is missing"),
        ("DIAG_AUDIT_SINK", f"mysql://u:{CANARY}@db", "jsonl:DIR or mysql://"),
        ("DIAG_AUDIT_SINK", f"s3://{CANARY}", "jsonl:DIR or mysql://"),
        ("DIAG_AUDIT_SINK", "jsonl:", "jsonl:DIR or mysql://"),
        ("OPENAI_BASE_URL", f"api.example.com/{CANARY}", "the scheme must be http or https"),
        ("OPENAI_BASE_URL", f"http://:{CANARY}@/v1", "the host is missing"),
        ("DIAG_SLACK_API_URL", f"ftp://slack/{CANARY}", "http(s)://host[:port][/path] URL"),
        ("DIAG_LOGS_SOURCE", f"http://u:{CANARY}@loki:abc", "Loki base URL"),
        ("DIAG_LOGS_SOURCE", f"loki://{CANARY}", "the scheme must be http or https"),
        ("DIAG_REDIS_URL", CANARY, "the scheme must be redis, rediss or unix"),
        ("DIAG_REDIS_URL", f"redis://:{CANARY}@host:port/0", "port must be a number"),
        (
            "DIAG_REDIS_URL",
            f"redis://:{CANARY}@host/zero",
            "database after the host must be a number",
        ),
        ("DIAG_REDIS_URL", "redis://", "the host is missing"),
    ],
)
def test_malformed_dsns_and_urls_are_described_never_echoed(
    name: str, value: str, expected: str
) -> None:
    message = message_for(**{name: value})
    assert message.startswith(f"invalid settings: {name} must be ")
    assert expected in message
    assert CANARY not in message


def test_admin_channels_must_be_ids() -> None:
    message = message_for(DIAG_ADMIN_CHANNELS="C0123ABC,#ops,general,c0123abc")
    assert "DIAG_ADMIN_CHANNELS must be comma-separated Slack channel IDs" in message
    assert "C0123ABC or G0123ABC" in message
    assert "'#ops', 'general', 'c0123abc'" in message


@pytest.mark.parametrize(
    "env",
    [
        {"DIAG_ADMIN_CHANNELS": "C0123ABC, G0123ABC"},
        {"DIAG_REDIS_URL": "redis://:pw@127.0.0.1:6379/2"},
        {"DIAG_REDIS_URL": "rediss://cache.internal"},
        {"DIAG_REDIS_URL": "unix:///var/run/redis.sock"},
        {"DIAG_MYSQL_DSN": "mysql://ro:pw@db.internal/app"},
        {"DIAG_AUDIT_SINK": "mysql://audit:pw@db:3307/audit"},
        {"DIAG_AUDIT_SINK": "jsonl:~/audit"},
        {"DIAG_LOGS_SOURCE": "/var/log/diag"},
        {"DIAG_LOGS_SOURCE": "https://user:pw@loki.internal:3100"},
        {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"},
        {"DIAG_SLACK_API_URL": "https://slack-gov.com/api/"},
    ],
)
def test_well_formed_values_are_accepted(env: dict[str, str]) -> None:
    settings_with(**env)


def test_log_settings_defaults_and_spellings() -> None:
    defaults = settings_with()
    assert (defaults.log_format, defaults.log_level) == ("text", "INFO")
    assert settings_with(DIAG_LOG_LEVEL="warn").log_level == "WARNING"
    assert settings_with(DIAG_LOG_LEVEL="debug", DIAG_LOG_FORMAT="json").log_level == "DEBUG"


def test_every_invalid_setting_in_one_message() -> None:
    message = message_for(
        DIAG_MAX_MODEL_CALLS="abc",
        DIAG_REDIS_URL=CANARY,
        DIAG_MYSQL_DSN=f"mysql://u:{CANARY}@h",
        DIAG_ADMIN_CHANNELS="ops",
    )
    for name in ("DIAG_MAX_MODEL_CALLS", "DIAG_REDIS_URL", "DIAG_MYSQL_DSN", "DIAG_ADMIN_CHANNELS"):
        assert f"{name} must be" in message
    assert message.count("invalid settings:") == 1
    assert CANARY not in message


# -- through the command line ----------------------------------------------------------------------


async def _rejected(tmp_path: Path, *args: str, **env: str) -> dict[str, Any]:
    code, out, err = await run_cli(*args, env=env, cwd=tmp_path)
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert CANARY not in out + err
    error: dict[str, Any] = single_json(out)["error"]
    return error


async def test_diagnose_invalid_settings_exit_2_with_one_message(tmp_path: Path) -> None:
    abc = await _rejected(tmp_path, "diagnose", "q", DIAG_MAX_MODEL_CALLS="abc")
    zero = await _rejected(tmp_path, "diagnose", "q", DIAG_MAX_MODEL_CALLS="0")
    assert abc["code"] == zero["code"] == "INVALID_SETTINGS"
    assert "must be a whole number" in abc["message"]
    assert "must be at least 1 (got '0')" in zero["message"]


async def test_garbage_redis_url_is_invalid_settings_not_agent_error(tmp_path: Path) -> None:
    for command in (("diagnose", "q"), ("serve", "--http")):
        error = await _rejected(tmp_path, *command, DIAG_REDIS_URL=f"garbage-{CANARY}")
        assert error["code"] == "INVALID_SETTINGS"
        assert "DIAG_REDIS_URL must be redis://" in error["message"]


async def test_malformed_dsn_through_the_cli_is_not_echoed(tmp_path: Path) -> None:
    error = await _rejected(
        tmp_path, "diagnose", "q", DIAG_MYSQL_DSN=f"mysql://ro:{CANARY}@db.internal"
    )
    assert "DIAG_MYSQL_DSN must be mysql://user:password@host[:port]/database" in error["message"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("nosuch",), "invalid choice: 'nosuch'"),
        (("diagnose",), "required: QUERY"),
        (("serve", "--port", "eighty"), "invalid int value"),
        (("check", "--verbose"), "unrecognized arguments: --verbose"),
    ],
)
async def test_usage_errors_end_in_the_json_error_object(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    code, out, err = await run_cli(*args, env={}, cwd=tmp_path)
    assert code == 2
    error = json.loads(out)["error"]
    assert error["code"] == "INVALID_ARGUMENTS"
    assert expected in error["message"]
    assert "usage: sre-diag" in err
