"""Item 6: runs leave the Slack front — ``serve`` in-process vs ``serve --workers 2`` over Redis.

Both layouts run as real ``python -m sre_diag serve --http`` processes with the same settings (the
bundled runbooks and logs as evidence, a JSON-lines audit), against the per-conversation fake
model in its own process, a recording Slack Web API in this process and the machine's Redis (the
database of ``BENCH_REDIS_URL``, default ``redis://127.0.0.1:6379/11``, is emptied before each
layout starts). The in-process layout is the baseline measured in the same run:

* ack p99 of ``slack_mentions`` signed mentions (timed by another process) while
  ``slack_in_flight`` runs wait on the model;
* N concurrent mentions (``concurrency``), ``round_latency_s`` per model round, 3 rounds: wall
  time from the first mention sent to the last answer posted, over the ideal 3 rounds; the
  CPU-seconds per run of the serving processes (front and workers) and the model requests in
  flight;
* the queue hop: from the job's entry on the stream (its id is Redis's clock, in ms) to the run's
  first model request, and from the mention sent to the first model request in both layouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from bench.common import REPO, Row, Sizes, Status, judged, percentile
from bench.fake_model import FakeModelProcess
from bench.slack_ack import signed_mention
from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.slack.jobs import DEFAULT_STREAM

__all__ = ["run_workers"]

SECTION = "6 workers"
ROUNDS = 3
CHANNEL = "CBENCH0001"
LAYOUTS = ("in-process", "--workers 2")
_WARM = 900_000
"""Mention numbers of the warm-up runs (never measured)."""
_MARK = re.compile(r"bench-(\d+)")
_INCIDENT = REPO / "examples" / "incident"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")


@dataclass
class _Serve:
    """One ``serve`` process (and the local workers it started); its log read as it comes."""

    process: asyncio.subprocess.Process
    port: int
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def pids(self) -> list[int]:
        pids = [self.process.pid]
        for line in self.lines:
            if "local worker(s): pid" in line:
                pids += [int(p) for p in re.findall(r"\d+", line.split("pid", 1)[1])]
        return pids

    def cpu_seconds(self) -> float:
        """User + system CPU of the front and its workers so far (Linux /proc)."""
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
                fields = text[text.rindex(")") + 2 :].split()
                total += int(fields[11]) + int(fields[12])
        return total / _TICK

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    async def wait_log(self, text: str, count: int, within: float) -> None:
        deadline = time.monotonic() + within
        while sum(text in line for line in self.lines) < count:
            if time.monotonic() > deadline or self.process.returncode is not None:
                tail = "\n".join(self.lines[-20:])
                raise RuntimeError(f"serve never logged {text!r} x{count}:\n{tail}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """SIGTERM; past 30 s (runs still draining, final statuses waiting for Slack's rate
        budget) SIGKILL the front and its workers: the figures are taken by then."""
        pids = self.pids()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                await self.process.wait()
        for pid in pids[1:]:  # a worker still draining after its front exited
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _start(
    layout: str, model_url: str, slack: RecordingSlackApi, tmp: Path, concurrent_runs: int
) -> _Serve:
    """``serve`` in ``layout`` with room for ``concurrent_runs`` runs at once in all."""
    workers = layout == "--workers 2"
    per_process = -(-concurrent_runs // 2) if workers else concurrent_runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "SLACK_", "OPENAI_"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
            "SLACK_BOT_TOKEN": "xoxb-bench",
            "SLACK_SIGNING_SECRET": "bench-signing-secret",
            "DIAG_SLACK_API_URL": slack.base_url,
            "DIAG_ADMIN_CHANNELS": CHANNEL,
            "OPENAI_API_KEY": "bench-key",
            "OPENAI_BASE_URL": model_url,
            "DIAG_MODEL": "bench-model",
            "DIAG_AUDIT_SINK": f"jsonl:{tmp / 'audit'}",
            "DIAG_CACHE_DIR": str(tmp / "cache"),
            "DIAG_KNOWLEDGE_DIR": str(_INCIDENT / "runbooks"),
            "DIAG_LOGS_SOURCE": str(_INCIDENT / "logs"),
            "DIAG_MAX_CONCURRENT_RUNS": str(per_process),
            "DIAG_REDIS_URL": _redis_url(),
        }
    )
    tmp.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once per process start
    port = _free_port()
    args = ["-m", "sre_diag", "serve", "--http", "--port", str(port)]
    if workers:
        args += ["--workers", "2"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp,
    )  # fmt: skip
    serve = _Serve(process, port)
    serve.reader = asyncio.create_task(serve._read())
    try:
        await _ready(port, serve)
        if workers:
            await serve.wait_log("ready: up to", 2, 120)
    except BaseException:
        await serve.stop()
        raise
    return serve


async def _ready(port: int, serve: _Serve, within: float = 120) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline or serve.process.returncode is not None:
                tail = "\n".join(serve.lines[-20:])
                raise RuntimeError(f"serve not ready:\n{tail}")
            await asyncio.sleep(0.1)


def _answers(slack: RecordingSlackApi) -> list[tuple[int, float]]:
    """(mention number, monotonic arrival) of every answer posted so far."""
    found: list[tuple[int, float]] = []
    for call in slack.calls:
        if call.method != "chat.postMessage" or not call.params.get("metadata"):
            continue
        thread = str(call.params.get("thread_ts", ""))
        found.append((int(thread.rsplit(".", 1)[-1]), call.at))
    return found


async def _until_answers(
    slack: RecordingSlackApi, count: int, stall: float, serve: _Serve, *, strict: bool = True
) -> int:
    """Wait for ``count`` answers, or until none came for ``stall`` seconds (a mention the
    front declined gets no answer): the number seen. ``strict``: fewer is an error."""
    seen, last = 0, time.monotonic()
    while seen < count:
        now = len(_answers(slack))
        if now != seen:
            seen, last = now, time.monotonic()
        elif time.monotonic() - last > stall:
            if strict:
                tail = "\n".join(serve.lines[-15:])
                raise RuntimeError(f"{seen} of {count} answers, none for {stall:g} s:\n{tail}")
            break
        await asyncio.sleep(0.02)
    return seen


async def _warm(serve: _Serve, slack: RecordingSlackApi, runs: int) -> None:
    """A few runs before measuring, so every process has imported and built what it builds on
    its first run (the way an SRE meets a bot that has been up for a while)."""
    await _post(serve.url, range(_WARM, _WARM + runs))
    await _until_answers(slack, runs, 120, serve)
    slack.calls.clear()


async def _post(url: str, numbers: range) -> dict[int, float]:
    """Post one signed mention per number at once; the wall time each was sent."""
    sent: dict[int, float] = {}
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(n: int) -> None:
            request = signed_mention(n, f"bench-{n:06d}")
            sent[n] = time.time()
            async with session.post(url, data=request["body"].encode(),
                                    headers=request["headers"]) as response:  # fmt: skip
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"mention {n}: HTTP {response.status}")

        await asyncio.gather(*(one(n) for n in numbers))
    return sent


async def _watch_stream(redis: Redis, seen: dict[int, float], stop: asyncio.Event) -> None:
    """Every job entering the stream: its mention number and its entry time (Redis clock)."""
    last = "0-0"
    while not stop.is_set():
        answer: Any = await redis.xread({DEFAULT_STREAM: last}, count=500, block=100)
        for _stream, items in answer or []:
            for entry_id, fields in items:
                last = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                raw = fields.get(b"job") or fields.get("job") or b"{}"
                query = str(json.loads(raw).get("query", ""))
                match = _MARK.search(query)
                if match:
                    seen[int(match.group(1))] = int(last.split("-", 1)[0]) / 1000


@dataclass
class _Level:
    ratio: float
    wall_s: float
    cpu_per_run_s: float
    peak_in_flight: int
    model_requests: int
    answers: int
    first_request_after_mention_ms: list[float]
    hop_ms: list[float]


async def _level(
    layout: str, n: int, latency: float, model: FakeModelProcess, slack: RecordingSlackApi,
    redis: Redis, tmp: Path,
) -> _Level:  # fmt: skip
    await redis.flushdb()
    slack.calls.clear()
    slack.messages.clear()
    serve = await _start(layout, model.base_url, slack, tmp / f"{layout[-1]}-{n}", n)
    stop = asyncio.Event()
    enqueued: dict[int, float] = {}
    watcher = asyncio.create_task(_watch_stream(redis, enqueued, stop))
    try:
        await _warm(serve, slack, min(4, n))
        await model.stats("/reset")
        cpu_before = serve.cpu_seconds()
        started = time.monotonic()
        sent = await _post(serve.url, range(1, n + 1))
        await _until_answers(slack, n, 30 + 10 * ROUNDS * latency, serve, strict=False)
        answered = _answers(slack)
        wall = max((at for _, at in answered), default=time.monotonic()) - started
        cpu = serve.cpu_seconds() - cpu_before
        stats = await model.stats()
        firsts: dict[str, float] = (await model.stats("/firsts")).get("firsts", {})
    finally:
        stop.set()
        await watcher
        await serve.stop()
    first_by_n = {int(m.group(1)): at for text, at in firsts.items() if (m := _MARK.search(text))}
    after_mention = [(first_by_n[k] - sent[k]) * 1000 for k in sent if k in first_by_n]
    hop = [(first_by_n[k] - enqueued[k]) * 1000 for k in enqueued if k in first_by_n]
    return _Level(
        ratio=wall / (ROUNDS * latency), wall_s=wall, cpu_per_run_s=cpu / n,
        peak_in_flight=int(stats["peak_in_flight"]), model_requests=int(stats["requests"]),
        answers=len(_answers(slack)), first_request_after_mention_ms=after_mention, hop_ms=hop,
    )  # fmt: skip


async def _acks(
    layout: str, sizes: Sizes, model: FakeModelProcess, slack: RecordingSlackApi, redis: Redis,
    tmp: Path,
) -> tuple[list[float], int]:  # fmt: skip
    """Ack latencies of the timed mentions, and the runs still in flight at their end."""
    from bench.slack_ack import post_all

    await redis.flushdb()
    in_flight = sizes.slack_in_flight
    serve = await _start(layout, model.base_url, slack, tmp / f"ack{layout[-1]}", in_flight)
    try:
        await _warm(serve, slack, min(4, in_flight))
        await model.stats("/reset")
        await _post(serve.url, range(1, in_flight + 1))
        deadline = time.monotonic() + 30
        while int((await model.stats())["in_flight"]) < in_flight:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        requests = [signed_mention(100_000 + i, f"bench-{100_000 + i}")
                    for i in range(sizes.slack_mentions)]  # fmt: skip
        timings = await post_all(serve.url, requests, tmp)
        still = int((await model.stats())["in_flight"])
    finally:
        await serve.stop()
    if set(timings["statuses"]) != {200}:
        raise RuntimeError(f"acks answered {sorted(set(timings['statuses']))}")
    return list(timings["latencies_ms"]), still


def _ms(values: list[float], pct: float) -> float:
    return round(percentile(values, pct), 2) if values else 0.0


async def run_workers(sizes: Sizes) -> list[Row]:
    redis: Redis = Redis.from_url(_redis_url(), socket_connect_timeout=2)
    try:
        await redis.ping()
    except Exception as exc:
        await redis.aclose()
        return [Row(SECTION, "workers over Redis", None, "", "", Status.NOT_MEASURED,
                    note=f"Redis at {_redis_url()} unreachable: {type(exc).__name__}")]  # fmt: skip
    try:
        return await _measure(sizes, redis)
    finally:
        with contextlib.suppress(Exception):
            await redis.flushdb()
        await redis.aclose()


async def _measure(sizes: Sizes, redis: Redis) -> list[Row]:
    rows: list[Row] = []
    latency = sizes.round_latency_s
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        async with RecordingSlackApi() as slack:
            # Acks: the runs in flight wait long enough (4 rounds' latency each round) to span
            # the timed mentions.
            with FakeModelProcess(delay=4 * latency) as slow:
                acks = {layout: await _acks(layout, sizes, slow, slack, redis, tmp)
                        for layout in LAYOUTS}  # fmt: skip
            (base, base_left), (after, after_left) = acks[LAYOUTS[0]], acks[LAYOUTS[1]]
            p99 = _ms(after, 99)
            rows.append(Row(
                SECTION, f"ack p99, {sizes.slack_mentions} mentions, {sizes.slack_in_flight} runs "
                "in flight, --workers 2", p99, "ms", "p99 < 20 ms", judged(p99 < 20),
                {"ack_p50_ms": _ms(after, 50), "in_process_ack_p99_ms": _ms(base, 99),
                 "in_process_ack_p50_ms": _ms(base, 50),
                 "runs_in_flight_at_end": float(after_left),
                 "in_process_runs_in_flight_at_end": float(base_left)},
                "serve processes; timed by another process; baseline: serve in-process",
            ))  # fmt: skip
            with FakeModelProcess(delay=latency) as model:
                hops: list[float] = []
                mention_first: dict[str, list[float]] = {}
                for index, n in enumerate(sizes.concurrency):
                    levels = {layout: await _level(layout, n, latency, model, slack, redis, tmp)
                              for layout in LAYOUTS}  # fmt: skip
                    before, now = levels[LAYOUTS[0]], levels[LAYOUTS[1]]
                    hops += now.hop_ms
                    for layout, level in levels.items():
                        mention_first.setdefault(layout, []).extend(
                            level.first_request_after_mention_ms
                        )
                    target = 1.1 if index == 0 else 1.3
                    rows.append(Row(
                        SECTION, f"{n} concurrent mentions, --workers 2: wall / ideal",
                        round(now.ratio, 3), "x", f"<= {target}x ideal",
                        judged(now.ratio <= target and now.answers == n),
                        {"wall_s": round(now.wall_s, 3), "ideal_s": ROUNDS * latency,
                         "cpu_s_per_run": round(now.cpu_per_run_s, 4),
                         "model_peak_in_flight": float(now.peak_in_flight),
                         "model_requests": float(now.model_requests),
                         "in_process_ratio": round(before.ratio, 3),
                         "in_process_cpu_s_per_run": round(before.cpu_per_run_s, 4),
                         "in_process_model_peak_in_flight": float(before.peak_in_flight),
                         "answered": float(now.answers),
                         "in_process_answered": float(before.answers)},
                        f"{ROUNDS} rounds x {latency:g} s; first mention sent -> last answer "
                        "posted (of those answered); baseline: serve in-process",
                    ))  # fmt: skip
            rows.append(Row(
                SECTION, "queue hop: job on the stream -> its first model request, p50",
                _ms(hops, 50), "ms", "", Status.INFO,
                {"hop_p99_ms": _ms(hops, 99), "jobs": float(len(hops)),
                 "mention_to_first_request_p50_ms": _ms(mention_first[LAYOUTS[1]], 50),
                 "mention_to_first_request_p99_ms": _ms(mention_first[LAYOUTS[1]], 99),
                 "in_process_mention_to_first_request_p50_ms": _ms(mention_first[LAYOUTS[0]], 50),
                 "in_process_mention_to_first_request_p99_ms": _ms(mention_first[LAYOUTS[0]], 99)},
                "over every run of the concurrency levels above",
            ))  # fmt: skip
    return rows
