"""``sre-diag patterns [FILE]`` refuses what is not a log before a byte is read (issue 20, found by
an attacking review; FAULTS.md "Files"): a FILE or a standard input on a kernel pseudo file system
(``/proc``, ``/sys``, cgroup…: ``/proc/kmsg`` blocks its reader forever), however the path reaches
it — a link in a directory component, a bind mount; a standard input that is a device other than
a terminal or ``/dev/null``; a socket file; a file it may not read. Links in a directory component
that lead to an ordinary disk stay usable. Every refusal is exit 2 and ONE JSON line
``INVALID_ARGUMENTS`` on stdout, nothing on stderr but logs, never a traceback; every run has a
time bound, so a read that blocks fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import REPO

TIMEOUT = 60


def _run(
    args: list[str], prefix: tuple[str, ...] = (), **kwargs: Any
) -> subprocess.CompletedProcess[bytes]:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [*prefix, sys.executable, "-m", "sre_diag", "patterns", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=TIMEOUT,
        **kwargs,
    )  # fmt: skip


def _assert_clean(done: subprocess.CompletedProcess[bytes]) -> None:
    for stream in (done.stdout, done.stderr):
        assert b"Traceback" not in stream and b"Fatal Python error" not in stream, stream


def _assert_refused(done: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """Exit 2, one JSON line INVALID_ARGUMENTS whose message holds one of ``needles``."""
    _assert_clean(done)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout.count(b"\n") == 1 and done.stdout.endswith(b"\n")
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "INVALID_ARGUMENTS"
    assert any(needle in error["message"] for needle in needles), error
    return str(error["message"])


def _readable(path: str) -> str:
    if not os.path.exists(path) or not os.access(path, os.R_OK):
        pytest.skip(f"{path} is not readable here")
    return path


def _a_sys_file() -> str:
    for candidate in ("/sys/kernel/address_bits", "/sys/kernel/mm/transparent_hugepage/enabled",
                      "/sys/power/state", "/sys/devices/system/cpu/online"):  # fmt: skip
        if os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            return candidate
    pytest.skip("no readable /sys file here")


def _a_cgroup_file() -> str:
    for folder, _, files in os.walk("/sys/fs/cgroup"):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and os.access(path, os.R_OK):
                return path
    pytest.skip("no readable cgroup file here")


PROC_FILES = ["/proc/kmsg", "/proc/self/status", "/proc/self/environ", "/proc/self/mountinfo",
              "/proc/sys/kernel/hostname", "/proc/1/cmdline"]  # fmt: skip
PSEUDO_NEEDLE = "pseudo file system"


@pytest.mark.parametrize("path", PROC_FILES)
def test_a_proc_file_is_refused_before_it_is_read(path: str) -> None:
    _assert_refused(_run([_readable(path)]), PSEUDO_NEEDLE)  # /proc/kmsg read: blocks forever


@pytest.mark.parametrize("pick", [_a_sys_file, _a_cgroup_file], ids=["sysfs", "cgroup"])
def test_a_sys_or_cgroup_file_is_refused(pick: Any) -> None:
    _assert_refused(_run([pick()]), PSEUDO_NEEDLE)


@pytest.mark.parametrize("path", ["/proc/kmsg", "/proc/self/status", "/proc/self/environ"])
def test_standard_input_on_proc_is_refused(path: str) -> None:
    with open(_readable(path), "rb") as handle:
        message = _assert_refused(_run([], stdin=handle), PSEUDO_NEEDLE)
    assert message.startswith("standard input ")


def test_standard_input_on_sys_is_refused() -> None:
    with open(_a_sys_file(), "rb") as handle:
        _assert_refused(_run([], stdin=handle), PSEUDO_NEEDLE)


def _link_chain(tmp_path: Path, target: str, hops: int) -> Path:
    """``tmp_path/x/hop0 -> …hopN -> target``: a chain of directory links."""
    folder = tmp_path / "x"
    folder.mkdir(exist_ok=True)
    previous = target
    for hop in range(hops, 0, -1):
        (folder / f"hop{hop}").symlink_to(previous)
        previous = str(folder / f"hop{hop}")
    return folder / "hop1"


@pytest.mark.parametrize(
    ("target", "rest"),
    [("/proc", "self/status"), ("/proc/self", "environ"), ("/proc/sys/kernel", "hostname"),
     ("/sys/kernel", "address_bits"), ("RELATIVE:/proc", "self/status")],
)  # fmt: skip
@pytest.mark.parametrize("hops", [1, 2])
def test_a_directory_link_onto_a_pseudo_file_system_is_refused(
    tmp_path: Path, target: str, rest: str, hops: int
) -> None:
    if target.startswith("RELATIVE:"):  # a relative link: ../../../proc
        target = os.path.relpath(target.removeprefix("RELATIVE:"), tmp_path / "x")
    link = _link_chain(tmp_path, target, hops)
    _readable(str(link / rest))
    _assert_refused(_run([str(link / rest)]), PSEUDO_NEEDLE)


def test_a_link_behind_a_directory_link_is_refused_as_a_link(tmp_path: Path) -> None:
    (tmp_path / "fds").symlink_to("/proc/self/fd")  # fd/0 is itself a link
    _assert_refused(_run([str(tmp_path / "fds" / "0")]), "symbolic link")


def _log(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "app.log"
    path.write_text("req id=7 done\nreq id=8 done\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("shape", ["absolute", "relative", "chain", "memory"])
def test_a_directory_link_onto_an_ordinary_disk_is_read(tmp_path: Path, shape: str) -> None:
    # `/var/log/app.log` where /var/log is a link to another disk: the operator means that file.
    real = tmp_path / "data" / "log"
    if shape == "memory":  # a tmpfs folder is memory, not a pseudo file system
        if not os.access("/dev/shm", os.W_OK):
            pytest.skip("no writable /dev/shm")
        real = Path(f"/dev/shm/patterns-test-{os.getpid()}")
    try:
        _log(real)
        if shape == "chain":
            link = _link_chain(tmp_path, str(real), 3)
        else:
            link = tmp_path / "var-log"
            link.symlink_to(os.path.relpath(real, tmp_path) if shape == "relative" else real)
        done = _run([str(link / "app.log")])
    finally:
        if shape == "memory":
            shutil.rmtree(real, ignore_errors=True)
    _assert_clean(done)
    assert done.returncode == 0 and done.stdout == b"req id=<*> done\n" * 2


def _unshare_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=TIMEOUT)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_available(), reason="needs root and unshare -m")
@pytest.mark.parametrize("source", ["/proc/self/status", "/proc/kmsg", "/proc"])
def test_a_bind_mount_of_proc_is_refused(tmp_path: Path, source: str) -> None:
    # A path with no link at all: only the descriptor tells it is procfs.
    target = tmp_path / ("mounted" if source == "/proc" else "app.log")
    if source == "/proc":
        target.mkdir()
    else:
        target.write_text("x 1\n", encoding="utf-8")
    named = target / "self" / "status" if source == "/proc" else target
    script = f'mount --bind "$1" "$2" && exec "$3" -m sre_diag patterns "{named}"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", source, str(target), sys.executable],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _assert_refused(done, PSEUDO_NEEDLE)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/kmsg", "/dev/full"])
def test_standard_input_that_is_a_device_is_refused(device: str) -> None:
    with open(_readable(device), "rb") as handle:
        _assert_refused(_run([], stdin=handle), "device")


def test_standard_input_from_dev_null_is_empty_input() -> None:
    done = _run([], stdin=subprocess.DEVNULL)
    _assert_clean(done)
    assert done.returncode == 0 and done.stdout == b""


def test_standard_input_from_an_ordinary_file_is_read(tmp_path: Path) -> None:
    with _log(tmp_path).open("rb") as handle:
        done = _run([], stdin=handle)
    assert done.returncode == 0 and done.stdout == b"req id=<*> done\n" * 2


def test_standard_input_from_a_terminal_is_read() -> None:
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "sre_diag", "patterns"], stdin=follower,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        os.close(follower)
        os.write(leader, b"req id=7 done\nreq id=8 done\n\x04")  # ^D at a line's start: EOF
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        os.close(leader)
    assert b"Traceback" not in err
    assert process.returncode == 0 and out == b"req id=<*> done\n" * 2


@pytest.mark.parametrize("first_write_after", [0.0, 3.0])
def test_a_non_blocking_standard_input_is_waited_on(first_write_after: float) -> None:
    # A parent (node, an event loop) may leave the pipe O_NONBLOCK: an empty read is EAGAIN.
    # 3 s: the command has started and found the pipe empty before the first line comes.
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    process = subprocess.Popen(
        [sys.executable, "-m", "sre_diag", "patterns"], stdin=read_end,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    os.close(read_end)
    deadline = time.monotonic() + first_write_after
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    with contextlib.suppress(BrokenPipeError), os.fdopen(write_end, "wb", buffering=0) as pipe:
        pipe.write(b"req id=7 done\n")
        time.sleep(0.2)
        pipe.write(b"req id=8 done\n")
    out, err = process.communicate(timeout=TIMEOUT)
    assert b"Traceback" not in err and b"TypeError" not in err, err
    assert process.returncode == 0 and out == b"req id=<*> done\n" * 2


def test_a_socket_on_standard_input_is_read() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(b"req id=7 done\n")
        ours.shutdown(socket.SHUT_WR)
        done = _run([], stdin=theirs.fileno())
    assert done.returncode == 0 and done.stdout == b"req id=<*> done\n"


def test_standard_input_open_for_writing_only_is_refused(tmp_path: Path) -> None:
    with (tmp_path / "out.txt").open("wb") as handle:
        _assert_refused(_run([], stdin=handle), "cannot read standard input")


def test_a_socket_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()
        _assert_refused(_run([str(path)]), "cannot read", "not a regular file")


def test_a_file_it_may_not_read_is_refused(tmp_path: Path) -> None:
    path = _log(tmp_path)
    path.chmod(0)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    _assert_refused(_run([str(path)], prefix=prefix), "Permission denied")
