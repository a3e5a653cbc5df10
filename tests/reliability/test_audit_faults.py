"""Broken audit sinks at the process level: ``python -m sre_diag diagnose`` and ``serve``.

The sinks are real: a MariaDB ``diag_audit`` another session holds with ``LOCK TABLES ... WRITE``,
a TCP server that accepts and never greets, a FIFO or a planted symlink where the day's file
should be, a full disk (the process's file size limit, ``RLIMIT_FSIZE``, with ``SIGXFSZ``
ignored: writes end short or with ``EFBIG`` as on a full volume). In every case the answer is
on stdout within its deadline — for the slow sinks before the audit failure is even logged —,
the process exits within the audit bound after it, the failure is logged with a reason and no
traceback, and a file the sink refused is left exactly as it was. A dropped table is recreated
by the next process; ``serve`` posts the answer and drains on SIGTERM within its bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_sdk.signature import SignatureVerifier

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from tests.audit_support import (
    audit_database,
    audit_file_names,
    audit_rows,
    drop_audit_table,
    locked_audit_table,
    make_fifos,
    make_symlinks,
    silent_server,
)
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step
from tests.mysql_db import MARIADB_SOLO, run_name
from tests.slack.support import ADMIN, BOT_TOKEN, SIGNING_SECRET

pytestmark = MARIADB_SOLO

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0  # DIAG_AUDIT_TIMEOUT_SECONDS of the processes
DATABASE = run_name("diag_test_audit_faults")
# A process answers within this much of a healthy process's answer time (start-up included).
ANSWER_SLACK = 2.0
# And exits within one audit write plus the drain's slack after its answer (plus interpreter
# shutdown).
EXIT_AFTER_ANSWER = TIMEOUT + 1.0 + 1.5

# Run the CLI under a file size limit, as a full volume would: SIGXFSZ ignored, so writes past
# the limit end short or fail with EFBIG instead of killing the process.
FSIZE_WRAPPER = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv[0] = "sre_diag"
runpy.run_module("sre_diag", run_name="__main__", alter_sys=True)
"""


@dataclass
class Timed:
    """One CLI process: exit code, output, and when (s after spawn) things happened."""

    code: int
    out: str
    err: str
    answer_at: float
    exit_at: float
    lost_at: float | None = None
    lost_lines: list[str] = field(default_factory=list)

    def result(self) -> dict[str, Any]:
        lines = [line for line in self.out.splitlines() if line.strip()]
        assert len(lines) == 1, self.out
        parsed: dict[str, Any] = json.loads(lines[0])
        return parsed


async def _read_lines(
    stream: asyncio.StreamReader, started: float, sink: list[tuple[float, str]]
) -> None:
    while line := await stream.readline():
        sink.append((time.monotonic() - started, line.decode("utf-8", "replace")))


async def run_cli(env: dict[str, str], cwd: Path, *, fsize_limit: int | None = None) -> Timed:
    prefix = (
        ["-c", FSIZE_WRAPPER, str(fsize_limit)] if fsize_limit is not None else ["-m", "sre_diag"]
    )
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable, *prefix, "diagnose", "payment-api 5xx since 10:05",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=cwd,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    out: list[tuple[float, str]] = []
    err: list[tuple[float, str]] = []
    await asyncio.wait_for(
        asyncio.gather(
            _read_lines(process.stdout, started, out),
            _read_lines(process.stderr, started, err),
            process.wait(),
        ),
        timeout=120,
    )
    assert process.returncode is not None and out, "".join(line for _, line in err)
    lost = [(at, line) for at, line in err if " lost: " in line]
    return Timed(
        code=process.returncode,
        out="".join(line for _, line in out),
        err="".join(line for _, line in err),
        answer_at=out[0][0],
        exit_at=time.monotonic() - started,
        lost_at=lost[0][0] if lost else None,
        lost_lines=[line for _, line in lost],
    )


def _env(model_url: str, tmp_path: Path, sink: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "sk-test-key",
        "DIAG_MODEL": "scripted-proxy-model",
        "DIAG_AUDIT_SINK": sink,
        "DIAG_AUDIT_TIMEOUT_SECONDS": str(TIMEOUT),
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
    }


_BASELINE: list[float] = []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def healthy_answer_seconds(model_server: StartServer, tmp_path: Path) -> float:
    """How long a healthy CLI process takes to answer on this machine (measured once)."""
    if not _BASELINE:
        server = await model_server([final_step(draft_json(conclusion=False))])
        run = await run_cli(_env(server.base_url, tmp_path, f"jsonl:{tmp_path / 'ok'}"), tmp_path)
        assert run.code == 0 and run.lost_at is None, run.err
        _BASELINE.append(run.answer_at)
        print(f"\n[audit] healthy CLI answer {run.answer_at:.2f} s, exit {run.exit_at:.2f} s")
    return _BASELINE[0]


SinkSpec = Callable[[Path], AbstractAsyncContextManager[str]]


