"""CPU-heavy evidence work in child processes, so it never shares the event loop's interpreter.

A worker thread (:mod:`sre_diag.tools.threads`) keeps the loop free only as long as the thread
lets go of the GIL: one C call over a batch, a garbage collection of a large heap or a pause
of the thread holding it stalls every other coroutine (seen: loop lag p99 15–150 ms while the
busiest log hour is scanned in a thread). A :class:`WorkerPool` runs such work in at most
``size`` long-lived child processes (``python -m sre_diag.tools.worker_child``), one call at a
time each, so the parent's loop only waits on a pipe.

Protocol (both directions): a 4-byte big-endian length, then a pickle. The child sends
``("ready", pid)`` once it has imported what it needs; each request is ``(target, budget,
args)`` — ``target`` a ``"module:function"`` inside ``sre_diag.tools``, called as
``function(Stop(budget), *args)`` — and each reply is ``("ok", value)``, ``("out_of_time",)``
or ``("failed", type name)``, after a ``("log", logger, level, message)`` frame for each
record the work logged (logged here, in this process's format: a child's standard error goes
nowhere, so nothing it writes reaches the operator's log raw). Only the parent writes
requests; the child imports nothing outside ``sre_diag.tools``.

Bounds and faults:

* **Cancellation and deadlines** reach the child at once: the awaiting coroutine cancelled (the
  run's deadline, a Cancel) kills that child (``SIGKILL``) and the pool starts another one when
  it is next needed; a call that outlives its ``budget`` plus :data:`GRACE_SECONDS` is killed
  too and raises :class:`OutOfTime`. A killed child takes no core and holds nothing: the parent
  process can always exit.
* **A child that dies** (killed by the kernel, a crash), answers with a frame over
  :data:`MAX_REPLY_BYTES` or with one the protocol does not know raises :class:`WorkerFailed`;
  the child is discarded. So does a child that cannot be started (no descriptor, process or
  thread left).
* **Credentials** never reach a child: it inherits only the locale, paths and ``PYTHON*``
  variables of the environment (:data:`_ENV`), no token or DSN.
* **The parent dying** ends its children: each asks the kernel for ``SIGKILL`` when its parent
  exits (``PR_SET_PDEATHSIG``, which follows the forking *thread*: every child is started from
  one thread that lives as long as the process, never from an event loop's executor, whose
  threads end with their loop) and ends at the end of its input. :meth:`WorkerPool.close` (and,
  for pools never closed, interpreter exit) kills what is left.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Concatenate, ParamSpec, TypeVar

from sre_diag.tools.errors import OutOfTime, WorkerFailed
from sre_diag.tools.redact import emails_masked

__all__ = [
    "GRACE_SECONDS",
    "KEEP_EMAILS",
    "MAX_REPLY_BYTES",
    "START_SECONDS",
    "WorkerFailed",
    "WorkerPool",
    "read_frame",
    "target_name",
    "write_frame",
]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

GRACE_SECONDS = 2.0  # past its own budget, a call is killed
START_SECONDS = 60.0  # a child that is not ready by then is killed (a machine under load)
MAX_REPLY_BYTES = 256 * 1024 * 1024  # a frame longer than this is not read
_HEADER = struct.Struct(">I")
_LOG_CHARS = 1_000  # of a message a child logged (its own bound, kept here too)
_CHILD_MODULE = "sre_diag.tools.worker_child"
KEEP_EMAILS = "--keep-emails"  # the child's flag: e-mail addresses are not redacted
# What a child inherits of the environment (and PYTHON*): no credential reaches it, since it
# reads files and computes, and nothing it needs is configured through the environment.
_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "VIRTUAL_ENV"})
# Every child of every pool, for the exit hook (a pool that was never closed).
_LIVE: weakref.WeakSet[_Worker] = weakref.WeakSet()
_SPAWNER: ThreadPoolExecutor | None = None
_SPAWN_LOCK = threading.Lock()


def _spawner() -> ThreadPoolExecutor:
    """The one thread every child is started from, alive as long as this process: the kernel's
    parent-death signal follows the *thread* that forked (an event loop's executor thread ends
    with its loop, and killed every child it had started)."""
    global _SPAWNER
    with _SPAWN_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="evidence-worker-spawn")
        return _SPAWNER


def _popen(env: dict[str, str]) -> subprocess.Popen[bytes]:
    # The redaction policy travels on the command line (a child reads no settings).
    policy = [] if emails_masked() else [KEEP_EMAILS]
    return subprocess.Popen(
        [sys.executable, "-m", _CHILD_MODULE, str(os.getpid()), *policy],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # what a child logs comes back in frames (worker_child)
        env=env,
        close_fds=True,
    )


def write_frame(stream: IO[bytes], value: object) -> None:
    """One length-prefixed pickle, flushed."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes], limit: int = MAX_REPLY_BYTES) -> object:
    """One length-prefixed pickle; :class:`EOFError` at the end of the stream or on a short
    frame, :class:`WorkerFailed` for a frame longer than ``limit``."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise WorkerFailed(f"a frame of {size} bytes")
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError
    return pickle.loads(payload)


def target_name(fn: Callable[..., object]) -> str:
    """``"module:function"`` of a module-level function inside ``sre_diag.tools``."""
    module, name = fn.__module__, fn.__qualname__
    if not module.startswith("sre_diag.tools.") or "." in name or "<" in name:
        raise ValueError(f"{module}:{name} is not a module-level function of sre_diag.tools")
    return f"{module}:{name}"


class _Worker:
    """One child process and its pipes; used by one call at a time."""

    __slots__ = ("__weakref__", "dead", "pid", "proc")

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.dead = False

    @classmethod
    def start(cls, spawned: Callable[[_Worker], None] | None = None) -> _Worker:
        """Start a child and wait (blocking: call from a thread) for its ``ready`` frame;
        ``spawned`` is told of the child as soon as it exists (before it is ready)."""
        # The folder holding the ``sre_diag`` package this process imported (a checkout, a venv).
        root = str(Path(sys.modules["sre_diag"].__file__ or ".").parent.parent)
        env = {k: v for k, v in os.environ.items() if k in _ENV or k.startswith("PYTHON")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = _spawner().submit(_popen, env).result()
        except (OSError, RuntimeError) as exc:  # no descriptor, process or thread left
            raise WorkerFailed("the child could not be started") from exc
        worker = cls(proc)
        _LIVE.add(worker)
        if spawned is not None:
            spawned(worker)
        timer = threading.Timer(START_SECONDS, worker.kill)
        timer.daemon = True
        timer.start()
        try:
            ready = worker._read()
        except (EOFError, OSError, pickle.UnpicklingError, WorkerFailed) as exc:
            worker.kill()
            raise WorkerFailed("the child did not start") from exc
        finally:
            timer.cancel()
        if not (isinstance(ready, tuple) and ready[:1] == ("ready",)):
            worker.kill()
            raise WorkerFailed("the child did not start")
        return worker

    def _read(self) -> object:
        assert self.proc.stdout is not None
        return read_frame(self.proc.stdout)

    def exchange(self, request: object) -> object:
        """Send one request and wait for its reply (blocking: call from a thread)."""
        assert self.proc.stdin is not None
        try:
            write_frame(self.proc.stdin, request)
            reply = self._read()
            while _logged(reply):  # what the work logged, before its answer
                reply = self._read()
        except WorkerFailed:
            self.kill()
            raise
        except Exception as exc:  # a dead child, or bytes no pickle of ours (garbage, a forgery)
            self.kill()
            raise WorkerFailed("the child ended without an answer") from exc
        if not _known(reply):  # out of step with its pipe: its next answer would be stale
            self.kill()
            raise WorkerFailed("an answer of an unknown shape")
        return reply

    def kill(self) -> None:
        """End the child now (any thread); idempotent."""
        self.dead = True
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            logger.warning("evidence worker %d did not end after SIGKILL", self.pid)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


class _Claim:
    """A child being started for a caller that may give up waiting for it. A caller that gives
    up leaves its slot with the claim (``release``): the slot is freed when the start ends, so
    starts never outnumber the pool's slots, whatever the cancels."""

    __slots__ = ("abandoned", "closed", "done", "release", "spawned", "worker")

    def __init__(self) -> None:
        self.abandoned = False
        self.closed = False  # the pool was closed while this abandoned start ran
        self.done = False
        self.worker: _Worker | None = None
        self.spawned: _Worker | None = None  # the child, from its spawn on
        self.release: Callable[[], None] | None = None


