"""Cold start: a command imports only what it needs (issue 23). ``--help``, ``patterns`` and a
``check`` without a runbook folder never load LlamaIndex, and one Slack module (the ops endpoints'
``sre_diag.slack.metrics``) does not load the harness behind ``sre_diag.slack.register``. A
``diagnose`` whose history fits its memory's limit loads no tiktoken encoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

_HEAVY = ("llama_index", "sre_diag.harness.run", "bm25s")

# Runs a command in-process, then reports which of the heavy modules it loaded.
_RUN = """
import contextlib, io, json, sys
from sre_diag.commands.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}
                        or m in {heavy!r})))
"""

_IMPORT = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}
                        or m in {heavy!r})))
"""


# A diagnosis against a model endpoint nobody listens on (it fails MODEL_ERROR CONNECTION after
# the agent built its memory), then what it loaded.
_DIAGNOSE = """
import contextlib, io, json, sys
from sre_diag.commands.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["diagnose", "disk full on db-1"])
import llama_index.core
print(json.dumps({{"code": code, "out": out.getvalue(), "modules": sorted(sys.modules),
                  "tokenizer": llama_index.core.global_tokenizer is not None}}))
"""


def _loaded(tmp_path: Path, code: str, *args: str, **settings: str) -> Any:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), **settings}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def _diagnosed(tmp_path: Path, **settings: str) -> dict[str, Any]:
    loaded: dict[str, Any] = _loaded(
        tmp_path,
        _DIAGNOSE.format(),
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OPENAI_API_KEY="unused",
        DIAG_AUDIT_SINK=f"jsonl:{tmp_path / 'audit'}",
        **settings,
    )
    assert json.loads(loaded["out"])["failure"] == {"code": "MODEL_ERROR", "detail": "CONNECTION"}
    return loaded


@pytest.mark.parametrize(
    "argv", [["--help"], ["diagnose", "--help"], ["patterns", os.devnull], ["check"]]
)
def test_the_command_loads_no_llama_index(tmp_path: Path, argv: list[str]) -> None:
    assert _loaded(tmp_path, _RUN.format(heavy=_HEAVY), *argv) == []


def test_check_with_a_runbook_folder_still_reads_it(tmp_path: Path) -> None:
    """The runbook index is imported (before any probe) when there is a folder to read."""
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "disk.en.md").write_text("# Disk\n\n## Full\n\nFree space.\n", encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "sre_diag", "check", "--json"],
        cwd=tmp_path, env={**env, "DIAG_KNOWLEDGE_DIR": str(folder)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    runbooks = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "runbooks")
    assert runbooks["status"] == "OK", runbooks


@pytest.mark.parametrize(
    "module", ["sre_diag.slack.metrics", "sre_diag.service.ops", "sre_diag.slack"]
)
def test_a_slack_module_does_not_load_the_harness(tmp_path: Path, module: str) -> None:
    assert _loaded(tmp_path, _IMPORT.format(module=module, heavy=_HEAVY)) == []


def test_diagnose_loads_no_tokenizer(tmp_path: Path) -> None:
    """The run's memory fits its limit in bytes: no tiktoken encoding is loaded for it."""
    assert _diagnosed(tmp_path)["tokenizer"] is False


@pytest.mark.parametrize("logs", ["", "folder"])
def test_diagnose_without_loki_loads_no_aiohttp(tmp_path: Path, logs: str) -> None:
    """Only a Loki source needs aiohttp (the Loki client); unset or a folder: never imported."""
    settings = {"DIAG_LOGS_SOURCE": str(tmp_path)} if logs else {}
    modules = _diagnosed(tmp_path, **settings)["modules"]
    assert [m for m in modules if m.split(".")[0] == "aiohttp" or m.endswith(".loki")] == []


def test_diagnose_without_runbooks_loads_no_retriever(tmp_path: Path) -> None:
    """No DIAG_KNOWLEDGE_DIR: no BM25 retriever, bm25s or jieba (and its dictionary)."""
    modules = _diagnosed(tmp_path)["modules"]
    assert [m for m in modules if m.split(".")[0] in {"bm25s", "jieba"}] == []
    assert "llama_index.retrievers.bm25" not in modules


@pytest.mark.parametrize("dsn", ["", "mysql://reader:pw@127.0.0.1:9/shop"])
def test_diagnose_that_sends_no_statement_loads_no_sql_parser(tmp_path: Path, dsn: str) -> None:
    """The SQL guard (sqlglot) loads at the first ``query_mysql`` statement: neither an unset
    DSN nor a configured one (its catalogue read at the run's start) imports it."""
    settings = {"DIAG_MYSQL_DSN": dsn} if dsn else {}
    modules = _diagnosed(tmp_path, **settings)["modules"]
    assert [m for m in modules if m.split(".")[0] == "sqlglot" or ".sql.guard" in m] == []
