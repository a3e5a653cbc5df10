"""``python -m sre_diag serve``: a standalone Slack app with this plugin mounted (CONTRACTS §8).

Socket Mode (``AsyncSocketModeHandler``) when ``SLACK_APP_TOKEN`` is set and ``--http`` is not
given; otherwise HTTP mode on ``--port`` at ``/slack/events`` with signature verification.

Start-up, in order:

1. settings ``serve`` needs are checked: the bot token, the signing secret in HTTP mode, and
   ``DIAG_ADMIN_CHANNELS`` (at least one channel ID such as ``C0123ABC``) → ``ConfigError``
   (the command prints one line and exits 2);
2. the operations endpoints answer (``/readyz`` 503 "starting"): on the main port in HTTP mode,
   on ``DIAG_OPS_PORT`` in Socket Mode when it is set;
3. the runbook index is warmed;
4. Slack is reached: ``auth.test`` with the bot token (a refusal is a ``ConfigError``: exit 2),
   then in Socket Mode ``apps.connections.open`` with the app token and the WebSocket. Each
   failed attempt is one log line (what failed and why, never a traceback); attempts are
   retried with a growing pause until ``connect_timeout_seconds`` (60 s) have passed, then the
   process exits 1;
5. ``/readyz`` answers 200.

SIGTERM or SIGINT at any moment (also while starting or connecting) makes ``/readyz`` answer 503,
stops taking events, drains the runs in flight (each ends by its own deadline; past the
deadline plus 5 s they are cancelled and still post their outcome) and exits 0.

``--workers N`` (needs ``DIAG_REDIS_URL``): the front only gates, acknowledges, posts the status
message and queues the run on Redis (``sre_diag.slack.jobs``); N local ``sre-diag worker``
processes started beside it run the diagnoses (``--workers 0``: the workers run elsewhere); one
that exits on its own (killed, OOM) is started again (after 1 s, up to 30 s while it keeps
dying). On SIGTERM the front stops taking events, then SIGTERMs its workers, which drain their
runs. The queue's depth and the lost jobs claimed are in ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable
from enum import Enum
from typing import Any

from aiohttp import web
from redis.asyncio import Redis
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.aio import stop_task, stop_tasks, stopping
from sre_diag.errors import ConfigError
from sre_diag.log import failure_reason, log_failure
from sre_diag.service.ops import (
    OpsServer,
    OpsState,
    Readiness,
    add_ops_routes,
    restore_signals,
    stop_on_signals,
)
from sre_diag.settings import Settings
from sre_diag.slack import PluginHandle, register, require_admin_channels
from sre_diag.slack.jobs import DEFAULT_STREAM, JobQueue, QueueDepth
from sre_diag.slack.posting import slack_error_code
from sre_diag.slack.state import connect_redis
from sre_diag.wiring import warm_up

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "EXIT_NOT_CONNECTED",
    "EXIT_OK",
    "build_app",
    "check_serve_settings",
    "serve",
]

_log = logging.getLogger(__name__)

EXIT_OK, EXIT_NOT_CONNECTED = 0, 1
CONNECT_TIMEOUT_SECONDS = 60.0
"""How long ``serve`` tries to reach Slack before it gives up with exit 1."""
_ATTEMPT_SECONDS = 10.0
"""One connection attempt at most (a Slack that does not answer is a failed attempt)."""
_FIRST_PAUSE_SECONDS, _MAX_PAUSE_SECONDS, _MIN_ATTEMPT_SECONDS = 1.0, 10.0, 1.0
_DRAIN_SLACK_SECONDS = 5.0
_RESTART_FIRST_SECONDS = 1.0
_WORKER_NICENESS = 5
"""Local workers run this much "nicer" than their front (see ``_Front._spawn``)."""
_RESTART_MAX_SECONDS = 30.0
_RESTART_RESET_SECONDS = 60.0
"""A local worker that ran this long before it exited is restarted after the first pause."""
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{4,20}")
# auth.test answers that say nothing about the token: try again.
_TRANSIENT = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_MAX_REASON = 200


class _Connected(Enum):
    YES = "connected"
    STOPPED = "stopped"
    TIMED_OUT = "timed out"


class _NoTraceback(logging.Filter):
    """The Socket Mode client logs its own connection failures with a traceback: keep the line,
    drop the traceback (CONTRACTS §8: a clear line per attempt)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _socket_logger() -> logging.Logger:
    logger = logging.getLogger(f"{__name__}.socket_mode")
    if not any(isinstance(f, _NoTraceback) for f in logger.filters):
        logger.addFilter(_NoTraceback())
    return logger


