"""Item 3: Slack ack latency — signed mentions dispatched while runs are in flight.

The app runs with Bolt's default (ack first, listener after), exactly as ``serve`` does; the
timing covers ``app.async_dispatch`` of one signed ``app_mention`` from request to response.
Runs in flight wait on a model that takes ``round_latency_s`` per round; the measured mentions
start runs too, which queue behind the concurrency limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bench.common import Row, Sizes, judged, percentile
from bench.fake_model import FakeModelProcess
from bench.loopmon import LoopMonitor
from bench.scenario import bench_settings, fake_adapters
from sre_diag.audit import AuditTrail, JsonlAuditSink
from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.harness.run import Harness
from sre_diag.slack import PluginHandle, register

__all__ = ["post_all", "run_slack_ack", "signed_mention"]

SECTION = "3 slack ack"
CHANNEL = "CBENCH0001"
_SECRET = "bench-signing-secret"
_REPO = Path(__file__).resolve().parent.parent


def signed_mention(n: int, marker: str | None = None) -> dict[str, Any]:
    """Mention ``n`` as Slack signs it: its own event id and thread ``1764300000.<n>``; the
    text ends with ``marker`` (default ``(n)``)."""
    ts = f"1764300000.{n:06d}"
    text = f"<@UDIAG0001> payment-api 5xx since 10:05 {marker or f'({n})'}"
    body = json.dumps(
        {
            "type": "event_callback", "team_id": "T00000001", "api_app_id": "A00000001",
            "event_id": f"EvBENCH{n:08d}", "event_time": 1764300000,
            "event": {"type": "app_mention", "user": "UHUMAN01", "channel": CHANNEL, "ts": ts,
                      "event_ts": ts, "text": text},
        }
    )  # fmt: skip
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(_SECRET).generate_signature(timestamp=timestamp, body=body)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature or "",
    }
    return {"body": body, "headers": headers}


async def post_all(url: str, requests: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    """Send the requests from another process and return its timings."""
    path = tmp / f"requests-{len(requests)}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(requests), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.ack_client", url, str(path),
        stdout=asyncio.subprocess.PIPE, cwd=_REPO,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    result: dict[str, Any] = json.loads(out)
    return result


async def run_slack_ack(sizes: Sizes) -> list[Row]:
    with FakeModelProcess(delay=sizes.round_latency_s) as server, \
            tempfile.TemporaryDirectory() as tmp:  # fmt: skip
        async with RecordingSlackApi() as slack:
            settings = bench_settings(
                server.base_url, Path(tmp) / "audit",
                DIAG_ADMIN_CHANNELS=CHANNEL, DIAG_MAX_CONCURRENT_RUNS=str(sizes.slack_in_flight),
            )  # fmt: skip
            harness = Harness(
                settings, dict(fake_adapters()),
                AuditTrail.for_settings(JsonlAuditSink(Path(tmp) / "a"), settings),
            )  # fmt: skip
            client = AsyncWebClient(token="xoxb-bench", base_url=slack.base_url)
            app = AsyncApp(client=client, signing_secret=_SECRET)
            handle = register(app, settings, harness=harness)
            runner = web.AppRunner(app.web_app(path="/slack/events"), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = next(iter(site._server.sockets)).getsockname()[1]  # type: ignore[union-attr]
            url = f"http://127.0.0.1:{port}/slack/events"
            try:
                return [await _measure(url, handle, sizes, Path(tmp))]
            finally:
                await runner.cleanup()
                await handle.close()


async def _measure(url: str, handle: PluginHandle, sizes: Sizes, tmp: Path) -> Row:
    await post_all(url, [signed_mention(n) for n in range(sizes.slack_in_flight)], tmp)
    await asyncio.sleep(1.0)  # the listeners run right after their ack; let them submit
    in_flight = handle.manager.in_flight
    requests = [signed_mention(100_000 + n) for n in range(sizes.slack_mentions)]
    async with LoopMonitor() as monitor:
        timings = await post_all(url, requests, tmp)
    latencies: list[float] = timings["latencies_ms"]
    statuses: list[int] = timings["statuses"]
    p99 = percentile(latencies, 99)
    return Row(
        SECTION, f"ack p99 over HTTP, {sizes.slack_mentions} mentions, {in_flight} runs in flight",
        round(p99, 3), "ms", "p99 < 20 ms", judged(p99 < 20 and set(statuses) == {200}),
        {
            "ack_p50_ms": round(percentile(latencies, 50), 3),
            "ack_max_ms": round(max(latencies), 3),
            "non_200_responses": float(sum(s != 200 for s in statuses)),
            "loop_lag_p99_ms": round(monitor.p99_ms, 2),
            "runs_in_flight_at_end": float(handle.manager.in_flight),
        },
        "Bolt default mode (ack, then listener), served by aiohttp; timed by another process",
    )  # fmt: skip
