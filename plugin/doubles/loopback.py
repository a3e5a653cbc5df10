"""Start an aiohttp application on a free loopback port (the local fakes and the replay API)."""

from __future__ import annotations

from typing import ClassVar, Self

from aiohttp import web

__all__ = ["LoopbackServer", "serve_loopback"]


async def serve_loopback(
    app: web.Application, *, handler_cancellation: bool = False, backlog: int = 128
) -> tuple[web.AppRunner, int]:
    """Run ``app`` on 127.0.0.1 and an OS-chosen port; the caller cleans the runner up."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=backlog)
    await site.start()
    addresses = runner.addresses  # public: the bound sockets' names (no private server reach)
    if not addresses:
        await runner.cleanup()
        raise RuntimeError("loopback server did not start")
    return runner, int(addresses[0][1])


class LoopbackServer:
    """start/stop/async-with for a fake served on loopback; subclasses build the app."""

    _runner: web.AppRunner | None = None
    _port: int = 0
    _handler_cancellation: ClassVar[bool] = False
    _backlog: ClassVar[int] = 128

    def build_app(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> Self:
        self._runner, self._port = await serve_loopback(
            self.build_app(), handler_cancellation=self._handler_cancellation, backlog=self._backlog
        )
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