def check_serve_settings(settings: Settings, *, socket_mode: bool) -> None:
    """What ``serve`` needs beyond valid settings; a ``ConfigError`` names the setting."""
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is required to serve")
    if not socket_mode and settings.slack_signing_secret is None:
        raise ConfigError("SLACK_SIGNING_SECRET is required in HTTP mode")
    require_admin_channels(settings)
    channels = settings.admin_channels
    bad = [c for c in channels if not _CHANNEL_ID.fullmatch(c)]
    if bad:
        shown = ", ".join(repr(c[:40]) for c in bad[:5])
        raise ConfigError(
            f"DIAG_ADMIN_CHANNELS: {shown} is not a channel ID (C or G then 4-20 capital "
            "letters or digits, e.g. C0123ABC)"
        )


def build_app(settings: Settings, *, socket_mode: bool) -> AsyncApp:
    """The standalone AsyncApp: bot token, Web API base URL, signing secret for HTTP mode."""
    check_serve_settings(settings, socket_mode=socket_mode)
    assert settings.slack_bot_token is not None
    token = settings.slack_bot_token.get_secret_value()
    client = (
        AsyncWebClient(token=token, base_url=settings.slack_api_url)
        if settings.slack_api_url
        else AsyncWebClient(token=token)
    )
    secret = settings.slack_signing_secret
    return AsyncApp(
        client=client,
        signing_secret=secret.get_secret_value() if secret else None,
        request_verification_enabled=not socket_mode,
    )


def _slack_answer(exc: SlackApiError) -> str:
    """Slack's error code (``slack_error_code``), or the HTTP status when it gave none."""
    return slack_error_code(exc) or f"HTTP {exc.response.status_code}"


def _reason(exc: BaseException) -> str:
    """One line on why an attempt failed: Slack's error code or the network's, bounded."""
    if isinstance(exc, SlackApiError):
        return f"Slack answered {_slack_answer(exc)}"
    text = " ".join(str(exc).split())
    return f"{failure_reason(exc)}: {text}"[:_MAX_REASON] if text else failure_reason(exc)


async def _until_stopped(work: Awaitable[Any], stop: asyncio.Event, seconds: float) -> bool:
    """Run ``work``; False if ``stop`` was set first (``work`` is cancelled). Raises what
    ``work`` raised, or ``TimeoutError`` after ``seconds``."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stopped}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopped.cancel()
    if task in done:
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if stop.is_set():
        return False
    raise TimeoutError


class _Connector:
    """Reaches Slack: ``auth.test``, then in Socket Mode the app token's WebSocket."""

    def __init__(self, app: AsyncApp, handler: AsyncSocketModeHandler | None) -> None:
        self._app = app
        self._handler = handler
        self.step = "auth.test"

    @property
    def client(self) -> AsyncWebClient:
        return self._app.client

    async def attempt(self) -> None:
        self.step = "auth.test"
        try:
            await self._app.client.auth_test()
        except SlackApiError as exc:
            error = _slack_answer(exc)
            if exc.response.status_code == 200 and error not in _TRANSIENT:
                raise ConfigError(
                    f"SLACK_BOT_TOKEN was refused by Slack's auth.test ({error})"
                ) from None
            raise
        if self._handler is None:
            return
        self.step = "apps.connections.open (SLACK_APP_TOKEN)"
        client = self._handler.client
        response = await self._app.client.apps_connections_open(app_token=client.app_token)
        client.wss_uri = response["url"]
        self.step = "the Socket Mode WebSocket"
        await self._handler.connect_async()  # type: ignore[no-untyped-call]

    async def connect(self, stop: asyncio.Event, timeout_seconds: float) -> _Connected:
        """Attempt until connected, stopped, or no further attempt fits in the bound."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        pause = _FIRST_PAUSE_SECONDS
        attempt = 0
        while not stop.is_set():
            attempt += 1
            bound = min(deadline - loop.time(), _ATTEMPT_SECONDS)
            try:
                if not await _until_stopped(self.attempt(), stop, bound):
                    return _Connected.STOPPED
                return _Connected.YES
            except ConfigError:
                raise
            except Exception as exc:
                why = f"no answer within {bound:.0f} s" if isinstance(exc, TimeoutError) else None
                # The last attempt still gets a second of its own before the deadline.
                wait = min(pause, deadline - loop.time() - _MIN_ATTEMPT_SECONDS)
                _log.error(
                    "Slack connection attempt %d failed at %s: %s; %s",
                    attempt,
                    self.step,
                    why or _reason(exc),
                    f"retrying in {wait:.1f} s" if wait > 0 else "no time left for another",
                )
            if wait <= 0:
                return _Connected.TIMED_OUT
            if not await _sleep_unless_stopped(stop, wait):
                return _Connected.STOPPED
            pause = min(pause * 2, _MAX_PAUSE_SECONDS)
        return _Connected.STOPPED


async def _sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; False when ``stop`` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))
    except TimeoutError:
        return True
    return False


class _Endpoints:
    """Where the Slack app and the operations endpoints listen, for the process's lifetime."""

    def __init__(
        self, app: AsyncApp, ops: OpsState, settings: Settings, *, socket_mode: bool, port: int
    ) -> None:
        self._runner: web.AppRunner | None = None
        self._ops_server: OpsServer | None = None
        self._port = port
        if not socket_mode:
            web_app = app.web_app(path="/slack/events", port=port)
            add_ops_routes(web_app, ops)
            self._runner = web.AppRunner(web_app, access_log=None)
        elif settings.ops_port is not None:
            self._ops_server = OpsServer(ops, settings.ops_port)

    async def start(self) -> None:
        """Listen; a port that is taken (or not ours to bind) is a ``ConfigError``."""
        if self._runner is not None:
            await self._runner.setup()
            try:  # a server listens on all interfaces
                await web.TCPSite(self._runner, "0.0.0.0", self._port).start()
            except OSError as exc:
                raise ConfigError(f"--port {self._port}: cannot listen ({exc.strerror})") from None
            _log.info("HTTP on port %d: /slack/events, /healthz, /readyz, /metrics", self._port)
        if self._ops_server is not None:
            try:
                await self._ops_server.start()
            except OSError as exc:
                raise ConfigError(
                    f"DIAG_OPS_PORT {self._ops_server.port}: cannot listen ({exc.strerror})"
                ) from None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._ops_server is not None:
            await self._ops_server.stop()


