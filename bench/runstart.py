"""Item 5b: event-loop lag at the start of a run, in a fresh process as ``serve`` has it.

A child process builds the full harness on the bench fakes, warms it up as ``serve`` does
(``sre_diag.wiring.warm_up``) — or not, for the comparison — and runs diagnoses one after another
while a 10 ms ticker measures how late the loop wakes. The first run of a process is where the
framework loads its lazy parts (``openai.resources``, ``workflows.plugins``, the tiktoken
encoding): done on the loop without the warm-up, in a thread before the first run with it.

Run as a process: ``python -m bench.runstart BASE_URL RUNS [--no-warm-up]`` prints one JSON
object: ``first_max_ms`` (the first run's worst lag) and ``later_max_ms`` (each later run's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, Row, Sizes, judged, percentile
from bench.fake_model import FakeModelProcess
from bench.loopmon import LoopMonitor

__all__ = ["run_runstart"]

SECTION = "5 cold start"
QUERY = "payment-api 5xx since 10:05 UTC 2026-11-28"
_TARGET_MS = 50.0


async def _child(base_url: str, runs: int, warm: bool) -> dict[str, object]:
    from bench.scenario import build_bench_harness
    from sre_diag.contract.request import DiagnosisRequest
    from sre_diag.wiring import warm_up

    lags: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        harness = build_bench_harness(base_url, Path(tmp) / "audit")
        if warm:
            await warm_up(harness)
        for _ in range(runs):
            async with LoopMonitor() as monitor:
                await harness.diagnose(DiagnosisRequest(QUERY))
            lags.append(monitor.max_ms)
        await harness.aclose()
    return {"first_max_ms": lags[0], "later_max_ms": lags[1:]}


async def _measure(base_url: str, runs: int, warm: bool) -> dict[str, object]:
    flags = [] if warm else ["--no-warm-up"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get(
        "PYTHONPATH")]))}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.runstart", base_url, str(runs), *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, cwd=REPO, env=env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def _later(result: dict[str, object]) -> list[float]:
    later = result["later_max_ms"]
    assert isinstance(later, list)
    return [float(v) for v in later] or [0.0]


def _first(result: dict[str, object]) -> float:
    first = result["first_max_ms"]
    assert isinstance(first, int | float)
    return float(first)


async def run_runstart(sizes: Sizes) -> list[Row]:
    with FakeModelProcess(delay=0.0) as server:
        warm = await _measure(server.base_url, sizes.runstart_runs, warm=True)
        cold = await _measure(server.base_url, sizes.runstart_runs, warm=False)
    first, unwarmed = _first(warm), _first(cold)
    later = _later(warm)
    return [
        Row(
            SECTION,
            "loop lag at the first run of a fresh process (after warm_up), max",
            round(first, 1),
            "ms",
            f"< {_TARGET_MS:g} ms",
            judged(first < _TARGET_MS),
            detail={
                "first_run_without_warm_up_max_ms": round(unwarmed, 1),
                "without_over_with": round(unwarmed / first, 1) if first > 0 else 0.0,
                "later_runs_max_p99_ms": round(percentile(later, 99), 1),
                "runs": float(sizes.runstart_runs),
            },
            note="10 ms ticker around each diagnose, full harness on fakes, one run at a time",
        )
    ]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runstart", description=__doc__)
    parser.add_argument("base_url")
    parser.add_argument("runs", type=int)
    parser.add_argument("--no-warm-up", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(_child(args.base_url, max(1, args.runs), warm=not args.no_warm_up))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
