"""The operations endpoints of ``serve`` (CONTRACTS §8): ``/healthz``, ``/readyz``, ``/metrics``.

In HTTP mode they are added to the Slack app's own aiohttp application (the main port); in
Socket Mode ``OpsServer`` serves them on ``DIAG_OPS_PORT``. ``/healthz`` is answered by the
event loop itself, so a 200 means the loop is not blocked; ``/readyz`` follows the process's
``Readiness`` (STARTING until Slack's ``auth.test`` succeeded and the connection is up, READY
while runs are accepted, DRAINING from the first SIGTERM/SIGINT on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from enum import StrEnum

from aiohttp import web

from sre_diag.slack.metrics import CONTENT_TYPE, Metrics

__all__ = [
    "OpsServer",
    "OpsState",
    "Readiness",
    "add_ops_routes",
    "restore_signals",
    "stop_on_signals",
]

_log = logging.getLogger(__name__)


class Readiness(StrEnum):
    STARTING = "STARTING"
    READY = "READY"
    DRAINING = "DRAINING"


@dataclass(slots=True)
class OpsState:
    """What the endpoints report: the readiness and the app's metrics."""

    metrics: Metrics
    readiness: Readiness = Readiness.STARTING


def add_ops_routes(app: web.Application, ops: OpsState) -> None:
    """Add ``GET /healthz``, ``/readyz`` and ``/metrics`` to ``app`` (before it is started)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        state = ops.readiness
        status = 200 if state is Readiness.READY else 503
        return web.Response(status=status, text=f"{state.value.lower()}\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=ops.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


class OpsServer:
    """The endpoints on a port of their own (Socket Mode with ``DIAG_OPS_PORT``)."""

    def __init__(self, ops: OpsState, port: int, host: str = "0.0.0.0") -> None:
        app = web.Application()
        add_ops_routes(app, ops)
        self._runner = web.AppRunner(app, access_log=None)
        self.port = port
        self._host = host

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self.port).start()
        _log.info("operations endpoints on port %d (/healthz /readyz /metrics)", self.port)

    async def stop(self) -> None:
        await self._runner.cleanup()


def stop_on_signals() -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT from now on (``serve`` installs it before it
    imports the Slack app, so a signal during start-up also ends the process cleanly)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    return stop


_ORPHAN_POLL_SECONDS = 1.0


async def stop_when_orphaned(front_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once this process's parent is no longer ``front_pid`` (a local worker of
    ``serve --workers N`` whose front died, even by SIGKILL, is re-parented): the worker drains
    its runs and exits instead of taking jobs for a front that is gone."""
    while not stop.is_set():
        if os.getppid() != front_pid:
            _log.warning("front pid %d is gone: draining and stopping", front_pid)
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _ORPHAN_POLL_SECONDS)


def restore_signals() -> None:
    """Give SIGTERM and SIGINT back to their defaults (after ``serve`` ends)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)
