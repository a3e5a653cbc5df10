"""Item 4a: ``query_mysql`` end to end (guard + pool + projection) against raw aiomysql."""

from __future__ import annotations

import os
import time
from typing import Any

import aiomysql

from bench.common import Row, Sizes, judged, median, percentile
from tools.base import AdapterCall, Ready
from tools.mysql import MysqlAdapter, parse_dsn
from tools.schemas import MysqlInput
from tools.sql_guard import Allowed, check_sql, limit_rows

__all__ = ["DEFAULT_DSN", "run_mysql"]

SECTION = "4 tools: query_mysql"
DEFAULT_DSN = os.environ.get(
    "BENCH_MYSQL_DSN", "mysql://diag_ro:diag_ro_demo@127.0.0.1:3306/diag_demo"
)
SQL = (
    "SELECT status, COUNT(*) AS n, SUM(amount_cents) AS cents FROM orders "
    "WHERE created_at >= '2026-11-28 10:00:00' AND created_at < '2026-11-28 11:00:00' "
    "GROUP BY status ORDER BY n DESC"
)


async def _raw(pool: Any, sql: str) -> int:
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(sql)
        rows = await cur.fetchall()
    return len(rows)


async def _raw_wrapped(pool: Any, sql: str) -> int:
    """Raw aiomysql with the adapter's statement sequence (read-only txn, caps, rollback)."""
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute("START TRANSACTION READ ONLY")
        await cur.execute(f"SET STATEMENT max_statement_time=5.000, sql_select_limit=51 FOR {sql}")
        rows = await cur.fetchmany(51)
        await cur.execute("ROLLBACK")
    return len(rows)


def _guard_ms(database: str, tables: frozenset[str], samples: int) -> float:
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        decision = check_sql(SQL, database=database, allowed_tables=tables)
        assert isinstance(decision, Allowed)
        check_sql(limit_rows(decision.expression, 50), database=database, allowed_tables=tables)
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


async def run_mysql(sizes: Sizes, dsn: str = DEFAULT_DSN) -> list[Row]:
    parts = parse_dsn(dsn)
    adapter = MysqlAdapter(dsn, ())
    pool = await aiomysql.create_pool(
        minsize=0, maxsize=4, host=parts.host, port=parts.port, user=parts.user,
        password=parts.password, db=parts.database, charset="utf8mb4", autocommit=True,
    )  # fmt: skip
    call = AdapterCall(tool_call_id="bench", run_id="bench", input=MysqlInput(sql=SQL, purpose="b"))
    full: list[float] = []
    raw: list[float] = []
    wrapped: list[float] = []
    ready = 0
    try:
        for n in range(sizes.mysql_runs + 5):
            for side in (0, 1, 2) if n % 2 == 0 else (2, 1, 0):
                started = time.perf_counter()
                if side == 0:
                    ready += int(isinstance(await adapter.invoke(call), Ready))
                elif side == 1:
                    await _raw(pool, SQL)
                else:
                    await _raw_wrapped(pool, SQL)
                elapsed = (time.perf_counter() - started) * 1000
                if n >= 5:
                    (full, raw, wrapped)[side].append(elapsed)
    finally:
        pool.close()
        await pool.wait_closed()
        await adapter.aclose()
    guard = _guard_ms(parts.database, frozenset({"orders", "payments"}), 50)
    ratio = median(full) / median(raw)
    return [
        Row(
            SECTION, "adapter / raw aiomysql, ratio of medians", round(ratio, 3), "x", "<= 1.2",
            judged(ratio <= 1.2),
            {
                "adapter_p50_ms": round(median(full), 3),
                "adapter_p99_ms": round(percentile(full, 99), 3),
                "raw_p50_ms": round(median(raw), 3),
                "raw_p99_ms": round(percentile(raw, 99), 3),
                "raw_with_txn_and_caps_p50_ms": round(median(wrapped), 3),
                "guard_p50_ms": round(guard, 3),
                "runs_each": len(full),
                "adapter_ready": ready,
            },
            "same GROUP BY on diag_demo.orders; interleaved; one pool each",
        ),
        Row(
            SECTION, "SQL guard (check + render + re-check)", round(guard, 3), "ms",
            note="share of the adapter p50 spent in sqlglot",
        ),
    ]  # fmt: skip
