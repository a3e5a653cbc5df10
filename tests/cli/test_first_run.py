"""A first run with nothing configured says what to do, and writes nothing where it starts.

Every command runs as a process from an empty folder, with no ``DIAG_*``, ``OPENAI_*`` or
``SLACK_*`` settings and a home of its own: commands that would call the model refuse with
``MODEL_NOT_CONFIGURED`` before any request, ``check`` names the model's state, and the
product's files go to the state folder, never to the current one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from sre_diag.commands.cli import _parser
from sre_diag.resources import (
    BUNDLED_CASSETTES,
    BUNDLED_KNOWLEDGE,
    BUNDLED_LOGS,
    sample_slack_event,
)

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DIAG_", "OPENAI_", "SLACK_", "XDG_"))
    }
    env.update(HOME=str(home), PYTHONPATH=str(REPO), DIAG_LOG_LEVEL="WARNING", **extra)
    return env


def _run(cwd: Path, home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sre_diag", *args],
        cwd=cwd, env=_env(home, **extra), capture_output=True, text=True, timeout=TIMEOUT,
        check=False,
    )  # fmt: skip


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ("diagnose", "payment-api 5xx since 10:05"),
        ("replay", "EVENT"),
        ("eval", "CASES"),
        ("serve", "--http", "--port", "9"),
        ("worker",),
    ],
    ids=["diagnose", "replay", "eval", "serve", "worker"],
)
def test_commands_that_need_a_model_refuse_without_one(
    empty: Path, home: Path, args: tuple[str, ...]
) -> None:
    real = {"EVENT": str(sample_slack_event()), "CASES": str(REPO / "examples" / "evals")}
    done = _run(empty, home, *(real.get(a, a) for a in args), DIAG_ADMIN_CHANNELS="C0ADMIN01")
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "MODEL_NOT_CONFIGURED"
    assert "OPENAI_BASE_URL" in error["message"] and "OPENAI_API_KEY" in error["message"]
    assert "sre-diag demo" in error["message"]
    assert "Traceback" not in done.stderr
    assert list(empty.iterdir()) == []


def test_either_setting_counts_as_configured(empty: Path, home: Path) -> None:
    """A key alone (the SDK's default host) is configured: the refusal is then a plain input
    rejection, not MODEL_NOT_CONFIGURED."""
    done = _run(empty, home, "diagnose", "   ", OPENAI_API_KEY="sk-first-run")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "BLANK_QUERY"


def test_check_names_the_model_state(empty: Path, home: Path) -> None:
    done = _run(empty, home, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("model ")]
    assert "not configured" in line and "OPENAI_BASE_URL" in line
    done = _run(empty, home, "check", OPENAI_BASE_URL="http://llm.internal:8000/v1",
                DIAG_MODEL="qwen-inc")  # fmt: skip
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("model ")]
    assert "not probed" in line and "llm.internal:8000" in line and "qwen-inc" in line
    assert "check --model" in line
    report = json.loads(_run(empty, home, "check", "--json").stdout)
    assert report["model"]["status"] == "NOT_CONFIGURED"
    assert list(empty.iterdir()) == []


def test_replay_with_a_cassette_runs_offline(empty: Path, home: Path) -> None:
    """The sample event replayed with the recorded model turns, no model endpoint set."""
    done = _run(
        empty, home, "replay", str(sample_slack_event()),
        "--cassette", str(BUNDLED_CASSETTES / "without-mysql.json"),
        DIAG_KNOWLEDGE_DIR=str(BUNDLED_KNOWLEDGE), DIAG_LOGS_SOURCE=str(BUNDLED_LOGS),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["outcome"] == "DRAFT"
    assert list(empty.iterdir()) == []
    audits = list((home / ".local" / "state" / "sre-diag" / "audit").glob("*.jsonl"))
    assert audits and audits[0].read_text(encoding="utf-8").count("\n") == 1


@pytest.mark.parametrize(
    "content",
    [
        '{"steps": []}',
        "not json",
        '{"steps": 3}',
        '{"steps": [{"content": "x"}, {"content": "y"}]}',
    ],
)
def test_a_cassette_that_does_not_fit_is_refused(empty: Path, home: Path, content: str) -> None:
    cassette = home / "cassette.json"
    cassette.write_text(content, encoding="utf-8")
    done = _run(empty, home, "replay", str(sample_slack_event()), "--cassette", str(cassette))
    assert done.returncode == 2, done.stdout + done.stderr
    code = json.loads(done.stdout.strip().splitlines()[-1])["error"]["code"]
    assert code in {"INVALID_CASSETTE", "CASSETTE_MISMATCH"}
    assert "Traceback" not in done.stderr


def test_state_folder_follows_xdg(empty: Path, home: Path, tmp_path: Path) -> None:
    state = tmp_path / "xdg"
    done = _run(empty, home, "check", "--json", XDG_STATE_HOME=str(state))
    audit = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "audit")
    assert str(state / "sre-diag" / "audit") in audit["detail"]
    assert stat.S_IMODE((state / "sre-diag").stat().st_mode) == 0o700


@pytest.mark.parametrize("kind", ["file", "relative", "read-only"])
def test_an_unusable_state_folder_is_a_settings_error(
    empty: Path, home: Path, tmp_path: Path, kind: str
) -> None:
    if kind == "file":
        target = tmp_path / "a-file"
        target.write_text("x")
        state = str(target / "sub")
    elif kind == "relative":
        state = "state"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        parent = tmp_path / "ro"
        parent.mkdir(mode=0o500)
        state = str(parent / "sre-diag")
    done = _run(empty, home, "diagnose", "q", DIAG_STATE_DIR=state, OPENAI_API_KEY="sk-x")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "INVALID_SETTINGS" and "DIAG_STATE_DIR" in error["message"]
    assert list(empty.iterdir()) == []


def test_explicit_audit_and_cache_need_no_state_folder(
    empty: Path, home: Path, tmp_path: Path
) -> None:
    target = tmp_path / "a-file"
    target.write_text("x")
    done = _run(
        empty, home, "check", "--json", DIAG_STATE_DIR=str(target / "sub"),
        DIAG_AUDIT_SINK=f"jsonl:{tmp_path / 'audit'}", DIAG_CACHE_DIR=str(tmp_path / "cache"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout


def test_version_and_usage(empty: Path, home: Path) -> None:
    done = _run(empty, home, "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sre-diag {version('sre-diag')}"
    bare = _run(empty, home)
    assert bare.returncode == 2 and bare.stdout == ""
    assert bare.stderr.startswith("usage: sre-diag") and "demo" in bare.stderr
    helped = _run(empty, home, "--help")
    assert helped.returncode == 0 and "CONTRACTS" not in helped.stdout and "§" not in helped.stdout


def test_every_option_of_every_command_has_help() -> None:
    parser = _parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    assert isinstance(subparsers.choices, dict)
    missing = [
        f"{name} {action.dest}"
        for name, command in subparsers.choices.items()
        for action in command._actions
        if action.help is None
    ]
    assert missing == []
    for name, command in subparsers.choices.items():
        text = command.format_help()
        assert "§" not in text and "CONTRACTS" not in text and "``" not in text, name
