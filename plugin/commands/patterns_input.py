"""The bounded input of ``sre-diag patterns [FILE]`` (CONTRACTS §1).

The whole input is one window, read before it is grouped, so it is bounded: at most
:data:`MAX_BYTES` bytes and :data:`MAX_LINES` lines, else ``INPUT_TOO_LARGE`` (exit 2) and
nothing is printed. Everything else this module refuses is ``INVALID_ARGUMENTS`` (exit 2), one
line, before a byte is read:

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

from sre_diag.commands.errors import PatternsInputError
from sre_diag.errors import InputRejection
from sre_diag.tools.plain import visible_controls
from sre_diag.tools.pseudo_fs import pseudo_filesystem

__all__ = ["MAX_BYTES", "MAX_LINES", "PatternsInputError", "read_lines"]

MAX_BYTES = 16 * 1024 * 1024
MAX_LINES = 100_000
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
        if info.st_size > MAX_BYTES:
            raise PatternsInputError(
                InputRejection.INPUT_TOO_LARGE, f"{shown} is over {MAX_BYTES} bytes"
            )
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


def _read_bounded(fd: int, shown: str) -> bytes:
    """``fd`` to its end, but at most ``MAX_BYTES + 1`` bytes (one more tells it is over)."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_BYTES:
        try:
            chunk = os.read(fd, min(_CHUNK, MAX_BYTES + 1 - size))
        except BlockingIOError:  # a non-blocking pipe or terminal with nothing yet
            select.select([fd], [], [])
            continue
        except OSError as exc:
            raise _refused(f"cannot read {shown}: {exc.strerror}") from exc
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read(source: str | int) -> bytes:
    if isinstance(source, int):
        _check_stdin(source)
        return _read_bounded(source, _STDIN)
    fd = _open_regular(source)
    try:
        return _read_bounded(fd, visible_controls(source))
    finally:
        os.close(fd)


def read_lines(source: str | int) -> list[str]:
    """The lines of FILE (a path) or of standard input (its descriptor): ``\\n`` or ``\\r\\n``
    ended, the last may lack it, invalid UTF-8 read with replacement characters; or
    :class:`PatternsInputError` (the module docstring says which inputs are refused)."""
    data = _read(source)
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