class _Held:
    """What one call holds: a slot of the pool, then a child."""

    __slots__ = ("slot", "worker")

    def __init__(self) -> None:
        self.slot: asyncio.BoundedSemaphore | None = None
        self.worker: _Worker | None = None


class WorkerPool:
    """At most ``size`` child processes, started when first needed (see module docs)."""

    def __init__(self, size: int = 2) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one worker")
        self.size = size
        self._idle: list[_Worker] = []
        self._children: weakref.WeakSet[_Worker] = weakref.WeakSet()
        self._slots = asyncio.BoundedSemaphore(size)  # of the loop in _slots_loop (see _here)
        self._slots_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._lock = threading.Lock()
        self.started = 0  # children started over the pool's life (operators, tests)
        self._abandoned: set[_Claim] = set()  # starts whose caller gave up
        # A pool dropped without close() (a host app that never closes its source): its idle
        # children end with it (``_idle`` is only ever changed in place).
        weakref.finalize(self, _kill_each, self._idle)
        self.busy = 0  # calls a child is working on now

    async def call(
        self,
        fn: Callable[Concatenate[Any, P], T],
        budget: float | None,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(Stop(budget), *args)`` in a child; cancelling the await kills that child. The
        budget counts from this call: waiting for a free child and starting one spend it (the
        child is given what is left), and past it plus :data:`GRACE_SECONDS` the call is
        killed."""
        if kwargs:
            raise TypeError("worker calls take positional arguments only")
        target = target_name(fn)
        until = None if budget is None else time.monotonic() + budget
        held = _Held()
        limit = None if budget is None else budget + GRACE_SECONDS
        try:
            reply = await asyncio.wait_for(self._exchange(target, until, args, held), limit)
        except TimeoutError:
            await self._kill(held)
            raise OutOfTime from None
        except asyncio.CancelledError:
            await self._kill(held)
            raise
        finally:
            self._give_back(held.worker)  # before the slot: its next holder finds this child
            if held.slot is not None:
                held.slot.release()
        return self._unpack(reply)  # type: ignore[return-value]

    async def _exchange(
        self, target: str, until: float | None, args: tuple[object, ...], held: _Held
    ) -> object:
        slots = self._here()
        await slots.acquire()
        held.slot = slots
        held.worker = worker = await self._take(held)
        left = None if until is None else until - time.monotonic()
        self.busy += 1
        try:
            return await asyncio.to_thread(worker.exchange, (target, left, args))
        finally:
            self.busy -= 1

    def _here(self) -> asyncio.BoundedSemaphore:
        """The slots of the running loop: a pool used from a later loop (a second
        ``asyncio.run``) gets fresh ones, an asyncio primitive being bound to one loop."""
        loop = asyncio.get_running_loop()
        if self._slots_loop is None or self._slots_loop() is not loop:
            if self._slots_loop is not None:
                self._slots = asyncio.BoundedSemaphore(self.size)
            self._slots_loop = weakref.ref(loop)
        return self._slots

    @staticmethod
    async def _kill(held: _Held) -> None:
        worker = held.worker
        if worker is not None:
            worker.dead = True  # never given back, even if this await is cancelled again
            # Its own threads: never queued behind starts waiting in the default executor.
            loop = asyncio.get_running_loop()
            await asyncio.shield(loop.run_in_executor(_killer(), worker.kill))

    def pids(self) -> list[int]:
        """The process ids of this pool's live children, idle or busy (operators, tests)."""
        with self._lock:
            return sorted(w.pid for w in self._children if not w.dead)

    async def warm(self) -> None:
        """Start one child ahead of the first call (``serve``'s warm-up)."""
        held = _Held()
        held.slot = slots = self._here()
        await slots.acquire()
        try:
            self._give_back(await self._take(held))
        finally:
            if held.slot is not None:
                held.slot.release()

    async def _take(self, held: _Held) -> _Worker:
        while True:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                break
            ended = worker.proc.poll() is not None
            if not (worker.dead or ended):
                return worker
            if ended:  # died while idle, reaped just now: closing its pipes cannot block
                worker.kill()
        claim = _Claim()
        try:
            worker = await asyncio.to_thread(self._start, claim)
        except asyncio.CancelledError:
            self._abandon(claim, held)
            raise
        return worker

    def _abandon(self, claim: _Claim, held: _Held) -> None:
        """The caller gave up on a start: a start still running keeps the caller's slot (freed
        on this loop when it ends) and gives its child to the pool; a start already done gives
        it now."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not claim.done:
                claim.abandoned = True
                slot, held.slot = held.slot, None
                if slot is not None:
                    claim.release = functools.partial(_release_on, loop, slot)
                self._abandoned.add(claim)
                return
            started, claim.worker = claim.worker, None
        self._give_back(started)

    def _start(self, claim: _Claim) -> _Worker:
        """Start a child (in a thread); one whose caller is gone by then is kept idle (or
        killed, when the pool was closed meanwhile) and its slot freed — no event loop is
        needed for the child, so a closed loop loses none."""
        try:
            worker = _Worker.start(functools.partial(self._spawned, claim))
        except BaseException:
            with self._lock:
                claim.done = True
                abandoned = claim.abandoned
            if abandoned:
                self._end_abandoned(claim, None)
            raise
        with self._lock:
            self.started += 1
            claim.done = True
            if not claim.abandoned:
                claim.worker = worker
                return worker
        self._end_abandoned(claim, worker)
        return worker

    def _spawned(self, claim: _Claim, worker: _Worker) -> None:
        with self._lock:
            self._children.add(worker)
            claim.spawned = worker
            closed = claim.closed
        if closed:  # the pool was closed before this child existed: it never starts
            worker.kill()

    def _end_abandoned(self, claim: _Claim, worker: _Worker | None) -> None:
        with self._lock:
            self._abandoned.discard(claim)
            closed = claim.closed
        if worker is not None:
            if closed:
                worker.kill()
            else:
                self._give_back(worker)  # before the slot: its next holder finds this child
        if claim.release is not None:
            claim.release()

    def _give_back(self, worker: _Worker | None) -> None:
        """An idle child back to the pool (a dead one is dropped; one beyond the pool's size —
        started for callers that gave up while others started theirs — is killed, in a
        thread so the caller never waits for it)."""
        if worker is None or worker.dead:
            return
        with self._lock:
            live = sum(1 for w in self._children if not w.dead)
            if live <= self.size:
                self._idle.append(worker)
                return
            worker.dead = True
        threading.Thread(target=worker.kill, name="diag-worker-kill", daemon=True).start()

    @staticmethod
    def _unpack(reply: object) -> object:
        match reply:
            case ("ok", value):
                return value
            case ("out_of_time",):
                raise OutOfTime
            case ("failed", str(kind)):
                raise WorkerFailed(f"the child failed: {kind}")
        raise WorkerFailed("an answer of an unknown shape")

    async def close(self) -> None:
        """Kill the idle children and those still starting for callers that gave up (one
        spawned after this is killed at once); a busy one is kept by its call until the next
        close, the pool's end or the interpreter's exit. The pool stays usable, a later call
        starts a new child."""
        with self._lock:
            doomed = list(self._idle)
            self._idle.clear()
            for claim in self._abandoned:
                claim.closed = True
                if claim.spawned is not None:
                    doomed.append(claim.spawned)
        # Shielded: a close cut short still ends every child it took out of the pool.
        loop = asyncio.get_running_loop()
        await asyncio.shield(loop.run_in_executor(_killer(), _kill_each, doomed))


def _logged(frame: object) -> bool:
    """Log a child's ``("log", logger, level, message)`` frame here (its logger inside
    ``sre_diag.``, its level and message as sent); whether ``frame`` was one."""
    match frame:
        case ("log", str(name), int(level), str(message)):
            if not name.startswith("sre_diag."):
                name = __name__
            logging.getLogger(name).log(level, "%s", message[:_LOG_CHARS])
            return True
    return False


def _known(reply: object) -> bool:
    """Whether ``reply`` has one of the protocol's shapes (see module docs)."""
    match reply:
        case ("ok", _) | ("out_of_time",) | ("failed", str()):
            return True
    return False


def _release_on(loop: asyncio.AbstractEventLoop, slot: asyncio.BoundedSemaphore) -> None:
    """Free ``slot`` on its loop, from any thread (nothing to free once the loop is closed)."""
    try:
        loop.call_soon_threadsafe(slot.release)
    except RuntimeError:
        pass


_KILLER: ThreadPoolExecutor | None = None


def _killer() -> ThreadPoolExecutor:
    """The threads that kill children: apart from the default executor, where starts wait."""
    global _KILLER
    with _SPAWN_LOCK:
        if _KILLER is None:
            _KILLER = ThreadPoolExecutor(2, thread_name_prefix="evidence-worker-kill")
        return _KILLER


def _kill_each(workers: list[_Worker]) -> None:
    for worker in list(workers):
        if not worker.dead:
            worker.kill()


@atexit.register
def _kill_all() -> None:
    _kill_each(list(_LIVE))
