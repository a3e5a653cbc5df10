"""Item 1: the full harness against a bare FunctionAgent, interleaved, same fakes and server."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Row, Sizes, judged, median, percentile
from bench.fake_model import FakeModelProcess
from bench.scenario import BareAgent, build_bench_harness, fake_adapters, is_draft, request_for
from sre_diag.contract.prompts import system_prompt
from sre_diag.harness.agent import build_agent
from sre_diag.harness.context import RunContext
from sre_diag.harness.hooks import HookSet
from sre_diag.harness.interceptor import ToolInterceptor
from sre_diag.harness.model import build_llm
from sre_diag.harness.run import Harness, budgets_from

__all__ = ["run_overhead"]

SECTION = "1 harness overhead"


async def _build_cost(harness: Harness, samples: int) -> float:
    """Median ms of what ``Harness._run`` builds per run before the first request."""
    s = harness.settings
    times: list[float] = []
    for n in range(samples):
        started = time.perf_counter()
        ctx = RunContext.start(
            session_id=f"s{n}",
            run_id=f"r{n}",
            budgets=budgets_from(s),
            hooks=HookSet(()),
            cancel_event=asyncio.Event(),
        )
        llm = build_llm(
            ctx, model=s.model, api_base=s.openai_base_url, api_key="k",
            context_window=s.model_context_window,
            request_timeout=s.model_request_timeout_seconds, http_client=harness.http_client,
        )  # fmt: skip
        build_agent(llm, system_prompt(), ToolInterceptor(ctx, harness.adapters))
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


async def run_overhead(sizes: Sizes) -> list[Row]:
    with FakeModelProcess(delay=0.0) as server, tempfile.TemporaryDirectory() as tmp:
        audit_dir = Path(tmp) / "audit"
        harness = build_bench_harness(server.base_url, audit_dir)
        bare_client = httpx.AsyncClient(
            timeout=60.0, limits=httpx.Limits(max_connections=100, max_keepalive_connections=20)
        )
        bare = BareAgent(server.base_url, bare_client, fake_adapters())
        full: list[float] = []
        plain: list[float] = []
        drafts = 0
        try:
            total = sizes.overhead_warmup + sizes.overhead_runs
            for n in range(total):
                order = (0, 1) if n % 2 == 0 else (1, 0)
                for side in order:
                    started = time.perf_counter()
                    if side == 0:
                        result = await harness.diagnose(request_for(n))
                        elapsed = time.perf_counter() - started
                        drafts += int(is_draft(result))
                        if n >= sizes.overhead_warmup:
                            full.append(elapsed * 1000)
                    else:
                        await bare.run(n)
                        elapsed = time.perf_counter() - started
                        if n >= sizes.overhead_warmup:
                            plain.append(elapsed * 1000)
            build_ms = await _build_cost(harness, min(50, sizes.overhead_runs))
        finally:
            await harness.aclose()
            await bare_client.aclose()
        requests = (await server.stats())["requests"]
    ratio = median(full) / median(plain)
    return [
        Row(
            SECTION, "harness / bare FunctionAgent, ratio of medians", round(ratio, 3), "x",
            "<= 1.10", judged(ratio <= 1.10),
            {
                "harness_p50_ms": round(median(full), 2),
                "harness_p99_ms": round(percentile(full, 99), 2),
                "bare_p50_ms": round(median(plain), 2),
                "bare_p99_ms": round(percentile(plain, 99), 2),
                "runs_each": len(full),
                "harness_drafts": drafts,
                "harness_runs": total,
                "model_requests": requests,
            },
            "3-round scenario, interleaved, instant loopback model in its own process",
        ),
        Row(
            SECTION, "per-run build (RunContext + LLM + agent + tools)", round(build_ms, 2), "ms",
            note="part of the harness p50; the bare agent is built once",
        ),
    ]  # fmt: skip
