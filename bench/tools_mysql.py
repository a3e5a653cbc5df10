"""``query_mysql`` end to end (one guard pass + pool + projection) against raw aiomysql in the
same run, the guard's own cost (typed pass included), and the memory of one call on a hostile
result."""

from __future__ import annotations

import resource
import time
import tracemalloc
from typing import Any

import aiomysql

from bench.common import Row, Sizes, judged, median, mysql_dsn, percentile
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.mysql import MysqlAdapter, parse_dsn
from sre_diag.tools.schemas import MysqlInput
from sre_diag.tools.sql.bounds import Schema, column_shape
from sre_diag.tools.sql.guard import Prepared, prepare_sql

__all__ = ["run_mysql"]

SECTION = "4 tools: query_mysql"
SQL = (
    "SELECT status, COUNT(*) AS n, SUM(amount_cents) AS cents FROM orders "
    "WHERE created_at >= '2026-11-28 10:00:00' AND created_at < '2026-11-28 11:00:00' "
    "GROUP BY status ORDER BY n DESC"
)


# The largest result the guard lets through, filled for real: 15 GROUP_CONCATs of a cross join,
# each cut by the server at 4096 bytes, per order (61 KB a row, 51 rows asked).
HOSTILE_SQL = (
    "SELECT "
    + ", ".join(f"GROUP_CONCAT(p.id SEPARATOR ' ') AS c{i}" for i in range(15))
    + " FROM orders o JOIN payments p GROUP BY o.id"
)
# The incident schema as information_schema reports it (for the guard-only figure).
_SCHEMA: Schema = {
    "orders": tuple(
        column_shape(name, kind, size)
        for name, kind, size in (
            ("id", "varchar", 128), ("user_id", "varchar", 128), ("amount_cents", "int", None),
            ("currency", "char", 12), ("status", "varchar", 128),
            ("created_at", "datetime", None), ("updated_at", "datetime", None),
        )
    ),
}  # fmt: skip


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


def _guard_ms(database: str, samples: int) -> float:
    """``prepare_sql`` as the adapter calls it: one guard pass, render, the parse fixed point."""
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        decision = prepare_sql(
            SQL, database=database, allowed_tables=frozenset(_SCHEMA), max_rows=50, schema=_SCHEMA
        )
        assert isinstance(decision, Prepared)
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


async def _hostile_memory(dsn: str, calls: int) -> tuple[float, float, bool]:
    """Peak traced allocation of one call, peak RSS growth over ``calls`` calls (MiB), and
    whether the result was cut at the byte cap."""
    adapter = MysqlAdapter(dsn, ())
    call = AdapterCall(
        tool_call_id="bench-h", run_id="bench", input=MysqlInput(sql=HOSTILE_SQL, purpose="h")
    )
    try:
        await adapter.invoke(call)  # pool, facts and imports first
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        result = await adapter.invoke(call)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        for _ in range(calls - 1):
            await adapter.invoke(call)
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        await adapter.aclose()
    cut = isinstance(result, Ready) and result.truncated
    return peak / 2**20, (rss_after - rss_before) / 1024, cut


async def run_mysql(sizes: Sizes, dsn: str | None = None) -> list[Row]:
    dsn = dsn or mysql_dsn()
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
    guard = _guard_ms(parts.database, 50)
    traced, rss_growth, cut = await _hostile_memory(dsn, 5)
    ratio = median(full) / median(raw)
    return [
        Row(
            SECTION, "adapter / raw aiomysql, ratio of medians", round(ratio, 3), "x", "<= 3",
            judged(ratio <= 3),
            {
                "adapter_p50_ms": round(median(full), 3),
                "adapter_p99_ms": round(percentile(full, 99), 3),
                "raw_p50_ms": round(median(raw), 3),
                "raw_p99_ms": round(percentile(raw, 99), 3),
                "raw_with_txn_and_caps_p50_ms": round(median(wrapped), 3),
                # prepare_sql: one guard pass + render + parse fixed point, in a thread
                "guard_p50_ms": round(guard, 3),
                "runs_each": len(full),
                "adapter_ready": ready,
            },
            "same GROUP BY, interleaved, one pool each; the guard runs once per statement and"
            " facts read (a repeated statement reuses its decision): guard_p50_ms is a new one",
        ),
        Row(
            SECTION, "peak memory of one call on a hostile result", round(traced, 2), "MiB",
            "<= 32", judged(traced <= 32 and rss_growth <= 32),
            {"rss_growth_over_5_calls_mib": round(rss_growth, 2), "cut_at_byte_cap": int(cut)},
            "15 GROUP_CONCATs x 4 KB per row, 51 rows asked; streamed, 1 MiB cap",
        ),
    ]  # fmt: skip
