"""The audit writer: records are written after the answer, on the writer's own thread and loop.

``Harness.diagnose`` hands the finished run's record to ``submit`` and returns; it never awaits
the sink. The writer runs the sink on a private event loop in a daemon thread, so a slow or
broken sink can delay neither an answer, nor the caller's event loop, nor the evidence tools'
threads (the shared default executor is never used), nor the process exit. Each write is
bounded end to end by ``DIAG_AUDIT_TIMEOUT_SECONDS``; records are written one at a time, in the
order they were handed over; at most ``capacity`` wait.

A record that is not written — the sink failed or timed out, the queue was full, the writer
was closed or its drain bound passed — is counted in ``records_lost`` and logged with the run
id and the reason. ``drain`` and ``aclose`` wait for the records handed over, each within the
bound its caller gives.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from typing import Any

from sre_diag.audit.base import AuditSink, AuditWriteError
from sre_diag.log import failure_reason

__all__ = ["AuditWriter"]

_log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1000
_CLOSE_STEP_SECONDS = 0.5  # closing the sink and stopping the loop, each, after the drain


class AuditWriter:
    """Writes handed-over audit records in the background; see the module docstring."""

    def __init__(
        self, sink: AuditSink, *, timeout_seconds: float, capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self.sink = sink
        self._timeout = timeout_seconds
        self._capacity = capacity
        self._state = threading.Condition()
        self._pending: dict[Future[None], str] = {}
        self._lost = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: Future[None] = Future()
        self._one_at_a_time = asyncio.Lock()

    @property
    def records_lost(self) -> int:
        """Records handed over (or meant to be) that did not reach the sink."""
        with self._state:
            return self._lost

    @property
    def pending(self) -> int:
        with self._state:
            return len(self._pending)

    def submit(self, record: dict[str, Any]) -> None:
        """Hand one record over; returns at once and never raises."""
        run_id = str(record.get("run_id"))
        future: Future[None] | None = None
        with self._state:
            if self._closed:
                refused = "the audit writer is closed"
            elif len(self._pending) >= self._capacity:
                refused = f"{self._capacity} records are already waiting for the sink"
            else:
                refused = None
                future = asyncio.run_coroutine_threadsafe(self._write(record), self._started())
                self._pending[future] = run_id
        if future is None:
            self.lose(run_id, refused or "refused")
            return
        future.add_done_callback(self._finished)

    def lose(self, run_id: str, reason: str) -> None:
        """Count and log one record that will not be written."""
        with self._state:
            self._lost += 1
        _log.error("audit record of %s lost: %s", run_id, reason)

    async def drain(self, timeout_seconds: float) -> bool:
        """Wait until the records handed over so far are written or lost; False past the bound."""
        with self._state:
            futures = list(self._pending)
        if not futures:
            return True
        _, waiting = await asyncio.wait(
            [asyncio.wrap_future(f) for f in futures], timeout=max(timeout_seconds, 0.0)
        )
        return not waiting

    def wait_idle(self, timeout_seconds: float) -> bool:
        """The blocking form of ``drain`` for synchronous callers on another thread than the
        writer's (a one-shot script, a test reading the sink)."""
        with self._state:
            return self._state.wait_for(lambda: not self._pending, timeout_seconds)

    async def aclose(self, timeout_seconds: float) -> None:
        """Refuse new records, drain within ``timeout_seconds``, give up on the rest (counted as
        lost), close the sink and stop the writer's loop (each within a short step)."""
        with self._state:
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is None:
            await self.sink.aclose()
            return
        if not await self.drain(timeout_seconds):
            with self._state:
                leftovers = list(self._pending)
            for future in leftovers:
                future.cancel()
        closing = asyncio.run_coroutine_threadsafe(self.sink.aclose(), loop)
        await asyncio.wait([asyncio.wrap_future(closing)], timeout=_CLOSE_STEP_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.wait([asyncio.wrap_future(self._stopped)], timeout=_CLOSE_STEP_SECONDS)

    # -- the writer's thread -----------------------------------------------------------------

    def _started(self) -> asyncio.AbstractEventLoop:
        """The writer's loop, started on first use (called with ``_state`` held)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(
                target=self._run_loop, args=(self._loop,), name="diag-audit-writer", daemon=True
            ).start()
        return self._loop

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            self._stopped.set_result(None)

    async def _write(self, record: dict[str, Any]) -> None:
        run_id = str(record.get("run_id"))
        async with self._one_at_a_time:
            try:
                async with asyncio.timeout(self._timeout):
                    await self.sink.write(record)
            except TimeoutError:
                phase = getattr(self.sink, "phase", "writing")
                self.lose(run_id, f"no answer within {self._timeout:g} s while {phase}")
            except AuditWriteError as exc:
                self.lose(run_id, exc.reason)
            except Exception as exc:
                self.lose(run_id, f"the sink failed unexpectedly ({failure_reason(exc)})")

    def _finished(self, future: Future[None]) -> None:
        with self._state:
            run_id = self._pending.pop(future, "?")
            self._state.notify_all()
        if future.cancelled():
            self.lose(run_id, "not written before the audit writer closed (drain bound reached)")


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
