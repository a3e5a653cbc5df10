"""Start an aiohttp application on a free loopback port (the local fakes and the replay API)."""

from __future__ import annotations

from aiohttp import web

__all__ = ["serve_loopback"]


async def serve_loopback(
    app: web.Application, *, handler_cancellation: bool = False, backlog: int = 128
) -> tuple[web.AppRunner, int]:
    """Run ``app`` on 127.0.0.1 and an OS-chosen port; the caller cleans the runner up."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=backlog)
    await site.start()
    sockets = list(getattr(site._server, "sockets", None) or [])
    if not sockets:
        await runner.cleanup()
        raise RuntimeError("loopback server did not start")
    return runner, int(sockets[0].getsockname()[1])
