"""The bounded input of ``sre-diag patterns [FILE]`` (CONTRACTS §1).

The input is one window of any size, read as a stream (:func:`read_chunks`,
:func:`line_batches`): memory does not follow its size, and a line longer than
:data:`MAX_LINE_BYTES` is read to its end but only its head is kept (a pattern never looks
further). What this module refuses is ``INVALID_ARGUMENTS`` (exit 2), one line, before a byte
is read:

- FILE must be a regular file whose last component is not a link: a symbolic link (to ``/proc``,
  a device or anywhere), a FIFO, a device, a socket or a directory is refused — the file is
  opened with ``O_NOFOLLOW`` (a link is never followed) and ``O_NONBLOCK`` (a FIFO never blocks
  the open), and ``fstat`` on the open descriptor decides.
- FILE must not live on a kernel pseudo file system (procfs, sysfs, debugfs, tracefs,
  securityfs, cgroup, devtmpfs…: :func:`sre_diag.tools.pseudo_fs.pseudo_filesystem`, asked on the
  open descriptor): ``/proc/kmsg`` would block the reader forever, ``/proc/self/environ`` or a
  ``/sys`` attribute is not a log.
- Links in the DIRECTORY components of FILE are followed, by decision: an operator naming
  ``/var/log/app.log`` where ``/var/log`` is a link to another disk means that file. What a link
  could lead to that must not be read — a ``/proc`` or ``/sys`` file
  (``dir-link/self/status``) — is refused by the pseudo file system check, which judges the
  descriptor finally opened, however the path reached it (a bind mount included).
- Standard input may be a pipe, a socket, a terminal, ``/dev/null`` or a regular file that is not
  on a pseudo file system (``sre-diag patterns < /proc/kmsg`` is refused); any other device
  (``/dev/kmsg``, ``/dev/zero``) or a directory is refused. A standard input left non-blocking by
  its parent is waited on (``select``), not switched to blocking: its flags are shared.

A read that fails after the open (an I/O error, standard input opened for writing only) is
``INVALID_ARGUMENTS`` with the system's reason. File names in messages are shown with
:func:`sre_diag.tools.plain.visible_controls`, so a name cannot steer the terminal either.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from sre_diag.commands.errors import PatternsInputError
from sre_diag.errors import InputRejection
from sre_diag.tools.logs.summary import WindowPatterns
from sre_diag.tools.plain import visible_controls
from sre_diag.tools.pseudo_fs import pseudo_filesystem

__all__ = [
    "BATCH_LINES",
    "MAX_LINE_BYTES",
    "PatternsInputError",
    "line_batches",
    "open_source",
    "pattern_counts",
    "pattern_lines",
    "read_chunks",
    "read_lines",
]

MAX_LINE_BYTES = 64 * 1024  # of one line, kept (its pattern key is far shorter)
BATCH_LINES = 4096
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1024 * 1024
_DEV_NULL = os.makedev(1, 3)  # Linux's /dev/null (mem major 1, minor 3)
_STDIN = "standard input"


def _refused(message: str) -> PatternsInputError:
    return PatternsInputError(InputRejection.INVALID_ARGUMENTS, message)


def _refuse_pseudo(fd: int, shown: str) -> None:
    kind = pseudo_filesystem(fd)
    if kind is not None:
        raise _refused(f"{shown} is on the {kind} pseudo file system, not a log file")


def _open_regular(file: str) -> int:
    shown = visible_controls(file)
    try:
        fd = os.open(file, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(f"{shown} is a symbolic link; name the file itself") from exc
        raise _refused(f"cannot read {shown}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(f"{shown} is not a regular file (a FIFO, device, socket or directory)")
        _refuse_pseudo(fd, shown)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_stdin(fd: int) -> None:
    try:
        info = os.fstat(fd)
    except OSError as exc:
        raise _refused(f"cannot read {_STDIN}: {exc.strerror}") from exc
    mode = info.st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return
    if stat.S_ISCHR(mode) and info.st_rdev == _DEV_NULL:
        return
    if not stat.S_ISREG(mode):
        raise _refused(
            f"{_STDIN} is a device or a directory; pipe the log in or name a regular FILE"
        )
    _refuse_pseudo(fd, _STDIN)


def open_source(source: str | int) -> int:
    """FILE (a path) opened for reading, or standard input (its descriptor) checked; or
    :class:`PatternsInputError` (the module docstring says which inputs are refused)."""
    if isinstance(source, int):
        _check_stdin(source)
        return source
    return _open_regular(source)


def read_chunks(fd: int, shown: str, limit: int | None = None) -> Iterator[bytes]:
    """``fd`` to its end (or its first ``limit`` bytes), a chunk at a time."""
    left = limit
    while left is None or left > 0:
        size = _CHUNK if left is None else min(_CHUNK, left)
        try:
            chunk = os.read(fd, size)
        except BlockingIOError:  # a non-blocking pipe or terminal with nothing yet
            select.select([fd], [], [])
            continue
        except OSError as exc:
            raise _refused(f"cannot read {shown}: {exc.strerror}") from exc
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


def line_batches(chunks: Iterable[bytes]) -> Iterator[list[str]]:
    """The lines of a byte stream in batches: ``\n`` or ``\r\n`` ended, the last may lack
    it, invalid UTF-8 read with replacement characters, each line's first
    :data:`MAX_LINE_BYTES` bytes only (a pattern never looks further), in bounded memory
    whatever a line's length."""
    head = bytearray()  # the start of the line not ended yet (at most MAX_LINE_BYTES)
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        if len(pieces) == 1:
            _extend_bounded(head, pieces[0])
            continue
        _extend_bounded(head, pieces[0])
        lines = [bytes(head), *(piece[:MAX_LINE_BYTES] for piece in pieces[1:-1])]
        head = bytearray(pieces[-1][:MAX_LINE_BYTES])
        for at in range(0, len(lines), BATCH_LINES):
            yield [_decoded(line) for line in lines[at : at + BATCH_LINES]]
    if head:
        yield [_decoded(bytes(head))]


