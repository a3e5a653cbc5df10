"""Event-loop lag: a 10 ms ticker records how late each tick wakes up; also samples VmRSS."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.common import percentile, rss_kib

__all__ = ["LoopMonitor"]


@dataclass
class LoopMonitor:
    """Use as ``async with LoopMonitor() as mon:``; lags are in ms, RSS in KiB."""

    interval: float = 0.010
    max_seconds: float = 600.0
    lags_ms: list[float] = field(default_factory=list)
    peak_rss: int = 0
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _tick(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags_ms.append(max(0.0, (time.perf_counter() - started - self.interval) * 1000))
            self.peak_rss = max(self.peak_rss, rss_kib())

    async def __aenter__(self) -> LoopMonitor:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    @property
    def max_ms(self) -> float:
        return max(self.lags_ms, default=0.0)

    @property
    def p99_ms(self) -> float:
        return percentile(self.lags_ms, 99) if self.lags_ms else 0.0
