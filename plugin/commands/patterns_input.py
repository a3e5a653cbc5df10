"""The bounded input of ``sre-diag patterns [FILE]`` (CONTRACTS §1).

The whole input is one window, read before it is grouped, so it is bounded: at most
:data:`MAX_BYTES` bytes and :data:`MAX_LINES` lines, else ``INPUT_TOO_LARGE`` (exit 2) and
nothing is printed. FILE must be a regular file named directly: a symbolic link (to ``/proc``,
a device or anywhere), a FIFO, a device, a socket or a directory is refused with
``INVALID_ARGUMENTS`` before a byte is read — the file is opened with ``O_NOFOLLOW`` (a link is
never followed) and ``O_NONBLOCK`` (a FIFO never blocks the open), and ``fstat`` on the open
descriptor decides. Standard input is whatever the operator pipes in, read under the same
bounds.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from plugin.commands.errors import PatternsInputError
from plugin.errors import InputRejection

__all__ = ["MAX_BYTES", "MAX_LINES", "PatternsInputError", "read_lines"]

MAX_BYTES = 16 * 1024 * 1024
MAX_LINES = 100_000
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _open_regular(file: str) -> BinaryIO:
    try:
        fd = os.open(file, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PatternsInputError(
                InputRejection.INVALID_ARGUMENTS, f"{file} is a symbolic link; name the file itself"
            ) from exc
        raise PatternsInputError(
            InputRejection.INVALID_ARGUMENTS, f"cannot read {file}: {exc.strerror}"
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PatternsInputError(
                InputRejection.INVALID_ARGUMENTS,
                f"{file} is not a regular file (a FIFO, device, socket or directory)",
            )
        if info.st_size > MAX_BYTES:
            raise PatternsInputError(
                InputRejection.INPUT_TOO_LARGE, f"{file} is over {MAX_BYTES} bytes"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_lines(file: str | None, stdin: BinaryIO) -> list[str]:
    """The input's lines (``\\n`` or ``\\r\\n`` ended, the last may lack it; invalid UTF-8
    read with replacement characters), or :class:`PatternsInputError`."""
    source = _open_regular(file) if file is not None else stdin
    with source:
        data = source.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise PatternsInputError(
            InputRejection.INPUT_TOO_LARGE, f"the input is over {MAX_BYTES} bytes"
        )
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    if len(raw) > MAX_LINES:
        raise PatternsInputError(
            InputRejection.INPUT_TOO_LARGE, f"the input is over {MAX_LINES} lines"
        )
    return [line.removesuffix(b"\r").decode("utf-8", "replace") for line in raw]
