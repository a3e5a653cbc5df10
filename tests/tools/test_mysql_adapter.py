"""``MysqlAdapter`` against the real MariaDB built by ``scripts/setup_mysql.py`` (no mocks)."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import time
from collections.abc import AsyncIterator

import pymysql
import pytest

from sre_diag.tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    Failed,
    Ready,
    ToolName,
)
from sre_diag.tools.mysql import MASK, TRUNCATION_MARK, MysqlAdapter, parse_dsn
from sre_diag.tools.schemas import MysqlInput, MysqlRow
from tests.mysql_db import MARIADB_SOLO, REPO, TEST_DATABASE, admin_dsn_for
from tests.tools.sql_corpus import BENIGN, HOSTILE

pytestmark = MARIADB_SOLO

SEED_DIR = REPO / "examples" / "incident" / "mysql"
ALL_TABLES = ("orders", "payments", "deployments", "db_pool_metrics", "api_credentials")


def _call(sql: str, n: int = 1) -> AdapterCall[MysqlInput]:
    return AdapterCall(
        tool_call_id=f"call-{n}", run_id="run-1", input=MysqlInput(sql=sql, purpose="test")
    )


async def _invoke(adapter: MysqlAdapter, sql: str) -> AdapterResult:
    return await adapter.invoke(_call(sql))


async def _rows(adapter: MysqlAdapter, sql: str) -> list[MysqlRow]:
    result = await _invoke(adapter, sql)
    assert isinstance(result, Ready), (sql, result)
    return [item for item in result.items if isinstance(item, MysqlRow)]


def _checksums() -> dict[str, int]:
    """``CHECKSUM TABLE`` of every table of the test database, as the admin sees them."""
    params = parse_dsn(admin_dsn_for(TEST_DATABASE))
    connection = pymysql.connect(
        host=params.host, port=params.port, user=params.user, password=params.password,
        database=params.database, connect_timeout=5,
    )  # fmt: skip
    with connection, connection.cursor() as cur:
        cur.execute("SHOW FULL TABLES")
        tables = [str(row[0]) for row in cur.fetchall()]
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in tables))
        return {str(name).split(".")[-1]: int(value) for name, value in cur.fetchall()}


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def adapter(mysql_ro_dsn: str) -> AsyncIterator[MysqlAdapter]:
    """The documented default: RO account, empty allowlist (= tables the account can see)."""
    instance = MysqlAdapter(mysql_ro_dsn, ())
    yield instance
    await instance.aclose()


async def test_hostile_corpus_is_refused_and_changes_nothing(adapter: MysqlAdapter) -> None:
    before = _checksums()
    assert set(before) == set(ALL_TABLES)
    outcomes = [await _invoke(adapter, sql) for sql, _ in HOSTILE if sql.strip("; ")]
    assert len(outcomes) >= 100
    for (sql, _), outcome in zip([h for h in HOSTILE if h[0].strip("; ")], outcomes, strict=True):
        assert outcome == Failed(AdapterErrorCode.FORBIDDEN_QUERY), sql
    assert _checksums() == before


async def test_hostile_corpus_is_refused_with_explicit_allowlist(mysql_ro_dsn: str) -> None:
    explicit = MysqlAdapter(mysql_ro_dsn, ("orders", "payments", "deployments", "db_pool_metrics"))
    try:
        for sql, _ in HOSTILE:
            if sql.strip("; "):
                assert await _invoke(explicit, sql) == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
    finally:
        await explicit.aclose()


async def test_benign_corpus_runs_on_the_server(adapter: MysqlAdapter) -> None:
    assert len(BENIGN) >= 30
    for sql in BENIGN:
        result = await _invoke(adapter, sql)
        assert isinstance(result, Ready), (sql, result)


async def test_incident_facts_are_queryable(adapter: MysqlAdapter) -> None:
    rows = await _rows(
        adapter,
        "SELECT o.id, o.status, p.error_code FROM orders o JOIN payments p ON p.order_id = o.id "
        "WHERE o.id IN ('ord_10231', 'ord_10232', 'ord_10245') ORDER BY o.id",
    )
    assert {row.cells["id"] for row in rows} == {"ord_10231", "ord_10232", "ord_10245"}
    assert {row.cells["status"] for row in rows} == {"PAYMENT_PENDING"}
    assert {row.cells["error_code"] for row in rows} == {"DB_POOL_TIMEOUT"}
    deploy = await _rows(
        adapter,
        "SELECT deployed_at, deployed_by, change_summary FROM deployments "
        "WHERE service = 'payment-api' AND version = 'v2.14.0'",
    )
    assert deploy[0].cells["deployed_at"] == "2026-11-28T10:02:00"
    assert deploy[0].cells["deployed_by"] == "ci-bot"


async def test_backslash_trick_stays_a_literal_on_the_server(adapter: MysqlAdapter) -> None:
    rows = await _rows(
        adapter, "SELECT id FROM orders WHERE id = 'x\\' UNION SELECT 1 FROM orders -- '"
    )
    assert rows == []


async def test_server_time_cap_stops_a_slow_allowed_query(mysql_ro_dsn: str) -> None:
    slow = MysqlAdapter(mysql_ro_dsn, (), statement_timeout_seconds=1.0)
    try:
        started = time.monotonic()
        result = await _invoke(
            slow,
            "SELECT COUNT(*) FROM orders a, orders b, orders c, payments d "
            "WHERE a.amount_cents + b.amount_cents > c.amount_cents + d.latency_ms",
        )
        elapsed = time.monotonic() - started
        assert result == Failed(AdapterErrorCode.TIMEOUT)
        assert 0.9 <= elapsed < 2.5, elapsed
        # The connection pool is still healthy afterwards.
        assert isinstance(await _invoke(slow, "SELECT COUNT(*) FROM orders"), Ready)
    finally:
        await slow.aclose()


async def test_not_configured_without_dsn() -> None:
    for dsn in (None, "", "not a dsn", "mysql://host-only"):
        unset = MysqlAdapter(dsn, ())
        assert unset.tool is ToolName.QUERY_MYSQL
        assert await _invoke(unset, "SELECT 1") == Failed(AdapterErrorCode.NOT_CONFIGURED)
        await unset.aclose()
        assert unset.pools_created == 0


async def test_unavailable_on_closed_port() -> None:
    closed = MysqlAdapter(
        f"mysql://diag:pw@127.0.0.1:{_closed_port()}/diag_test", (), connect_timeout_seconds=2.0
    )
    try:
        assert await _invoke(closed, "SELECT 1") == Failed(AdapterErrorCode.UNAVAILABLE)
    finally:
        await closed.aclose()


async def test_unavailable_on_wrong_password(mysql_ro_dsn: str) -> None:
    dsn = parse_dsn(mysql_ro_dsn)
    wrong = MysqlAdapter(f"mysql://{dsn.user}:wrong@{dsn.host}:{dsn.port}/{dsn.database}", ())
    try:
        assert await _invoke(wrong, "SELECT 1") == Failed(AdapterErrorCode.UNAVAILABLE)
    finally:
        await wrong.aclose()


async def test_truncation_uses_the_extra_row(mysql_ro_dsn: str) -> None:
    small = MysqlAdapter(mysql_ro_dsn, (), max_rows=5)
    try:
        many = await _invoke(small, "SELECT id FROM orders ORDER BY id")
        assert isinstance(many, Ready) and many.truncated and len(many.items) == 5
        exact = await _invoke(small, "SELECT id FROM orders ORDER BY id LIMIT 5")
        assert isinstance(exact, Ready) and not exact.truncated and len(exact.items) == 5
        huge = await _invoke(small, "SELECT id FROM orders ORDER BY id LIMIT 100000")
        assert isinstance(huge, Ready) and huge.truncated and len(huge.items) == 5
    finally:
        await small.aclose()


async def test_secret_columns_are_masked(mysql_ro_dsn: str) -> None:  # builds the database
    # The RO account has no grant on api_credentials, so this one test uses the admin account.
    admin = MysqlAdapter(
        admin_dsn_for(TEST_DATABASE), ALL_TABLES, require_read_only=False,
        require_column_grants=False,
    )  # fmt: skip
    try:
        starred = await _rows(admin, "SELECT * FROM api_credentials ORDER BY id")
        assert [set(row.cells) for row in starred] == [{"id", "provider", "rotated_at"}] * 2
        rows = await _rows(
            admin, "SELECT id, provider, API_KEY, Secret_Token FROM api_credentials ORDER BY id"
        )
        assert len(rows) == 2
        for row in rows:
            assert row.cells["API_KEY"] == MASK and row.cells["Secret_Token"] == MASK
            assert row.cells["provider"] in {"stripe", "adyen"}
        laundered = await _invoke(admin, "SELECT api_key AS note FROM api_credentials")
        assert laundered == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
    finally:
        await admin.aclose()


async def test_credential_table_is_forbidden_by_guard_and_by_grants(mysql_ro_dsn: str) -> None:
    default = MysqlAdapter(mysql_ro_dsn, ())
    # Misconfigured allowlist: the guard lets it through, the server's grants do not.
    misconfigured = MysqlAdapter(mysql_ro_dsn, ALL_TABLES)
    try:
        sql = "SELECT provider FROM api_credentials"
        assert await _invoke(default, sql) == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
        assert await _invoke(misconfigured, sql) == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
    finally:
        await default.aclose()
        await misconfigured.aclose()


async def test_server_rejections_map_to_invalid_input(adapter: MysqlAdapter) -> None:
    # With column-level grants the server answers an unknown column like a column it denies.
    assert await _invoke(adapter, "SELECT no_such_column FROM orders") == Failed(
        AdapterErrorCode.FORBIDDEN_QUERY
    )
    for sql in (
        "SELECT id FROM orders o JOIN payments p ON p.order_id = o.id WHERE id = 'x'",
        "SELECT id FROM orders UNION SELECT id, status FROM orders",
    ):
        assert await _invoke(adapter, sql) == Failed(AdapterErrorCode.INVALID_INPUT), sql


async def test_cells_are_json_scalars_bounded_and_redacted(mysql_ro_dsn: str) -> None:
    narrow = MysqlAdapter(mysql_ro_dsn, (), max_cell_chars=40)
    try:
        (row,) = await _rows(
            narrow,
            "SELECT SUM(amount_cents) AS total, AVG(latency_ms) AS avg_ms, "
            "MAX(payments.created_at) AS latest, "
            "TIMEDIFF('2026-11-28 10:41:00', '2026-11-28 10:02:00') AS outage, "
            "CAST('abc' AS BINARY) AS raw, GROUP_CONCAT(orders.id) AS ids, "
            "CONCAT('password=', 'hunter2hunter2') AS note "
            "FROM payments JOIN orders ON orders.id = payments.order_id",
        )
        cells = row.cells
        assert isinstance(cells["total"], int)
        assert isinstance(cells["avg_ms"], float)
        assert str(cells["latest"]).startswith("2026-11-28T")
        assert cells["outage"] == "00:39:00"
        assert cells["raw"] == "<binary 3 bytes>"
        ids = str(cells["ids"])
        assert ids.endswith(TRUNCATION_MARK) and len(ids) == 40 + len(TRUNCATION_MARK)
        assert "hunter2" not in str(cells["note"])
    finally:
        await narrow.aclose()


async def test_duplicate_column_names_keep_every_cell(adapter: MysqlAdapter) -> None:
    (row,) = await _rows(
        adapter,
        "SELECT o.id, p.id FROM orders o JOIN payments p ON p.order_id = o.id "
        "WHERE o.id = 'ord_10245'",
    )
    assert row.cells == {"id": "ord_10245", "id#2": "pay_20264"}


async def test_pool_created_once_bounded_and_closed(mysql_ro_dsn: str) -> None:
    pooled = MysqlAdapter(mysql_ro_dsn, (), pool_max=2)
    assert pooled.pools_created == 0 and not pooled.pool_open
    results = await asyncio.gather(
        *(pooled.invoke(_call(
            f"SELECT COUNT(*) AS n FROM orders WHERE created_at > '2026-11-28 0{i}:00'", i
        )) for i in range(8))
    )  # fmt: skip
    assert all(isinstance(result, Ready) for result in results)
    assert pooled.pools_created == 1 and pooled.pool_open
    await pooled.aclose()
    assert not pooled.pool_open
    await pooled.aclose()  # idempotent


def test_checked_in_seed_sql_matches_the_generator() -> None:
    """``seed.sql`` is for humans with the mysql client; it must equal what setup loads."""
    spec = importlib.util.spec_from_file_location("seed_under_test", SEED_DIR / "seed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (SEED_DIR / "seed.sql").read_text(encoding="utf-8") == module.render_sql()