@asynccontextmanager
async def _locked(tmp_path: Path) -> AsyncIterator[str]:
    dsn = audit_database(DATABASE, with_table=True)
    with locked_audit_table(DATABASE):
        yield dsn
    assert audit_rows(DATABASE) == []


@asynccontextmanager
async def _silent(tmp_path: Path) -> AsyncIterator[str]:
    async with silent_server() as server:
        yield server.dsn()
        assert server.accepted == 1


@asynccontextmanager
async def _fifo(tmp_path: Path) -> AsyncIterator[str]:
    make_fifos(tmp_path / "audit")
    yield f"jsonl:{tmp_path / 'audit'}"


@asynccontextmanager
async def _symlink(tmp_path: Path) -> AsyncIterator[str]:
    target = tmp_path / "elsewhere" / "planted.txt"
    target.parent.mkdir()
    target.write_text("untouched\n")
    make_symlinks(tmp_path / "audit", target)
    yield f"jsonl:{tmp_path / 'audit'}"
    assert target.read_text() == "untouched\n"


@dataclass(frozen=True)
class Broken:
    name: str
    sink: SinkSpec
    reason: str
    slow: bool  # the failure comes only after a wait: it must be logged after the answer


BROKEN = [
    Broken("locked-table", _locked, "MySQL error 1205: lock wait timeout", slow=True),
    Broken(
        "silent-server",
        _silent,
        f"no answer within {TIMEOUT:g} s while connecting to MySQL (TCP connect, server greeting",
        slow=True,
    ),
    Broken("fifo", _fifo, "is a FIFO, not a regular file", slow=False),
    Broken("symlink", _symlink, "is a symbolic link; links are not followed", slow=False),
]


def _assert_answered_on_time(run: Timed, baseline: float, broken: str) -> None:
    assert run.code == 0, run.err
    assert run.result()["outcome"] == "DRAFT"
    assert run.answer_at <= baseline + ANSWER_SLACK, f"{broken}: answer at {run.answer_at:.2f} s"
    assert run.exit_at - run.answer_at <= EXIT_AFTER_ANSWER, f"{broken}: exit at {run.exit_at:.2f}"
    assert "Traceback" not in run.err + run.out
    assert "audit-pw-SILENT" not in run.err + run.out


@pytest.mark.parametrize("broken", BROKEN, ids=lambda b: b.name)
async def test_cli_answers_on_time_whatever_the_audit_sink(
    broken: Broken, model_server: StartServer, tmp_path: Path
) -> None:
    baseline = await healthy_answer_seconds(model_server, tmp_path)
    server = await model_server([final_step(draft_json(conclusion=False))])
    async with broken.sink(tmp_path) as sink:
        run = await run_cli(_env(server.base_url, tmp_path, sink), tmp_path)
    _assert_answered_on_time(run, baseline, broken.name)
    run_id = run.result()["run_id"]
    (lost,) = run.lost_lines
    assert f"audit record of {run_id} lost: " in lost and broken.reason in lost
    assert run.lost_at is not None
    if broken.slow:  # the answer did not wait for the sink
        assert run.answer_at < run.lost_at
    print(
        f"\n[audit] CLI {broken.name}: answer {run.answer_at:.2f} s (healthy {baseline:.2f} s), "
        f"loss logged {run.lost_at:.2f} s, exit {run.exit_at:.2f} s"
    )


def _prefill(directory: Path) -> tuple[Path, bytes]:
    """Today's audit file with two earlier records in it."""
    directory.mkdir(parents=True)
    path = audit_file_names(directory)[0]
    earlier = [
        {"run_id": f"run-earlier-{n}", "outcome": "DRAFT", "pad": "p" * 2000} for n in (1, 2)
    ]
    content = "".join(json.dumps(r) + "\n" for r in earlier).encode()
    path.write_bytes(content)
    return path, content


@pytest.mark.parametrize("room", [0, 64, 300], ids=["no-room", "64-bytes", "300-bytes"])
async def test_a_full_disk_leaves_no_partial_line_and_the_next_record_is_whole(
    room: int, model_server: StartServer, tmp_path: Path
) -> None:
    baseline = await healthy_answer_seconds(model_server, tmp_path)
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft, draft])
    path, content = _prefill(tmp_path / "audit")
    env = _env(server.base_url, tmp_path, f"jsonl:{tmp_path / 'audit'}")
    full = await run_cli(env, tmp_path, fsize_limit=len(content) + room)
    _assert_answered_on_time(full, baseline, f"full disk ({room} bytes of room)")
    (lost,) = full.lost_lines
    expected = "EFBIG" if room == 0 else "short write"
    assert expected in lost, lost
    assert path.read_bytes() == content  # nothing of the refused record is left behind
    after = await run_cli(env, tmp_path)  # space again: the next record is whole
    assert after.code == 0 and not after.lost_lines, after.err
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["run_id"] for r in records] == [
        "run-earlier-1",
        "run-earlier-2",
        after.result()["run_id"],
    ]
    print(f"\n[audit] CLI full disk ({room} B room): answer {full.answer_at:.2f} s")