def _extend_bounded(head: bytearray, piece: bytes) -> None:
    room = MAX_LINE_BYTES - len(head)
    if room > 0:
        head += piece[:room]


def _decoded(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", "replace")


def read_lines(source: str | int) -> list[str]:
    """Every line of FILE or standard input (see :func:`line_batches`), in one list: for
    callers whose input is small; ``patterns`` itself streams."""
    fd = open_source(source)
    shown = _STDIN if isinstance(source, int) else visible_controls(source)
    try:
        return [line for batch in line_batches(read_chunks(fd, shown)) for line in batch]
    finally:
        if not isinstance(source, int):
            os.close(fd)


# --- the two passes of ``patterns`` ------------------------------------------------------------


def _shown_source(source: str | int) -> str:
    return _STDIN if isinstance(source, int) else visible_controls(source)


def _first_pass(window: WindowPatterns, fd: int, shown: str, spool: IO[bytes] | None) -> int:
    """Every line into ``window`` (and each chunk into ``spool``); the bytes read."""
    read = 0

    def chunks() -> Iterator[bytes]:
        nonlocal read
        for chunk in read_chunks(fd, shown):
            read += len(chunk)
            if spool is not None:
                spool.write(chunk)
            yield chunk

    for batch in line_batches(chunks()):
        window.add(batch)
    window.finish()
    return read


def pattern_lines(source: str | int) -> Iterator[str]:
    """The pattern of each line of FILE or standard input, in order (two passes: the window's
    grouping needs every line first; standard input is kept in an unnamed temporary file
    between them, FILE is read again up to the size the first pass read)."""
    fd = open_source(source)
    shown = _shown_source(source)
    window = WindowPatterns()
    try:
        if isinstance(source, int):
            with tempfile.TemporaryFile() as spool:
                size = _first_pass(window, fd, shown, spool)
                spool.seek(0)
                yield from _second_pass(window, spool.fileno(), shown, size)
            return
        size = _first_pass(window, fd, shown, None)
        os.lseek(fd, 0, os.SEEK_SET)
        yield from _second_pass(window, fd, shown, size)
    finally:
        if not isinstance(source, int):
            os.close(fd)


def _second_pass(window: WindowPatterns, fd: int, shown: str, size: int) -> Iterator[str]:
    for batch in line_batches(read_chunks(fd, shown, size)):
        yield from window.patterns(batch)


def pattern_counts(source: str | int) -> WindowPatterns:
    """FILE or standard input grouped in one pass (``patterns --counts``)."""
    fd = open_source(source)
    window = WindowPatterns()
    try:
        _first_pass(window, fd, _shown_source(source), None)
    finally:
        if not isinstance(source, int):
            os.close(fd)
    return window
