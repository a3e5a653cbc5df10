"""Logs (issue 12 item 7): ``DIAG_LOG_FORMAT=json`` one object a line with ``run_id`` inside a run,
``DIAG_LOG_LEVEL``, third-party chatter only at DEBUG, a model connection failure naming the
endpoint host and never the key. ``diagnose`` runs as a process against the scripted model.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from sre_diag.log import bind_run_id, build_handler
from tests.cli.test_cli import base_env, run_cli, single_json
from tests.conftest import StartServer
from tests.harness.support import call, draft_json, final_step, tool_step

KEY = "sk-test-CANARY-openai-key-91c2"  # base_env's key


def json_lines(stderr: str) -> list[dict[str, Any]]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no log lines"
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    for entry in parsed:
        assert {"time", "level", "logger", "message"} <= entry.keys(), entry
        assert datetime.fromisoformat(entry["time"]).tzinfo is not None, entry["time"]
    return parsed


async def _diagnose(server_url: str, tmp_path: Path, **env: str) -> tuple[int, str, str]:
    return await run_cli(
        "diagnose", "payment-api 5xx", env=base_env(server_url, tmp_path, **env), cwd=tmp_path
    )


async def test_json_logs_carry_run_id_on_every_line_of_the_run(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [
            tool_step(call("call-1", "lookup_knowledge", {"query": "pool"})),
            final_step(draft_json(conclusion=False)),
        ]
    )
    code, out, err = await _diagnose(server.base_url, tmp_path, DIAG_LOG_FORMAT="json")
    result = single_json(out)
    assert code == 0, err
    entries = json_lines(err)
    run_lines = [e for e in entries if result["run_id"] in e["message"]]
    assert any("started" in e["message"] for e in run_lines)
    assert any("ended" in e["message"] for e in run_lines)
    started = next(i for i, e in enumerate(entries) if "started" in e["message"])
    ended = next(i for i, e in enumerate(entries) if "ended" in e["message"])
    inside = entries[started : ended + 1]
    assert all(e.get("run_id") == result["run_id"] for e in inside), inside
    assert not any(e["logger"].startswith(("httpx", "httpcore", "openai")) for e in entries)
    assert KEY not in err


async def test_debug_level_shows_http_request_lines(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server([final_step(draft_json(conclusion=False))])
    code, _, err = await _diagnose(
        server.base_url, tmp_path, DIAG_LOG_FORMAT="json", DIAG_LOG_LEVEL="debug"
    )
    assert code == 0, err
    entries = json_lines(err)
    assert any(e["logger"] == "httpx" and "HTTP Request" in e["message"] for e in entries)
    assert KEY not in err


async def test_text_format_at_info_hides_httpx_and_warning_hides_info(
    model_server: StartServer, tmp_path: Path
) -> None:
    server = await model_server(
        [final_step(draft_json(conclusion=False)), final_step(draft_json(conclusion=False))]
    )
    code, out, err = await _diagnose(server.base_url, tmp_path)
    assert code == 0, err
    run_id = single_json(out)["run_id"]
    assert f"[{run_id}]" in err  # the text format tags lines inside the run
    assert "HTTP Request" not in err
    code, _, quiet = await _diagnose(server.base_url, tmp_path, DIAG_LOG_LEVEL="WARNING")
    assert code == 0
    assert " INFO " not in quiet


async def test_model_connection_failure_names_the_host_never_the_key(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = await _diagnose(
        f"http://127.0.0.1:{port}/v1", tmp_path, DIAG_LOG_FORMAT="json"
    )
    assert code == 1
    assert single_json(out)["failure"] == {"code": "MODEL_ERROR", "detail": "CONNECTION"}
    entries = json_lines(err)
    failure = [e for e in entries if f"model endpoint 127.0.0.1:{port} unreachable" in e["message"]]
    assert failure and failure[0]["level"] == "ERROR" and failure[0].get("run_id")
    assert KEY not in err + out


async def test_run_id_follows_tasks_not_neighbours() -> None:
    stream = io.StringIO()
    log = logging.getLogger("sre_diag.test_logging")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = build_handler("json", stream)
    log.addHandler(handler)

    async def run(run_id: str) -> None:
        bind_run_id(run_id)
        await asyncio.sleep(0)
        log.info("inside %s", run_id)
        await asyncio.create_task(asyncio.sleep(0))
        log.info("still inside %s", run_id)

    try:
        await asyncio.gather(asyncio.create_task(run("run-a")), asyncio.create_task(run("run-b")))
        log.info("outside")
    finally:
        log.removeHandler(handler)
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    for entry in entries:
        if entry["message"] == "outside":
            assert "run_id" not in entry
        else:
            assert entry["message"].endswith(entry["run_id"]), entry
    assert len(entries) == 5
