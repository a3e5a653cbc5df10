"""Item 4d: what the catalogues in the tool descriptions cost (issue 13 item 2).

Each run asks :class:`sre_diag.harness.catalog.Catalogues` for the three descriptions. Between
refreshes
that is a clock read and a tuple (``cached``); every ``DIAG_CATALOG_REFRESH_SECONDS`` the stale
catalogues are re-read by the adapters (``refresh``): the runbook titles of the bundled
runbooks, the service folders of a generated log history, and the allowed tables with their
columns from the local MariaDB (the demo's read-only account; skipped when unreachable).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, Sizes, median, mysql_dsn, percentile
from sre_diag.contract.prompts import prompt_set
from sre_diag.harness.catalog import Catalogues
from sre_diag.resources import BUNDLED_KNOWLEDGE
from sre_diag.tools.base import ToolName
from sre_diag.tools.knowledge import KnowledgeAdapter
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.mysql import MysqlAdapter

__all__ = ["run_catalogue"]

SECTION = "4 tools: catalogues"


def _log_folders(root: Path, services: int) -> Path:
    for n in range(services):
        folder = root / f"service-{n:03d}" / "2026-11-28"
        folder.mkdir(parents=True)
        (folder / "10.jsonl").write_text("", encoding="utf-8")
    return root


async def _timed(catalogues: Catalogues, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await catalogues.descriptions()
        samples.append((time.perf_counter() - started) * 1000.0)
    return samples


async def _reachable(mysql: MysqlAdapter) -> bool:
    try:
        return await mysql.read_only_verdict() is not None
    except Exception:
        return False


async def run_catalogue(sizes: Sizes) -> list[Row]:
    """p50/p99 of one run's descriptions: cached, and with every catalogue re-read."""
    runs = max(20, sizes.mysql_runs // 4)
    with tempfile.TemporaryDirectory(prefix="bench-catalogue-") as tmp:
        adapters: dict[ToolName, Any] = {
            ToolName.LOOKUP_KNOWLEDGE: KnowledgeAdapter(
                BUNDLED_KNOWLEDGE, Path(tmp) / "cache", rescan_interval_seconds=0
            ),
            ToolName.QUERY_LOGS: LogsAdapter(JsonlLogSource(_log_folders(Path(tmp) / "logs", 100))),
            ToolName.QUERY_MYSQL: MysqlAdapter(mysql_dsn(), (), connect_timeout_seconds=2.0),
        }
        try:
            refreshing = Catalogues(adapters, prompt_set(), refresh_seconds=0)
            await refreshing.descriptions()  # warm: index build, pool, first schema read
            refresh = await _timed(refreshing, runs)
            cached = Catalogues(adapters, prompt_set(), refresh_seconds=3600)
            await cached.descriptions()
            steady = await _timed(cached, runs * 10)
            mysql_listed = await _reachable(adapters[ToolName.QUERY_MYSQL])
        finally:
            await adapters[ToolName.QUERY_MYSQL].aclose()
    note = "MySQL schema read" if mysql_listed else "MySQL unreachable: its catalogue skipped"
    return [
        Row(SECTION, "descriptions per run, cached (p50)", round(median(steady), 4), "ms",
            detail={"p99_ms": round(percentile(steady, 99), 4), "runs": len(steady)}),
        Row(SECTION, "descriptions per run, all catalogues re-read (p50)",
            round(median(refresh), 2), "ms",
            detail={"p99_ms": round(percentile(refresh, 99), 2), "runs": len(refresh),
                    "services": 100}, note=note),
    ]  # fmt: skip
