"""A redis-server of the test's own, on a free port, that the test can restart (empty: no
persistence), pause and flush — the faults of FAULTS.md's Redis rows, made with the real peer."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.slack.serve_support import free_port

__all__ = ["OwnRedis", "own_redis"]


class OwnRedis:
    """One redis-server process; ``restart`` keeps the port and loses every key."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed", pytrace=False)
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Redis:
        return Redis.from_url(self.url, decode_responses=True, socket_connect_timeout=2)

    async def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.workdir)]
        self.process = await asyncio.to_thread(
            subprocess.Popen, args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            client = self.client()
            try:
                await client.ping()
                return
            except Exception:
                await asyncio.sleep(0.05)
            finally:
                await client.aclose()
        pytest.fail("the test's redis-server did not start", pytrace=False)

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            await asyncio.to_thread(self.process.wait)
        self.process = None

    async def restart(self, down_seconds: float = 0.5) -> None:
        """Killed (nothing is saved) and started again empty on the same port."""
        await self.stop()
        await asyncio.sleep(down_seconds)
        await self.start()

    async def pause(self, seconds: float) -> None:
        """``CLIENT PAUSE`` every client for ``seconds`` (returns at once)."""
        client = self.client()
        try:
            await client.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
        finally:
            await client.aclose()


@asynccontextmanager
async def own_redis(workdir: Path) -> AsyncIterator[OwnRedis]:
    server = OwnRedis(workdir)
    await server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            await server.stop()