async def test_a_dropped_table_is_recreated_by_the_next_process(
    model_server: StartServer, tmp_path: Path
) -> None:
    draft = final_step(draft_json(conclusion=False))
    server = await model_server([draft, draft])
    dsn = audit_database(DATABASE)
    env = _env(server.base_url, tmp_path, dsn)
    first = await run_cli(env, tmp_path)
    assert [r["run_id"] for r in audit_rows(DATABASE)] == [first.result()["run_id"]]
    drop_audit_table(DATABASE)
    second = await run_cli(env, tmp_path)
    assert not second.lost_lines and "diag_audit was missing" in second.err
    assert [r["run_id"] for r in audit_rows(DATABASE)] == [second.result()["run_id"]]


# -- serve: the answer is posted at once, SIGTERM drains within its bound ---------------------

SERVE_TIMEOUT = 3.0  # long enough that an answer waiting for the sink would show


def _mention(ts: str) -> tuple[str, dict[str, str]]:
    body = json.dumps(
        {
            "type": "event_callback",
            "team_id": "T00000001",
            "api_app_id": "A00000001",
            "event_id": f"EvAUDIT{ts.replace('.', '')}",
            "event_time": 1764300000,
            "event": {
                "type": "app_mention",
                "user": "UHUMAN01",
                "channel": ADMIN,
                "ts": ts,
                "event_ts": ts,
                "text": "<@UDIAG0001> payment-api 5xx since 10:05",
            },
        }
    )
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=timestamp, body=body)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature or "",
    }
    return body, headers


async def _post(port: int, ts: str) -> float:
    body, headers = _mention(ts)
    async with aiohttp.ClientSession() as session:
        sent = time.monotonic()
        url = f"http://127.0.0.1:{port}/slack/events"
        async with session.post(url, data=body, headers=headers) as response:
            assert response.status == 200
    return sent


async def _answer_at(slack: RecordingSlackApi, thread_ts: str) -> float:
    for _ in range(600):
        answers = [
            c
            for c in slack.calls_of("chat.postMessage")
            if c.params.get("metadata") and c.params.get("thread_ts") == thread_ts
        ]
        if answers:
            return answers[0].at
        await asyncio.sleep(0.02)
    raise AssertionError(f"no answer in thread {thread_ts}")


async def _serve(env: dict[str, str], cwd: Path, port: int) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "serve", "--http", "--port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd,
    )  # fmt: skip
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return process
    process.kill()
    raise AssertionError("serve did not start listening")


async def test_serve_posts_answers_at_once_and_drains_on_sigterm_with_a_silent_sink(
    model_server: StartServer, tmp_path: Path
) -> None:
    draft = draft_json(conclusion=False)
    # The second answer is slow, so SIGTERM lands while that run is in flight.
    model = await model_server([final_step(draft), ModelStep(content=draft, delay_seconds=1.0)])
    port = _free_port()
    async with RecordingSlackApi() as slack, silent_server() as silent:
        env = {
            **os.environ,
            **_env(model.base_url, tmp_path, silent.dsn()),
            "PYTHONPATH": str(REPO),
            "DIAG_AUDIT_TIMEOUT_SECONDS": str(SERVE_TIMEOUT),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "DIAG_SLACK_API_URL": slack.base_url,
            "DIAG_ADMIN_CHANNELS": ADMIN,
        }
        env.pop("SLACK_APP_TOKEN", None)
        process = await _serve(env, tmp_path, port)
        try:
            sent = await _post(port, "1764300000.000100")
            first = await _answer_at(slack, "1764300000.000100") - sent
            await _post(port, "1764300000.000200")
            await model.wait_for_requests(2)
            process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            _, err = await asyncio.wait_for(process.communicate(), timeout=60)
            drained = time.monotonic() - signalled
            second = await _answer_at(slack, "1764300000.000200") - signalled
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    stderr = err.decode("utf-8", "replace")
    assert process.returncode == 0, stderr
    assert first < SERVE_TIMEOUT - 1.0, f"first answer {first:.2f} s after the mention"
    assert second < 1.0 + SERVE_TIMEOUT - 1.0, f"second answer {second:.2f} s after SIGTERM"
    # the in-flight run (1 s) + one audit write + the drain's slack + interpreter exit
    assert drained <= 1.0 + SERVE_TIMEOUT + 1.0 + 2.0, f"drained in {drained:.2f} s"
    lost = [line for line in stderr.splitlines() if " lost: " in line]
    # The first record times out connecting; the second, queued behind it, either does too or
    # is given up when the drain's bound is reached: both counted, both with a reason.
    reasons = ("while connecting to MySQL", "not written before the audit writer closed")
    assert len(lost) == 2 and all(any(r in line for r in reasons) for line in lost), stderr
    assert reasons[0] in lost[0]
    assert "Traceback" not in stderr and "audit-pw-SILENT" not in stderr
    print(
        f"\n[audit] serve, silent sink: answer {first * 1000:.0f} ms after the mention; "
        f"SIGTERM: answer {second * 1000:.0f} ms, exit {drained:.2f} s"
    )
