"""Read queries an SRE asks during an incident: at least 95 % of them run, on the real MariaDB.

The bundled incident schema, set up by ``setup-mysql`` (column-level grants), the default
allowlist, the default limits. Each statement is one a person would type; none was shaped to
the guard. A refused one is listed in the failure message with its refusal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready
from sre_diag.tools.mysql import MysqlAdapter
from sre_diag.tools.schemas import MysqlInput, MysqlRow
from tests.mysql_db import MARIADB

pytestmark = MARIADB

INCIDENT_QUERIES = [
    # counts per minute / per bucket
    "SELECT DATE_FORMAT(created_at, '%Y-%m-%d %H:%i') AS minute, COUNT(*) AS n FROM payments"
    " WHERE status = 'FAILED' GROUP BY minute ORDER BY minute",
    "SELECT DATE_FORMAT(created_at, '%H:%i') AS minute, COUNT(*) AS failures FROM payments"
    " WHERE created_at BETWEEN '2026-11-28 10:00:00' AND '2026-11-28 10:45:00'"
    " AND status = 'FAILED' GROUP BY 1 ORDER BY 1",
    "SELECT FLOOR(UNIX_TIMESTAMP(created_at) / 300) * 300 AS bucket, COUNT(*) AS n"
    " FROM payments GROUP BY bucket ORDER BY bucket",
    "SELECT HOUR(created_at) AS h, COUNT(*) AS orders FROM orders GROUP BY h ORDER BY h",
    "SELECT DATE(created_at) AS day, status, COUNT(*) AS n FROM orders GROUP BY day, status",
    # top error codes
    "SELECT error_code, COUNT(*) AS n FROM payments WHERE error_code IS NOT NULL"
    " GROUP BY error_code ORDER BY n DESC LIMIT 5",
    "SELECT provider, error_code, COUNT(*) AS n FROM payments GROUP BY provider, error_code"
    " ORDER BY n DESC LIMIT 10",
    "SELECT COALESCE(error_code, 'none') AS code, COUNT(*) AS n FROM payments GROUP BY code",
    "SELECT error_code, MIN(created_at) AS first_seen, MAX(created_at) AS last_seen"
    " FROM payments WHERE error_code IS NOT NULL GROUP BY error_code",
    "SELECT COUNT(*) AS n FROM payments WHERE LOWER(error_code) LIKE '%timeout%'",
    "SELECT COUNT(*) AS n FROM payments WHERE error_code LIKE 'DB_POOL%'",
    "SELECT status, COUNT(*) AS n FROM payments WHERE error_code IN ('DB_POOL_TIMEOUT',"
    " 'CARD_DECLINED') GROUP BY status",
    # latency percentiles by ORDER BY ... LIMIT
    "SELECT latency_ms FROM payments WHERE created_at >= '2026-11-28 10:05:00'"
    " ORDER BY latency_ms DESC LIMIT 10",
    "SELECT id, latency_ms FROM payments ORDER BY latency_ms DESC LIMIT 1 OFFSET 5",
    "SELECT AVG(latency_ms) AS avg_ms, MAX(latency_ms) AS max_ms, MIN(latency_ms) AS min_ms"
    " FROM payments WHERE status = 'FAILED'",
    "SELECT provider, ROUND(AVG(latency_ms), 1) AS avg_ms, COUNT(*) AS n FROM payments"
    " GROUP BY provider ORDER BY avg_ms DESC",
    "SELECT latency_ms FROM (SELECT latency_ms, ROW_NUMBER() OVER (ORDER BY latency_ms) AS rn,"
    " COUNT(*) OVER () AS total FROM payments) AS ranked WHERE rn = CEIL(0.99 * total)",
    "SELECT CASE WHEN latency_ms < 100 THEN 'fast' WHEN latency_ms < 1000 THEN 'slow'"
    " ELSE 'very slow' END AS bucket, COUNT(*) AS n FROM payments GROUP BY bucket",
    "SELECT SUM(CASE WHEN status = 'FAILED' THEN 1 ELSE 0 END) / COUNT(*) AS failure_rate"
    " FROM payments",
    # joins of orders and payments
    "SELECT o.id, o.status, p.status AS payment_status, p.error_code FROM orders o"
    " JOIN payments p ON p.order_id = o.id WHERE o.id = 'ord_10245'",
    "SELECT o.status, COUNT(DISTINCT o.id) AS orders, COUNT(p.id) AS payments FROM orders o"
    " LEFT JOIN payments p ON p.order_id = o.id GROUP BY o.status",
    "SELECT o.id, o.amount_cents, p.latency_ms FROM orders o JOIN payments p"
    " ON p.order_id = o.id WHERE p.status = 'FAILED' ORDER BY p.latency_ms DESC LIMIT 20",
    "SELECT COUNT(*) AS stuck FROM orders o WHERE o.status = 'PAYMENT_PENDING'"
    " AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.status = 'OK')",
    "SELECT o.currency, SUM(o.amount_cents) / 100 AS total FROM orders o JOIN payments p"
    " ON p.order_id = o.id WHERE p.error_code = 'DB_POOL_TIMEOUT' GROUP BY o.currency",
    "SELECT id, status FROM orders WHERE id IN (SELECT order_id FROM payments"
    " WHERE error_code = 'DB_POOL_TIMEOUT') LIMIT 10",
    # date arithmetic
    "SELECT COUNT(*) AS n FROM payments WHERE created_at >= '2026-11-28 10:30:00'"
    " - INTERVAL 30 MINUTE",
    "SELECT TIMESTAMPDIFF(SECOND, MIN(created_at), MAX(created_at)) AS span_s FROM payments"
    " WHERE status = 'FAILED'",
    "SELECT id, TIMESTAMPDIFF(MINUTE, created_at, updated_at) AS minutes FROM orders"
    " ORDER BY minutes DESC LIMIT 5",
    "SELECT DATE_SUB('2026-11-28 10:30:00', INTERVAL 1 HOUR) AS since",
    "SELECT COUNT(*) AS n FROM orders WHERE created_at BETWEEN DATE_SUB('2026-11-28 10:30:00',"
    " INTERVAL 25 MINUTE) AND '2026-11-28 10:30:00'",
    "SELECT service, deployed_at, TIMEDIFF('2026-11-28 10:05:00', deployed_at) AS before_onset"
    " FROM deployments ORDER BY deployed_at DESC LIMIT 5",
    # deployments and pool metrics
    "SELECT service, version, deployed_at, deployed_by, change_summary FROM deployments"
    " ORDER BY deployed_at DESC LIMIT 10",
    "SELECT CONCAT(service, '@', version) AS release, deployed_at FROM deployments"
    " ORDER BY deployed_at",
    "SELECT service, LEFT(change_summary, 60) AS summary FROM deployments ORDER BY deployed_at",
    "SELECT service, SUBSTRING_INDEX(change_summary, ';', 1) AS first_change FROM deployments",
    "SELECT * FROM deployments WHERE service = 'payment-api' ORDER BY deployed_at DESC",
    "SELECT service, MAX(waiting) AS max_waiting, MAX(in_use) AS max_in_use, MAX(pool_size)"
    " AS pool FROM db_pool_metrics GROUP BY service",
    "SELECT sampled_at, in_use, pool_size, waiting FROM db_pool_metrics"
    " WHERE service = 'payment-api' AND waiting > 0 ORDER BY sampled_at LIMIT 20",
    "SELECT service, ROUND(100 * AVG(in_use / pool_size), 1) AS pct_busy FROM db_pool_metrics"
    " GROUP BY service",
    "SELECT d.service, d.version, (SELECT COUNT(*) FROM payments p WHERE p.created_at"
    " >= d.deployed_at AND p.status = 'FAILED') AS failures_after FROM deployments d",
    "WITH failed AS (SELECT order_id, created_at FROM payments WHERE status = 'FAILED')"
    " SELECT COUNT(*) AS n, MIN(created_at) AS first_at FROM failed",
    "WITH per_min AS (SELECT DATE_FORMAT(created_at, '%H:%i') AS m, COUNT(*) AS n FROM payments"
    " GROUP BY m) SELECT m, n FROM per_min ORDER BY n DESC LIMIT 5",
    "SELECT status FROM orders UNION SELECT status FROM payments",
    "SELECT UPPER(currency) AS currency, COUNT(*) AS n FROM orders GROUP BY currency",
]


@pytest.fixture
async def adapter(mysql_ro_dsn: str) -> AsyncIterator[MysqlAdapter]:
    instance = MysqlAdapter(mysql_ro_dsn, ())
    yield instance
    await instance.aclose()


async def test_at_least_95_percent_of_incident_queries_run(adapter: MysqlAdapter) -> None:
    assert len(INCIDENT_QUERIES) >= 44
    refused: list[tuple[str, object]] = []
    for n, sql in enumerate(INCIDENT_QUERIES):
        call = AdapterCall(f"call-{n}", "run-incident", MysqlInput(sql=sql, purpose="incident"))
        result = await adapter.invoke(call)
        if not isinstance(result, Ready):
            refused.append((sql, result))
    passed = len(INCIDENT_QUERIES) - len(refused)
    assert passed / len(INCIDENT_QUERIES) >= 0.95, refused


async def test_the_cut_and_recased_text_is_the_redacted_text(adapter: MysqlAdapter) -> None:
    for sql, name in (
        ("SELECT LEFT(change_summary, 12) AS s FROM deployments ORDER BY id LIMIT 3", "s"),
        ("SELECT SUBSTRING_INDEX(change_summary, ';', 1) AS s FROM deployments ORDER BY id", "s"),
        ("SELECT CONCAT(service, '@', version) AS s FROM deployments ORDER BY id", "s"),
    ):
        call = AdapterCall("call-cut", "run-cut", MysqlInput(sql=sql, purpose="cut"))
        result = await adapter.invoke(call)
        assert isinstance(result, Ready), (sql, result)
        for row in result.items:
            assert isinstance(row, MysqlRow) and isinstance(row.cells[name], str)
            if "LEFT" in sql:
                assert len(str(row.cells[name])) <= 12
            if "SUBSTRING_INDEX" in sql:
                assert ";" not in str(row.cells[name])
    # Grouped by the cut, the cut would run on the server: judged as written, refused.
    grouped = "SELECT LEFT(change_summary, 5) AS s, COUNT(*) AS n FROM deployments GROUP BY s"
    call = AdapterCall("call-g", "run-g", MysqlInput(sql=grouped, purpose="grouped"))
    assert await adapter.invoke(call) == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
