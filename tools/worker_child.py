"""The child side of :mod:`sre_diag.tools.workers`: ``python -m sre_diag.tools.worker_child PPID``.

Reads length-prefixed pickled requests on standard input, runs each in this process and writes
the reply on the descriptor that was standard output; standard output itself then points at
standard error (the parent gives it none: nothing a child prints reaches the operator's log
raw), so a stray ``print`` can never corrupt a frame. What the work logs (a skipped hard-linked
file) is sent before the reply as ``("log", logger, level, message)`` frames — at most
:data:`MAX_LOG_RECORDS` a request, each message cut to :data:`MAX_LOG_CHARS` — and the parent
logs it in its own format. Ends at the end of its input, and (Linux) is killed by the kernel
when the parent that started it exits.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import IO

from sre_diag.tools import redact as redaction
from sre_diag.tools.errors import OutOfTime, Stopped
from sre_diag.tools.threads import Stop
from sre_diag.tools.workers import KEEP_EMAILS, read_frame, write_frame

__all__ = ["MAX_LOG_CHARS", "MAX_LOG_RECORDS", "main", "resolve", "serve"]

_PR_SET_PDEATHSIG = 1
_PREFIX = "sre_diag.tools."
MAX_LOG_RECORDS = 32  # log records a request sends back, at most (the rest are counted)
MAX_LOG_CHARS = 1_000  # of one record's message


class _Records(logging.Handler):
    """The log records of the request being answered, bounded (see module docs)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.kept: list[tuple[str, int, str]] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.kept) >= MAX_LOG_RECORDS:
            self.dropped += 1
            return
        try:
            message = record.getMessage()[:MAX_LOG_CHARS]
        except Exception:  # a bad format string: the record is not worth a crash
            message = str(record.msg)[:MAX_LOG_CHARS]
        self.kept.append((record.name, record.levelno, message))

    def drain(self) -> list[tuple[str, int, str]]:
        kept, dropped = self.kept, self.dropped
        self.kept, self.dropped = [], 0
        if dropped:
            kept.append((__name__, logging.WARNING, f"{dropped} more log records not sent"))
        return kept


def resolve(target: str) -> Callable[..., object]:
    """The function named ``"module:function"``; only modules inside ``sre_diag.tools``."""
    module, _, name = target.partition(":")
    if not module.startswith(_PREFIX) or not name.isidentifier():
        raise LookupError(target)
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise LookupError(target)
    return fn  # type: ignore[no-any-return]


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent was gone before the request above
        raise SystemExit(0)


def _answer(request: object) -> object:
    try:
        match request:
            case (str(target), float() | int() | None as budget, tuple(args)):
                return ("ok", resolve(target)(Stop(budget), *args))
        raise LookupError("a request of an unknown shape")
    except (OutOfTime, Stopped):
        return ("out_of_time",)
    except Exception as exc:  # reduced to its type: the parent logs it, nothing raw is sent
        return ("failed", type(exc).__name__)


def serve(requests: IO[bytes], replies: IO[bytes], records: _Records | None = None) -> None:
    """Answer requests until the end of the input; ``records`` (the handler on the root
    logger) are sent before each reply."""
    while True:
        try:
            request = read_frame(requests)
        except EOFError:
            return
        reply = _answer(request)
        for name, level, message in records.drain() if records is not None else ():
            write_frame(replies, ("log", name, level, message))
        write_frame(replies, reply)


def main(argv: list[str] | None = None) -> None:
    """The child's entry point (see module docs)."""
    args = sys.argv[1:] if argv is None else argv
    _die_with(int(args[0]) if args else os.getppid())
    redaction.configure(emails=KEEP_EMAILS not in args[1:])
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches both
    records = _Records()
    logging.basicConfig(level=logging.WARNING, handlers=[records], force=True)
    # The usual targets, imported before "ready" (a first call must not pay for an import).
    import sre_diag.tools.logs.parts
    import sre_diag.tools.logs.window  # noqa: F401

    # What the imports built lives as long as the child: frozen, so that the collections a
    # scan's allocations trigger never walk it (they did, up to tens of ms per full one).
    gc.collect()
    gc.freeze()

    write_frame(replies, ("ready", os.getpid()))
    try:
        serve(sys.stdin.buffer, replies, records)
    except BrokenPipeError:  # the parent is gone
        pass


if __name__ == "__main__":
    main()
