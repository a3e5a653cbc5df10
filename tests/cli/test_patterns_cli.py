"""``sre-diag patterns [FILE]`` (CONTRACTS §1): one pattern out per line in, in order, exactly the
``top_messages[].pattern`` text the ``query_logs`` summary groups the line under (before the
display cut); invalid UTF-8 is read with replacement characters; exit 0."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.tools.logs.summary import PATTERN_CHARS, Grid, Tally
from tests.cli.test_cli import REPO

LINES = [
    "db pool exhausted: timed out after 3000ms waiting for connection",
    "db pool exhausted: timed out after 12ms waiting for connection",
    "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: authentication failure; rhost=218.188.2.4",
    "",
    "connect to node-7.prod.example.com:8443 failed token=abc123secret",
    "   spaced\tout   ",
]


async def _patterns(*args: str, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "patterns", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout=60)
    assert process.returncode is not None
    return process.returncode, out, err


def _summary_patterns(lines: list[str]) -> list[str]:
    """What the summary shows for each line alone (its single top pattern)."""
    start = datetime(2026, 11, 28, 10, tzinfo=UTC)
    shown = []
    for line in lines:
        tally = Tally(Grid.for_window(start, start + timedelta(hours=1)))
        tally.add(start, line)
        shown.append(tally.summary(exact=True).top_messages[0].pattern)
    return shown


async def test_stdin_one_pattern_a_line_as_the_summary_groups_them() -> None:
    code, out, _ = await _patterns(stdin="\n".join(LINES).encode() + b"\n")
    assert code == 0
    printed = out.decode().split("\n")
    assert printed[-1] == "" and len(printed) - 1 == len(LINES)
    printed = printed[:-1]
    assert (
        printed[0]
        == printed[1]
        == "db pool exhausted: timed out after <*>ms waiting for connection"
    )
    assert printed[3] == "" and printed[5] == "spaced out"
    assert "abc123secret" not in out.decode()  # redacted, like the summary
    assert printed == _summary_patterns(LINES)


async def test_a_file_with_crlf_invalid_utf8_and_no_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "messages.log"
    path.write_bytes(b"first 42\r\n\xff\xfe broken \xc3 7\r\nlast line 9")
    code, out, _ = await _patterns(str(path))
    assert code == 0
    assert out.decode("utf-8").split("\n") == [
        "first <*>", "\ufffd\ufffd broken \ufffd <*>", "last line <*>", ""
    ]  # fmt: skip


async def test_long_messages_are_printed_uncut_and_grouped_apart() -> None:
    head = "request failed while calling the downstream inventory service " * 3
    lines = [head + "because the cache was cold", head + "because the disk was full"]
    code, out, _ = await _patterns(stdin="\n".join(lines).encode())
    printed = out.decode().split("\n")[:2]
    assert code == 0 and all(len(p) > PATTERN_CHARS for p in printed)
    assert printed[0] != printed[1]


async def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    code, out, _ = await _patterns(str(tmp_path / "nope.log"))
    assert code == 2 and b"INVALID_ARGUMENTS" in out


async def test_the_input_is_one_window_as_the_summary_groups_it() -> None:
    users = ["admin", "oracle", "test", "guest", "ubuntu", "postgres", "deploy", "git", "ftp"]
    lines = [f"Failed password for invalid user {u} from 10.0.0.{n} port 22" for n, u in
             enumerate(users)]  # fmt: skip
    code, out, _ = await _patterns(stdin="\n".join(lines).encode())
    assert code == 0
    assert out.decode().split("\n")[:-1] == [
        "Failed password for invalid user <*> from <*> port <*>"
    ] * len(users)


async def test_input_of_any_length_is_read_whole_one_pattern_a_line() -> None:
    # Past what the command once refused (100,000 lines): standard input kept between passes.
    lines = [f"GET /v1/orders/{n} took {n % 977}ms" for n in range(150_001)] + ["tail no newline"]
    code, out, _ = await _patterns(stdin="\n".join(lines).encode())
    assert code == 0
    printed = out.decode().split("\n")
    assert len(printed) - 1 == len(lines)
    assert len(set(printed[:-2])) == 1 and printed[0].endswith("/orders/<*> took <*>ms")
    assert printed[-2] == "tail no newline"


async def test_a_long_line_without_newline_is_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "one.log"
    with path.open("wb") as handle:
        handle.write(b"start " + b"x" * (48 * 1024 * 1024) + b"\nnext line 7\n")
    code, out, err = await _patterns_rss(str(path))
    assert code == 0, err
    assert out.decode().split("\n")[1] == "next line <*>"
    assert _max_rss_kb(err) < 120_000  # the 48 MB line is never held


def _big_log(path: Path, lines: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for n in range(0, lines, 1000):
            handle.writelines(
                f"2026-11-28 worker-{k % 8} job {n + k} done in {k}ms status=ok\n"
                if k % 5 else f"db pool exhausted: timed out after {k}ms waiting\n"
                for k in range(1000)
            )  # fmt: skip


async def test_counts_memory_does_not_follow_the_input_size(tmp_path: Path) -> None:
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    _big_log(small, 60_000)
    _big_log(large, 600_000)  # ~36 MB
    readings = []
    for path in (small, large):
        code, out, err = await _patterns_rss(str(path), "--counts")
        assert code == 0, err
        readings.append(_max_rss_kb(err))
    counted = [line.split("\t") for line in out.decode().splitlines()]
    assert sum(int(count) for count, _, _ in counted) == 600_000
    # Ten times the input, the same memory (a whole read would add the file and its lines).
    assert readings[1] - readings[0] < 15_000, readings


async def test_counts_prints_count_pattern_example_most_frequent_first(tmp_path: Path) -> None:
    lines = (
        ["db pool exhausted: timed out after 3000ms"] * 3
        + ["login failed for bob@example.com password=Tr0ub4dor&3 \tcol"] * 5
        + ["db pool exhausted: timed out after 12ms"] * 2
        + ["single \x1b[31m red"]
    )
    code, out, _ = await _patterns("--counts", stdin="\n".join(lines).encode())
    assert code == 0
    rows = [line.split("\t") for line in out.decode().splitlines()]
    assert all(len(row) == 3 for row in rows), rows
    assert [(int(c), p) for c, p, _ in rows] == [  # ties in the order first seen
        (5, "db pool exhausted: timed out after <*>ms"),
        (5, "login failed for [REDACTED EMAIL] password=[REDACTED] col"),
        (1, "single \\x1b[<*>m red"),
    ]
    assert rows[2][2] == "single \\x1b[31m red"  # a control shown escaped, never acted on
    assert rows[1][2] == "login failed for [REDACTED EMAIL] password=[REDACTED] \\x09col"
    assert rows[0][2] == "db pool exhausted: timed out after 3000ms"  # the first seen
    assert "Tr0ub4dor" not in out.decode() and "bob@" not in out.decode()


async def _patterns_rss(*args: str) -> tuple[int, bytes, bytes]:
    """``patterns`` in a child that reports its peak resident memory on its last stderr line."""
    # VmHWM, not ru_maxrss: the latter keeps the high-water mark of the forked test process
    # across exec (Linux), which says nothing about the command.
    code = (
        "import sys\n"
        "from sre_diag.commands.cli import main\n"
        "status = main(['patterns', *sys.argv[1:]])\n"
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print('maxrss', peak, file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=240)
    assert process.returncode is not None
    return process.returncode, out, err


def _max_rss_kb(err: bytes) -> int:
    return int(err.decode().strip().splitlines()[-1].split()[-1])


@pytest.mark.parametrize("target", ["/proc/self/status", "/dev/zero", "outside.log"])
async def test_a_symlink_is_refused_not_followed(tmp_path: Path, target: str) -> None:
    (tmp_path / "outside.log").write_text("secret 1\n", encoding="utf-8")
    link = tmp_path / "messages.log"
    link.symlink_to(target if target.startswith("/") else tmp_path / target)
    code, out, _ = await _patterns(str(link))
    error = json.loads(out)["error"]
    assert code == 2 and error["code"] == "INVALID_ARGUMENTS"
    assert "symbolic link" in error["message"]


async def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    code, out, _ = await _patterns(str(fifo))  # a blocking open would hang until the timeout
    error = json.loads(out)["error"]
    assert code == 2 and error["code"] == "INVALID_ARGUMENTS" and "regular" in error["message"]


@pytest.mark.parametrize("special", ["/dev/null", "/dev/zero", "."])
async def test_a_device_or_a_directory_is_refused(tmp_path: Path, special: str) -> None:
    code, out, _ = await _patterns(str(tmp_path) if special == "." else special)
    error = json.loads(out)["error"]
    assert code == 2 and error["code"] == "INVALID_ARGUMENTS" and "regular" in error["message"]


def _run_sync(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "sre_diag", "patterns", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=False, timeout=60,
        **kwargs,
    )  # fmt: skip


def test_a_reader_that_stops_early_ends_it_quietly(tmp_path: Path) -> None:
    # `sre-diag patterns app.log | head -1`
    log = tmp_path / "app.log"
    log.write_text("".join(f"req id={n} done\n" for n in range(90_000)), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "sre_diag", "patterns", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    with process, process.stderr:
        assert process.stdout.readline() == b"req id=<*> done\n"
        process.stdout.close()
        err = process.stderr.read()
        assert process.wait(60) == 0
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_output_that_cannot_be_written_is_one_line_on_stderr(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"req id={n} done\n" for n in range(90_000)), encoding="utf-8")
    with open("/dev/full", "wb") as full:
        done = _run_sync([str(log)], stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 1
    assert done.stderr.decode().strip() == "patterns: output not written (OSError)"


def test_closed_standard_input_is_an_invalid_argument() -> None:
    done = _run_sync([], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     preexec_fn=lambda: os.close(0))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_ARGUMENTS"
