"""Issue 20: a runbook is judged on its open descriptor, not on a check made before the open.

The folder is listed (``scan``), then read (``read_sections``); between the two — or between
any check and the open — a listed file may be swapped for a FIFO, a symlink out of the folder, a
link to a ``/dev`` path, a device node, or one of its directories for a symlink. Real FIFOs,
symlinks and (when permitted) device nodes in ``tmp_path``; every read runs in a daemon thread
with a liveness bound, so a read that blocks fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from sre_diag.tools.runbooks import (
    MAX_RUNBOOK_BYTES,
    _open_inside,
    _read_regular,
    read_sections,
    scan,
)

T = TypeVar("T")
OUTSIDE = "outside-canary-20h"
LIVENESS_SECONDS = 10.0


def bounded(work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread; fails if it has not returned within the bound."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(work()), daemon=True)
    thread.start()
    thread.join(LIVENESS_SECONDS)
    assert box, "the read blocked"
    return box[0]


def runbook(topic: str) -> str:
    return f"# {topic} runbook\n\n## {topic} steps\n\nrestart the {topic} workers\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "runbooks"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text(runbook("alpha"))
    (root / "b.md").write_text(runbook("beta"))
    (root / "sub" / "c.md").write_text(runbook("gamma"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text(runbook(OUTSIDE))
    (outside / "c.md").write_text(runbook(OUTSIDE))
    return root


def titles_read(root: Path, swap: Callable[[], None]) -> set[str]:
    """List, swap, then read: the titles of the sections read."""
    sources = scan(root)
    assert [s.rel for s in sources] == ["a.md", "b.md", "sub/c.md"]
    swap()
    sections, _ = bounded(lambda: read_sections(root, sources))
    return {section.title for section in sections}


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def _device(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("device nodes cannot be made here")


SWAPS: dict[str, Callable[[Path], None]] = {
    "fifo": lambda p: os.mkfifo(p),
    "symlink-out": lambda p: p.symlink_to(p.parent.parent / "outside" / "a.md"),
    "symlink-dev-zero": lambda p: p.symlink_to("/dev/zero"),
    "symlink-dev-stdin": lambda p: p.symlink_to("/dev/stdin"),
    "symlink-proc": lambda p: p.symlink_to("/proc/self/environ"),
    "device-node": _device,
}


@pytest.mark.parametrize("make", SWAPS.values(), ids=SWAPS.keys())
def test_a_listed_file_swapped_before_reading_is_skipped(
    folder: Path, make: Callable[[Path], None]
) -> None:
    titles = titles_read(folder, lambda: _replace(folder / "a.md", make))
    assert titles == {"beta runbook", "gamma runbook"}


def test_a_listed_files_directory_swapped_for_a_symlink_out_is_skipped(folder: Path) -> None:
    def swap() -> None:
        (folder / "sub").rename(folder.parent / "moved")
        (folder / "sub").symlink_to(folder.parent / "outside", target_is_directory=True)

    assert titles_read(folder, swap) == {"alpha runbook", "beta runbook"}


def test_a_fifo_with_a_live_writer_is_never_read(folder: Path) -> None:
    fifo = folder / "a.md"
    _replace(fifo, lambda p: os.mkfifo(p))
    stop = threading.Event()

    def write_forever() -> None:
        with open(fifo, "wb", buffering=0) as out:
            while not stop.is_set():
                try:
                    out.write(runbook(OUTSIDE).encode())
                except BrokenPipeError:
                    return

    threading.Thread(target=write_forever, daemon=True).start()
    try:
        fd = bounded(lambda: _open_inside(folder, ("a.md",)))
        assert fd is not None  # O_NONBLOCK: opening a FIFO does not wait
        assert bounded(lambda: _read_regular(fd)) is None  # fstat: not a regular file
    finally:
        stop.set()


# --- the open itself: what a check made just before it could not see -------------------------


def test_the_open_follows_no_link_even_one_leading_inside(folder: Path) -> None:
    """A link swapped in after the path was resolved is refused at the open (``O_NOFOLLOW``),
    on the file and on every directory of its path."""
    (folder / "link.md").symlink_to(folder / "b.md")
    (folder / "dirlink").symlink_to(folder / "sub", target_is_directory=True)
    assert _open_inside(folder, ("link.md",)) is None
    assert _open_inside(folder, ("dirlink", "c.md")) is None
    assert _open_inside(folder, ("sub", "missing.md")) is None
    fd = _open_inside(folder, ("sub", "c.md"))
    assert fd is not None and _read_regular(fd) == runbook("gamma").encode()


def test_a_file_grown_past_the_cap_is_skipped(folder: Path) -> None:
    (folder / "big.md").write_bytes(b"# big\n" + b"x" * MAX_RUNBOOK_BYTES)
    fd = _open_inside(folder, ("big.md",))
    assert fd is not None and _read_regular(fd) is None


def test_a_symlink_inside_the_folder_is_still_served(folder: Path) -> None:
    """What the listing accepts (a link to a runbook inside the folder) is read through its
    resolved path, each part of which is opened without following a link."""
    (folder / "sub" / "c.md").unlink()
    (folder / "sub" / "c.md").symlink_to(folder / "b.md")
    sources = scan(folder)
    sections, _ = bounded(lambda: read_sections(folder, sources))
    assert sorted(s.path for s in sections if s.title == "beta runbook") == ["b.md", "sub/c.md"]
