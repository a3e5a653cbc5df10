"""``python -m plugin serve``: a standalone Slack app with this plugin mounted.

Socket Mode (``AsyncSocketModeHandler``) when ``SLACK_APP_TOKEN`` is set and ``--http`` is not
given; otherwise HTTP mode on ``--port`` at ``/slack/events`` with signature verification. On
SIGINT/SIGTERM it stops taking events, drains the runs in flight (cancelling them after the
run deadline) so that every outcome is still posted, then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from plugin.errors import ConfigError
from plugin.settings import Settings
from plugin.slack import PluginHandle, register
from plugin.wiring import warm_up

__all__ = ["build_app", "serve"]

_log = logging.getLogger(__name__)


def build_app(settings: Settings, *, socket_mode: bool) -> AsyncApp:
    """The standalone AsyncApp: bot token, Web API base URL, signing secret for HTTP mode."""
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is required to serve")
    if not socket_mode and settings.slack_signing_secret is None:
        raise ConfigError("SLACK_SIGNING_SECRET is required in HTTP mode")
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


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _shutdown(handle: PluginHandle, settings: Settings) -> None:
    _log.info("shutting down: draining %d run(s)", handle.manager.in_flight)
    await handle.drain(timeout_seconds=settings.deadline_seconds + 5)
    await handle.close()


async def serve(settings: Settings, *, http: bool, port: int) -> None:
    socket_mode = settings.slack_app_token is not None and not http
    app = build_app(settings, socket_mode=socket_mode)
    handle = register(app, settings)
    await warm_up(handle.manager.harness)
    stop = _stop_event()
    if socket_mode:
        assert settings.slack_app_token is not None
        handler = AsyncSocketModeHandler(app, settings.slack_app_token.get_secret_value())
        await handler.connect_async()  # type: ignore[no-untyped-call]
        _log.info("serving over Socket Mode")
        await stop.wait()
        await handler.close_async()  # type: ignore[no-untyped-call]
    else:
        runner = web.AppRunner(app.web_app(path="/slack/events", port=port), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", port).start()  # a server listens on all interfaces
        _log.info("serving HTTP on port %d at /slack/events", port)
        await stop.wait()
        await runner.cleanup()
    await _shutdown(handle, settings)
