"""Issue 20: a file on a kernel pseudo file system (procfs, sysfs, cgroup, devtmpfs…) is told on
its open descriptor (``sre_diag.tools.pseudo_fs``), and the log folder and runbook readers skip it
— the folder itself may be a link into ``/proc``. Real files of this machine's ``/proc``, ``/sys``
and ``/dev``; a case is skipped where this machine has no such mount."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sre_diag.tools.logs.files import open_inside
from sre_diag.tools.pseudo_fs import PSEUDO_TYPES, _magic, _type_in_mountinfo, pseudo_filesystem
from sre_diag.tools.runbooks import _read_regular

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _mounts() -> list[tuple[str, str]]:
    """(mount point, type) of this process's mounts."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        head, _, tail = line.partition(" - ")
        found.append((head.split()[4].replace("\\040", " "), tail.split()[0]))
    return found


def _first_regular_file(top: str) -> str | None:
    for folder, _, files in os.walk(top):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path) and os.access(path, os.R_OK):
                return path
    return None


def _a_file_of(kind: str) -> str:
    point = next((p for p, t in _mounts() if t == kind), None)
    path = _first_regular_file(point) if point is not None else None
    if path is None:
        pytest.skip(f"no readable {kind} file on this machine")
    return path


@pytest.fixture
def opened() -> Iterator[list[int]]:
    descriptors: list[int] = []
    yield descriptors
    for fd in descriptors:
        os.close(fd)


def _open(path: str, descriptors: list[int]) -> int:
    fd = os.open(path, _FLAGS)
    descriptors.append(fd)
    return fd


@pytest.mark.parametrize(
    "path", ["/proc/self/status", "/proc/self/environ", "/proc/kmsg", "/proc/sys/kernel/hostname"]
)
def test_a_proc_file_is_on_proc(path: str, opened: list[int]) -> None:
    if not os.path.exists(path) or not os.access(path, os.R_OK):
        pytest.skip(f"{path} is not readable here")
    assert pseudo_filesystem(_open(path, opened)) == "proc"


@pytest.mark.parametrize("kind", ["sysfs", "cgroup", "cgroup2", "debugfs", "tracefs"])
def test_a_file_of_each_mounted_pseudo_file_system_is_named(kind: str, opened: list[int]) -> None:
    assert pseudo_filesystem(_open(_a_file_of(kind), opened)) == kind


def test_devtmpfs_shares_the_tmpfs_magic_and_the_mount_table_tells(opened: list[int]) -> None:
    if not any(point == "/dev" and kind == "devtmpfs" for point, kind in _mounts()):
        pytest.skip("/dev is not devtmpfs here")
    fd = _open("/dev/null", opened)
    assert _magic(fd) == 0x01021994  # TMPFS_MAGIC: the magic alone cannot tell
    assert pseudo_filesystem(fd) == "devtmpfs"


def test_ordinary_files_are_not_on_a_pseudo_file_system(tmp_path: Path, opened: list[int]) -> None:
    (tmp_path / "app.log").write_text("x 1\n", encoding="utf-8")
    assert pseudo_filesystem(_open(str(tmp_path / "app.log"), opened)) is None
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):  # tmpfs: a memory file system, not pseudo
        path = shm / f"pseudo-fs-test-{os.getpid()}.log"
        path.write_text("x 1\n", encoding="utf-8")
        try:
            assert pseudo_filesystem(_open(str(path), opened)) is None
        finally:
            path.unlink()


_MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime shared:7 master:2 - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334076k,mode=755
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 23 0:28 / /mnt/with\\040space\\040-\\040dash rw - tmpfs tmpfs rw,mode=755
"""


@pytest.mark.parametrize(
    ("major", "minor", "kind"),
    [(0, 21, "proc"), (0, 22, "sysfs"), (0, 6, "devtmpfs"), (254, 0, "ext4"), (0, 28, "tmpfs"),
     (0, 99, None), (21, 0, None)],
)  # fmt: skip
def test_the_mount_table_is_read_by_device_number(major: int, minor: int, kind: str | None) -> None:
    assert _type_in_mountinfo(_MOUNTINFO, os.makedev(major, minor)) == kind


def test_a_malformed_mount_table_line_is_no_answer() -> None:
    table = "garbage\n1 2\n3 4 0:21 / /x rw\n5 6 0:21 / /y rw - \n"
    assert _type_in_mountinfo(table, os.makedev(0, 21)) is None


def test_the_names_cover_the_issue_list() -> None:
    wanted = {"proc", "sysfs", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2", "devtmpfs"}
    assert wanted <= PSEUDO_TYPES
    assert not {"tmpfs", "ext4", "xfs", "btrfs", "overlay", "nfs", "ramfs"} & PSEUDO_TYPES


def test_the_log_folder_reader_skips_a_proc_file_behind_a_linked_folder(tmp_path: Path) -> None:
    (tmp_path / "self").symlink_to("/proc/self")  # the folder itself may be a link
    assert open_inside(tmp_path / "self", Path("status")) is None
    assert open_inside(Path("/proc/self"), Path("status")) is None
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "10.jsonl").write_text("{}\n", encoding="utf-8")
    opened = open_inside(tmp_path / "real", Path("10.jsonl"))
    assert opened is not None
    opened[0].close()


def test_the_runbook_reader_skips_a_proc_file() -> None:
    fd = os.open("/proc/self/status", _FLAGS)
    assert _read_regular(fd) is None  # closes fd