async def _shutdown(
    handle: PluginHandle,
    settings: Settings,
    ops: OpsState,
    handler: AsyncSocketModeHandler | None,
) -> None:
    """Stop taking events, drain the runs in flight, release everything."""
    ops.readiness = Readiness.DRAINING
    if handler is not None:
        await handler.close_async()  # type: ignore[no-untyped-call]
    in_flight = handle.manager.in_flight
    if in_flight:
        _log.info("shutting down: draining %d run(s)", in_flight)
    await handle.drain(timeout_seconds=settings.deadline_seconds + _DRAIN_SLACK_SECONDS)
    await handle.close()


async def _run(
    handle: PluginHandle,
    connector: _Connector,
    ops: OpsState,
    stop: asyncio.Event,
    connect_timeout_seconds: float,
    *,
    runs_here: bool,
) -> int:
    """Warm up (only where the runs happen: a queueing front runs none), connect, serve until a
    signal; the exit code."""
    warming = warm_up(handle.manager.harness) if runs_here else asyncio.sleep(0)
    if not await _until_stopped(warming, stop, float("inf")):
        return EXIT_OK
    connected = await connector.connect(stop, connect_timeout_seconds)
    if connected is _Connected.TIMED_OUT:
        _log.error("not connected to Slack within %g s: exiting", connect_timeout_seconds)
        return EXIT_NOT_CONNECTED
    if connected is _Connected.STOPPED:
        _log.info("stopped before Slack was connected")
        return EXIT_OK
    await handle.manager.adopt_backlog(connector.client)
    ops.readiness = Readiness.READY
    _log.info("connected to Slack: ready")
    await stop.wait()
    _log.info("stop signal received")
    return EXIT_OK


