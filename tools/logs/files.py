"""Opening a log file only when it is a regular file reached from the folder without a link.

:func:`open_inside` walks the relative path one directory at a time with ``O_NOFOLLOW`` and
decides on the open descriptor (``fstat``): a link (to ``/proc`` or anywhere), a hard-linked file
(``st_nlink > 1``: a second name of a file kept elsewhere), a FIFO, a device, a socket, a
directory or a file on a kernel pseudo file system (``/proc``, ``/sys``…: the folder itself may
be a link, :mod:`sre_diag.tools.pseudo_fs`) is skipped, never read.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from typing import IO

from sre_diag.tools.pseudo_fs import pseudo_filesystem

__all__ = [
    "open_inside",
]

# The package's logger: lines keep the name they had before the package was split.
logger = logging.getLogger(__package__)

# Open flags: never follow a link, never wait for a FIFO's writer, never take a terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
# What opening says about an entry that is not a regular file inside the folder: skipped.
_NOT_A_FILE = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.EISDIR}
)


def open_inside(folder: Path, rel: Path) -> tuple[IO[bytes], int] | None:
    """``folder/rel`` opened for reading with its size, only if it is a regular file reached
    from ``folder`` without following any link; ``None`` for anything else (missing, a link —
    to ``/proc`` or anywhere —, a hard-linked file, a FIFO, a device, a socket, a directory).
    The folder itself may be a link. Each directory is opened with ``O_NOFOLLOW`` relative to
    the one before, the file with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks the open),
    and ``fstat`` on the open descriptor decides. Other errors (permission, I/O) propagate as
    ``OSError``."""
    parts = rel.parts
    if not parts or any(part in {"", ".", ".."} for part in parts):
        return None
    dirs: list[int] = []
    try:
        dirs.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in parts[:-1]:
            dirs.append(os.open(part, _DIR_FLAGS, dir_fd=dirs[-1]))
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dirs[-1])
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return None
        raise
    finally:
        for opened in dirs:
            os.close(opened)
    return _regular(fd, rel)


def _regular(fd: int, rel: Path) -> tuple[IO[bytes], int] | None:
    try:
        info = os.fstat(fd)
        refusal = _refusal(fd, info)
        if refusal is None:
            os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    if refusal is not None:
        logger.warning("skipped %s: %s", rel.as_posix(), refusal)
        os.close(fd)
        return None
    return os.fdopen(fd, "rb"), info.st_size


def _refusal(fd: int, info: os.stat_result) -> str | None:
    """Why the open file ``fd`` (``info`` its ``fstat``) is not read, or ``None``."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_nlink > 1:
        # A hard link is a second name of a file that may live anywhere on the same file
        # system (a copy of a secret planted under an hour's name): refused like a symlink.
        return f"hard-linked ({info.st_nlink} names)"
    kind = pseudo_filesystem(fd)  # a folder that is itself a link into /proc or /sys
    return None if kind is None else f"on the {kind} pseudo file system"