class _Front:
    """The front's side of the run queue: the queue, its depth for ``/metrics``, and the local
    workers of ``--workers N``."""

    def __init__(self, settings: Settings, workers: int) -> None:
        assert settings.redis_url is not None
        self.redis: Redis = connect_redis(settings.redis_url.get_secret_value())
        self.queue = JobQueue(self.redis, DEFAULT_STREAM)
        self.workers = workers
        self.depth: QueueDepth | None = None
        self._processes: list[asyncio.subprocess.Process] = []
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    def depth_values(self) -> tuple[int, int, int] | None:
        d = self.depth
        return None if d is None else (d.waiting, d.taken, d.claimed)

    async def start(self) -> None:
        with contextlib.suppress(Exception):  # the workers create it too
            await self.queue.ensure_group()
        self._watch = asyncio.create_task(self._watch_depth(), name="diag-queue-depth")
        for slot in range(self.workers):
            self._processes.append(await self._spawn())
            self._keepers.append(
                asyncio.create_task(self._keep(slot), name=f"diag-worker-keeper-{slot}")
            )
        if self.workers:
            pids = ", ".join(str(p.pid) for p in self._processes)
            _log.info("started %d local worker(s): pid %s", self.workers, pids)

    async def _spawn(self) -> asyncio.subprocess.Process:
        """One local worker, at a lower CPU priority than the front: when the runs keep every
        core busy, the front's acks, dedupe and queueing still get the CPU they need."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sre_diag",
            "worker",
            "--front-pid",
            str(os.getpid()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            env=dict(os.environ),
        )
        try:
            base = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, process.pid, min(base + _WORKER_NICENESS, 19))
        except OSError as exc:  # not allowed here: the worker runs at the front's priority
            _log.warning("worker pid %d priority unchanged: %s", process.pid, exc.strerror)
        return process

    async def _keep(self, slot: int) -> None:
        """Start worker ``slot`` again when it exits before the front stops (killed, OOM, a
        crash): after 1 s, doubling up to 30 s while it keeps dying within a minute. Its jobs
        in flight are answered ``WORKER_LOST`` by whichever worker claims them (the new one
        too)."""
        loop = asyncio.get_running_loop()
        pause = _RESTART_FIRST_SECONDS
        while True:
            process = self._processes[slot]
            started = loop.time()
            code = await process.wait()
            if self._stopping:
                return
            if loop.time() - started > _RESTART_RESET_SECONDS:
                pause = _RESTART_FIRST_SECONDS
            _log.error(
                "worker pid %d exited %d; starting another in %g s", process.pid, code, pause
            )
            while True:
                await asyncio.sleep(pause)
                pause = min(pause * 2, _RESTART_MAX_SECONDS)
                if self._stopping:
                    return
                try:
                    self._processes[slot] = await self._spawn()
                    break
                except OSError as exc:
                    _log.error("worker not started (%s); retrying in %g s", exc.strerror, pause)
            _log.info("started local worker pid %d", self._processes[slot].pid)

    async def _watch_depth(self) -> None:
        while not stopping():
            try:
                self.depth = await self.queue.depth()
            except Exception as exc:
                log_failure(_log, logging.DEBUG, "queue depth not read: %s", exc=exc)
            await asyncio.sleep(1.0)

    async def stop(self, timeout_seconds: float) -> None:
        """SIGTERM the local workers (they drain their runs); kill those still there after
        ``timeout_seconds``."""
        self._stopping = True
        await stop_tasks(self._keepers)
        for process in self._processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for process in self._processes:
            try:
                code = await asyncio.wait_for(process.wait(), timeout_seconds)
            except TimeoutError:
                _log.error("worker pid %d did not drain in time: killed", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                code = await process.wait()
            if code != 0:
                _log.warning("worker pid %d exited %d", process.pid, code)
        await stop_task(self._watch)
        await self.redis.aclose()


def _front(settings: Settings, workers: int | None) -> _Front | None:
    if workers is None:
        return None
    if settings.redis_url is None:
        raise ConfigError(
            "--workers needs DIAG_REDIS_URL: the front queues the runs for its workers on Redis"
        )
    return _Front(settings, workers)


async def serve(
    settings: Settings,
    *,
    http: bool,
    port: int,
    stop: asyncio.Event | None = None,
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
    workers: int | None = None,
) -> int:
    """Run the Slack app until SIGTERM/SIGINT (or ``stop``); the process's exit code: 0 after a
    clean drain, 1 when Slack could not be reached in time. Raises ``ConfigError`` (exit 2) for
    settings ``serve`` cannot run with and for a bot token Slack refuses.

    ``workers``: None runs diagnoses in this process; N queues them on Redis and starts N local
    worker processes (0: the workers run elsewhere)."""
    stop = stop if stop is not None else stop_on_signals()
    try:
        front = _front(settings, workers)
        socket_mode = settings.slack_app_token is not None and not http
        app = build_app(settings, socket_mode=socket_mode)
        handle = register(app, settings, queue=front.queue if front is not None else None)
        if front is not None:
            handle.metrics.watch_jobs(front.depth_values)
        ops = OpsState(handle.metrics)
        handler = None
        if socket_mode:
            assert settings.slack_app_token is not None
            handler = AsyncSocketModeHandler(
                app, settings.slack_app_token.get_secret_value(), logger=_socket_logger()
            )
        endpoints = _Endpoints(app, ops, settings, socket_mode=socket_mode, port=port)
        try:
            await endpoints.start()
            if front is not None:
                await front.start()
            connector = _Connector(app, handler)
            return await _run(
                handle, connector, ops, stop, connect_timeout_seconds, runs_here=front is None
            )
        finally:
            await _shutdown(handle, settings, ops, handler)
            if front is not None:
                await front.stop(settings.deadline_seconds + 3 * _DRAIN_SLACK_SECONDS)
            await endpoints.stop()
    finally:
        restore_signals()
