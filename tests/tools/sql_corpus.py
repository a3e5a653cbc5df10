"""Statement corpora shared by the guard tests and the real-server adapter tests.

``HOSTILE`` pairs each statement a manipulated model might send with the guard's expected
refusal reason (``None`` where several reasons are equally right); ``BENIGN`` are diagnostic
SELECTs on the incident schema that must pass the guard and run on the server.
"""

from __future__ import annotations

from sre_diag.tools.sql.bounds import ColumnShape, Schema, ValueKind
from sre_diag.tools.sql.guard import RefusalReason as R
from tests.mysql_db import TEST_DATABASE


def _text(name: str, chars: int) -> ColumnShape:
    return ColumnShape(name, ValueKind.TEXT, chars * 4)  # utf8mb4


def _number(name: str) -> ColumnShape:
    return ColumnShape(name, ValueKind.NUMBER, 40)


def _time(name: str) -> ColumnShape:
    return ColumnShape(name, ValueKind.TEMPORAL, 64)


# The incident schema (examples/incident/mysql/schema.sql) as the adapter reads it from
# information_schema.COLUMNS; the guard-only tests type-check against it.
INCIDENT_SCHEMA: Schema = {
    "orders": (
        _text("id", 32), _text("user_id", 32), _number("amount_cents"), _text("currency", 3),
        _text("status", 32), _time("created_at"), _time("updated_at"),
    ),
    "payments": (
        _text("id", 32), _text("order_id", 32), _text("provider", 16), _text("status", 16),
        _text("error_code", 64), _number("latency_ms"), _time("created_at"),
    ),
    "deployments": (
        _number("id"), _text("service", 64), _text("version", 32), _time("deployed_at"),
        _text("deployed_by", 64), _text("change_summary", 500),
    ),
    "db_pool_metrics": (
        _text("service", 64), _time("sampled_at"), _number("pool_size"), _number("in_use"),
        _number("waiting"),
    ),
    "api_credentials": (
        _text("id", 32), _text("provider", 16), _text("api_key", 128),
        _text("secret_token", 128), _time("rotated_at"),
    ),
}  # fmt: skip

HOSTILE: list[tuple[str, R | None]] = [
    # --- writes, DDL, admin statements -------------------------------------------------------
    ("DROP TABLE orders", R.NOT_SELECT),
    ("drop table orders", R.NOT_SELECT),
    ("DELETE FROM orders", R.NOT_SELECT),
    ("UPDATE orders SET status = 'PAID'", R.NOT_SELECT),
    ("INSERT INTO orders (id) VALUES ('x')", R.INTO_CLAUSE),
    ("REPLACE INTO deployments (id) VALUES (1)", None),
    ("TRUNCATE TABLE payments", R.NOT_SELECT),
    ("ALTER TABLE orders ADD COLUMN x INT", R.NOT_SELECT),
    ("CREATE TABLE x AS SELECT * FROM orders", R.NOT_SELECT),
    ("CREATE TEMPORARY TABLE t (a INT)", R.NOT_SELECT),
    ("RENAME TABLE orders TO orders_old", None),
    ("GRANT ALL ON *.* TO 'diag_ro'@'%'", None),
    ("SET GLOBAL max_connections = 1", None),
    ("SET autocommit = 0", None),
    ("LOCK TABLES orders WRITE", None),
    ("UNLOCK TABLES", None),
    ("FLUSH TABLES WITH READ LOCK", None),
    ("KILL 1", None),
    ("SHOW TABLES", R.NOT_SELECT),
    ("SHOW GRANTS", R.NOT_SELECT),
    ("DESCRIBE orders", None),
    ("EXPLAIN SELECT * FROM orders", None),
    ("CALL mysql.sys_exec('id')", None),
    ("DO SLEEP(5)", None),
    ("HANDLER orders OPEN", None),
    ("LOAD DATA INFILE '/etc/passwd' INTO TABLE orders", None),
    ("PREPARE s FROM 'DROP TABLE orders'", None),
    ("EXECUTE s", None),
    ("USE mysql", None),
    ("BEGIN", None),
    ("COMMIT", None),
    ("VALUES (1), (2)", None),
    ("", R.EMPTY),
    ("   ;  ", None),
    # --- stacked queries ---------------------------------------------------------------------
    ("SELECT 1; DROP TABLE orders", R.MULTIPLE_STATEMENTS),
    ("SELECT * FROM orders;DELETE FROM payments", R.MULTIPLE_STATEMENTS),
    ("SELECT 1;\nSELECT 2", R.MULTIPLE_STATEMENTS),
    ("SELECT id FROM orders WHERE id = 'a'; UPDATE orders SET status='X'", R.MULTIPLE_STATEMENTS),
    ("SELECT 1;;SELECT 2", R.MULTIPLE_STATEMENTS),
    ("SELECT 1 /* c */; SHOW DATABASES", None),
    # --- writes hidden in CTEs / subqueries --------------------------------------------------
    ("WITH x AS (DELETE FROM orders RETURNING id) SELECT * FROM x", R.NOT_SELECT),
    ("WITH x AS (UPDATE orders SET status='X' RETURNING id) SELECT * FROM x", None),
    ("WITH x AS (INSERT INTO orders (id) VALUES ('y') RETURNING id) SELECT * FROM x", None),
    ("SELECT * FROM (DELETE FROM orders RETURNING *) AS d", None),
    ("WITH c AS (SELECT * FROM mysql.user) SELECT * FROM c", None),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM api_credentials) SELECT * FROM a", None),
    # --- system schemas, other databases, disallowed tables ----------------------------------
    ("SELECT * FROM mysql.user", R.SYSTEM_SCHEMA),
    ("SELECT User, Password FROM mysql.user", R.SYSTEM_SCHEMA),
    ("SELECT * FROM `mysql`.`user`", R.SYSTEM_SCHEMA),
    ("SELECT * FROM MYSQL.USER", R.SYSTEM_SCHEMA),
    ("SELECT * FROM mysql . user", R.SYSTEM_SCHEMA),
    ("SELECT id FROM orders UNION SELECT user FROM mysql.user", R.SYSTEM_SCHEMA),
    ("SELECT id FROM orders UNION ALL SELECT authentication_string FROM mysql.user", None),
    ("SELECT id FROM orders WHERE id IN (SELECT user FROM mysql.user)", R.SYSTEM_SCHEMA),
    ("SELECT * FROM orders o JOIN mysql.db d ON 1=1", R.SYSTEM_SCHEMA),
    ("SELECT * FROM information_schema.tables", R.SYSTEM_SCHEMA),
    ("SELECT table_name FROM INFORMATION_SCHEMA.COLUMNS", R.SYSTEM_SCHEMA),
    ("SELECT * FROM information_schema.processlist", R.SYSTEM_SCHEMA),
    ("SELECT * FROM performance_schema.events_statements_history", R.SYSTEM_SCHEMA),
    ("SELECT * FROM sys.version", R.SYSTEM_SCHEMA),
    ("SELECT EXISTS(SELECT 1 FROM mysql.user WHERE user='root')", R.SYSTEM_SCHEMA),
    ("SELECT mysql.user.password FROM orders", R.SYSTEM_SCHEMA),
    ("SELECT * FROM other_db.orders", R.OTHER_DATABASE),
    ("SELECT * FROM diag_test2.orders", R.OTHER_DATABASE),
    ("SELECT * FROM api_credentials", R.TABLE_NOT_ALLOWED),
    ("SELECT api_key FROM api_credentials", None),
    ("SELECT * FROM `api_credentials`", R.TABLE_NOT_ALLOWED),
    ("SELECT * FROM API_CREDENTIALS", R.TABLE_NOT_ALLOWED),
    ("SELECT COUNT(*) FROM orders o, api_credentials c", R.TABLE_NOT_ALLOWED),
    ("SELECT * FROM orders WHERE id IN (SELECT id FROM api_credentials)", R.TABLE_NOT_ALLOWED),
    ("SELECT * FROM (SELECT * FROM api_credentials) AS x", None),
    (
        "SELECT * FROM (WITH api_credentials AS (SELECT 1) SELECT * FROM api_credentials) a, "
        "api_credentials",
        None,
    ),
    ("SELECT * FROM secrets", R.TABLE_NOT_ALLOWED),
    ("SELECT * FROM seq_1_to_100000000", R.TABLE_NOT_ALLOWED),
    ("TABLE api_credentials", R.TABLE_NOT_ALLOWED),
    ("SELECT * FROM cat.db.orders", None),
    # --- functions that sleep, lock, read files, leak or execute -----------------------------
    ("SELECT SLEEP(10)", R.FORBIDDEN_FUNCTION),
    ("SELECT sleep(10) FROM orders", R.FORBIDDEN_FUNCTION),
    ("SELECT * FROM orders WHERE id = 'x' OR SLEEP(5)", R.FORBIDDEN_FUNCTION),
    ("SELECT * FROM orders WHERE SLEEP(1) = 0 LIMIT 1", R.FORBIDDEN_FUNCTION),
    ("SELECT BENCHMARK(100000000, MD5('a'))", R.FORBIDDEN_FUNCTION),
    ("SELECT LOAD_FILE('/etc/passwd')", R.FORBIDDEN_FUNCTION),
    ("SELECT LOAD_FILE(0x2f6574632f706173737764)", None),
    ("SELECT GET_LOCK('diag', 10)", R.FORBIDDEN_FUNCTION),
    ("SELECT RELEASE_LOCK('diag')", R.FORBIDDEN_FUNCTION),
    ("SELECT RELEASE_ALL_LOCKS()", R.FORBIDDEN_FUNCTION),
    ("SELECT IS_FREE_LOCK('diag')", R.FORBIDDEN_FUNCTION),
    ("SELECT IS_USED_LOCK('diag')", R.FORBIDDEN_FUNCTION),
    ("SELECT MASTER_POS_WAIT('log.000001', 4)", R.FORBIDDEN_FUNCTION),
    ("SELECT SOURCE_POS_WAIT('log.000001', 4)", R.FORBIDDEN_FUNCTION),
    ("SELECT WAIT_FOR_EXECUTED_GTID_SET('uuid:1', 10)", R.FORBIDDEN_FUNCTION),
    ("SELECT UUID_SHORT()", R.FORBIDDEN_FUNCTION),
    ("SELECT sys_exec('rm -rf /')", R.FORBIDDEN_FUNCTION),
    ("SELECT sys_eval('id')", R.FORBIDDEN_FUNCTION),
    ("SELECT NAME_CONST('a', 1)", R.FORBIDDEN_FUNCTION),
    ("SELECT my_udf(id) FROM orders", R.FORBIDDEN_FUNCTION),
    (f"SELECT {TEST_DATABASE}.now()", R.UNSUPPORTED_SYNTAX),
    ("SELECT USER()", R.FORBIDDEN_FUNCTION),
    ("SELECT CURRENT_USER()", R.FORBIDDEN_FUNCTION),
    ("SELECT VERSION()", R.FORBIDDEN_FUNCTION),
    ("SELECT DATABASE()", R.FORBIDDEN_FUNCTION),
    ("SELECT CONNECTION_ID()", R.FORBIDDEN_FUNCTION),
    ("SELECT EXTRACTVALUE(1, CONCAT(0x7e, (SELECT 1)))", None),
    ("SELECT UPDATEXML(1, CONCAT(0x7e, USER()), 1)", None),
    ("SELECT CHAR(83, 76, 69, 69, 80)", R.FORBIDDEN_FUNCTION),
    ("SELECT UNHEX('534c454550')", R.FORBIDDEN_FUNCTION),
    ("SELECT REPEAT('a', 100000000)", R.FORBIDDEN_FUNCTION),
    ("SELECT RPAD('a', 100000000, 'b')", R.FORBIDDEN_FUNCTION),
    ("SELECT NEXTVAL(s)", R.FORBIDDEN_FUNCTION),
    ("SELECT LAST_INSERT_ID()", R.FORBIDDEN_FUNCTION),
    ("SELECT JSON_ARRAYAGG(id) FROM orders", R.FORBIDDEN_FUNCTION),
    ("SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (a INT PATH '$')) AS jt", None),
    # --- INTO, locking reads, procedures -----------------------------------------------------
    ("SELECT * FROM orders INTO OUTFILE '/tmp/orders.csv'", R.INTO_CLAUSE),
    ("SELECT * INTO OUTFILE '/tmp/x' FROM orders", R.INTO_CLAUSE),
    ("SELECT id FROM orders INTO DUMPFILE '/tmp/x'", R.INTO_CLAUSE),
    ("SELECT id INTO @a FROM orders LIMIT 1", None),
    ("SELECT id FROM orders LIMIT 1 INTO @a", None),
    ("SELECT * FROM orders FOR UPDATE", R.LOCKING_READ),
    ("SELECT * FROM orders for update nowait", R.LOCKING_READ),
    ("SELECT * FROM orders LOCK IN SHARE MODE", R.LOCKING_READ),
    ("SELECT * FROM orders FOR SHARE", R.LOCKING_READ),
    ("SELECT * FROM orders WHERE id IN (SELECT order_id FROM payments FOR UPDATE)", None),
    ("SELECT * FROM orders FOR UPDATE SKIP LOCKED", None),
    ("SELECT * FROM orders PROCEDURE ANALYSE()", None),
    # --- variables and assignment ------------------------------------------------------------
    ("SELECT @@version", R.VARIABLE),
    ("SELECT @@global.secure_file_priv", R.VARIABLE),
    ("SELECT @a", R.VARIABLE),
    ("SELECT @a := 1", R.VARIABLE),
    ("SELECT id, @n := @n + 1 FROM orders", R.VARIABLE),
    ("SELECT * FROM orders WHERE id = @id", R.VARIABLE),
    ("SELECT `@@version`, @@hostname FROM orders", R.VARIABLE),
    ("SELECT * FROM orders WHERE id = ?", R.VARIABLE),
    # --- executable comments, hints, comment tricks ------------------------------------------
    ("SELECT /*! SLEEP(5) */ 1", R.COMMENT_HINT),
    ("SELECT 1 /*!50000 , SLEEP(5) */", R.COMMENT_HINT),
    ("SELECT * FROM orders /*!UNION SELECT * FROM mysql.user*/", R.COMMENT_HINT),
    ("SELECT /*+ MAX_EXECUTION_TIME(100000) */ * FROM orders", R.COMMENT_HINT),
    ("SELECT /*+ SET_VAR(sql_mode='') */ 1", R.COMMENT_HINT),
    ("SELECT 1 /*M! , SLEEP(5) */", R.COMMENT_HINT),
    ("SELECT 1 /*m!100000 , SLEEP(5) */", R.COMMENT_HINT),
    ("SELECT 1 -- x\n; DROP TABLE orders", None),
    ("SELECT 1 # comment\n; DELETE FROM orders", None),
    ("SEL/**/ECT * FROM orders", None),
    ("SELECT * FROM orders WHERE 1=1 UN/**/ION SELECT * FROM mysql.user", None),
    ("SELECT 1 -- trailing comment", R.COMMENT_HINT),
    ("SELECT id /* inline comment */ FROM orders LIMIT 1;", R.COMMENT_HINT),
    # --- case and quoting tricks --------------------------------------------------------------
    ("sElEcT * fRoM MySqL.UsEr", R.SYSTEM_SCHEMA),
    ("SeLeCt SlEeP(3)", R.FORBIDDEN_FUNCTION),
    ("SELECT * FROM `information_schema`.`USER_PRIVILEGES`", R.SYSTEM_SCHEMA),
    ("SELECT * FROM orders WHERE id = '' UNION SELECT * FROM mysql.user -- '", None),
    ("SELECT 0x53454c454354 FROM mysql.user", None),
    ("SELECT _binary'x' FROM performance_schema.threads", None),
    # --- secret-column laundering (api_credentials is never allowlisted here anyway) ---------
    ("SELECT api_key AS note FROM api_credentials", None),
    ("SELECT id FROM orders WHERE user_id IN (SELECT secret_token FROM api_credentials)", None),
    # --- garbage ------------------------------------------------------------------------------
    ("SELECT", None),
    ("SELECT * FROM", None),
    ("SELECT 'unterminated", None),
    ("((((", None),
    ("\x00SELECT 1", None),
]

# Diagnostic queries an SRE (or a well-behaved model) would run against the incident schema.
BENIGN: list[str] = [
    "SELECT 1",
    "SELECT NOW()",
    "SELECT NOW() FROM DUAL",
    "SELECT * FROM deployments ORDER BY deployed_at",
    "SELECT service, version, deployed_at, deployed_by, change_summary FROM deployments "
    "WHERE deployed_at BETWEEN '2026-11-28 00:00:00' AND '2026-11-28 23:59:59' "
    "ORDER BY deployed_at",
    "SELECT * FROM deployments WHERE service = 'payment-api' ORDER BY deployed_at DESC LIMIT 5",
    "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY n DESC",
    "SELECT status, error_code, COUNT(*) AS n FROM payments GROUP BY status, error_code",
    "SELECT DATE_FORMAT(created_at, '%Y-%m-%d %H:%i') AS minute, COUNT(*) AS failures "
    "FROM payments WHERE status = 'FAILED' AND error_code = 'DB_POOL_TIMEOUT' "
    "GROUP BY minute ORDER BY minute",
    "SELECT MIN(created_at) AS first_failure, MAX(created_at) AS last_failure FROM payments "
    "WHERE error_code = 'DB_POOL_TIMEOUT'",
    "SELECT HOUR(created_at) AS h, COUNT(*) AS orders, SUM(status = 'PAYMENT_PENDING') AS pending "
    "FROM orders GROUP BY h ORDER BY h",
    "SELECT provider, status, COUNT(*) AS n, ROUND(AVG(latency_ms), 1) AS avg_ms "
    "FROM payments GROUP BY provider, status",
    "SELECT o.id, o.status, p.status AS payment_status, p.error_code, p.latency_ms "
    "FROM orders o JOIN payments p ON p.order_id = o.id "
    "WHERE o.id IN ('ord_10231', 'ord_10232', 'ord_10245')",
    "SELECT * FROM orders WHERE id = 'ord_10231'",
    "SELECT * FROM payments WHERE order_id = 'ord_10245'",
    "SELECT COUNT(*) FROM orders WHERE status = 'PAYMENT_PENDING' "
    "AND created_at >= '2026-11-28 10:05:00' AND created_at < '2026-11-28 10:41:00'",
    "SELECT sampled_at, pool_size, in_use, waiting FROM db_pool_metrics "
    "WHERE service = 'payment-api' AND sampled_at BETWEEN '2026-11-28 09:55:00' "
    "AND '2026-11-28 10:45:00' ORDER BY sampled_at",
    "SELECT service, MAX(waiting) AS max_waiting, MAX(in_use) AS max_in_use "
    "FROM db_pool_metrics GROUP BY service",
    "SELECT pool_size, COUNT(*) AS samples, AVG(waiting) AS avg_waiting FROM db_pool_metrics "
    "WHERE service = 'payment-api' GROUP BY pool_size",
    "WITH failures AS (SELECT order_id, COUNT(*) AS attempts FROM payments "
    "WHERE status = 'FAILED' GROUP BY order_id) "
    "SELECT attempts, COUNT(*) AS orders FROM failures GROUP BY attempts ORDER BY attempts",
    "SELECT d.service, d.version, d.deployed_at, "
    "(SELECT COUNT(*) FROM payments p WHERE p.error_code = 'DB_POOL_TIMEOUT' "
    "AND p.created_at BETWEEN d.deployed_at AND DATE_ADD(d.deployed_at, INTERVAL 1 HOUR)) "
    "AS timeouts_next_hour FROM deployments d ORDER BY d.deployed_at",
    "SELECT TIMESTAMPDIFF(MINUTE, '2026-11-28 10:02:00', MIN(created_at)) AS minutes_to_first "
    "FROM payments WHERE error_code = 'DB_POOL_TIMEOUT'",
    "SELECT id, status, created_at FROM orders WHERE status = 'PAYMENT_PENDING' "
    "ORDER BY created_at LIMIT 20",
    "SELECT currency, SUM(amount_cents) AS cents FROM orders WHERE status = 'PAYMENT_PENDING' "
    "GROUP BY currency",
    "SELECT CASE WHEN created_at < '2026-11-28 10:05:00' THEN 'before' "
    "WHEN created_at < '2026-11-28 10:41:00' THEN 'during' ELSE 'after' END AS phase, "
    "COUNT(*) AS payments, SUM(status = 'FAILED') AS failed FROM payments GROUP BY phase",
    "SELECT provider, COUNT(*) AS n FROM payments WHERE error_code = 'DB_POOL_TIMEOUT' "
    "GROUP BY provider",
    "SELECT COALESCE(error_code, 'none') AS code, COUNT(*) AS n FROM payments GROUP BY code",
    "SELECT IF(latency_ms > 5000, 'slow', 'fast') AS bucket, COUNT(*) FROM payments "
    "GROUP BY bucket",
    "SELECT GROUP_CONCAT(id ORDER BY id SEPARATOR ',') AS ids FROM orders "
    "WHERE status = 'PAYMENT_PENDING' AND created_at BETWEEN '2026-11-28 10:10:00' "
    "AND '2026-11-28 10:15:00'",
    # Issue 21: text columns leave whole (no LOWER/SUBSTRING over them), glued only by spaces.
    "SELECT status AS s, currency AS c, CONCAT(id, ' / ', user_id) AS k2 FROM orders LIMIT 3",
    "SELECT change_summary AS summary FROM deployments WHERE change_summary LIKE '%pool%'",
    "SELECT id FROM orders WHERE id IN (SELECT order_id FROM payments "
    "WHERE error_code = 'DB_POOL_TIMEOUT') ORDER BY id LIMIT 10",
    "SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id "
    "AND p.status = 'FAILED') LIMIT 5",
    "SELECT 'payments' AS t, COUNT(*) AS n FROM payments UNION ALL "
    "SELECT 'orders', COUNT(*) FROM orders",
    "SELECT order_id, latency_ms, ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY created_at) "
    "AS attempt FROM payments WHERE error_code = 'DB_POOL_TIMEOUT' LIMIT 10",
    "SELECT sampled_at, waiting, LAG(waiting) OVER (ORDER BY sampled_at) AS prev "
    "FROM db_pool_metrics WHERE service = 'payment-api' "
    "AND sampled_at >= '2026-11-28 10:00:00' LIMIT 10",
    "SELECT DATE(created_at) AS day, COUNT(*) FROM orders GROUP BY day",
    f"SELECT * FROM {TEST_DATABASE}.deployments WHERE version = 'v2.14.0'",
    "SELECT `id`, `status` FROM `orders` WHERE `id` = 'ord_10232'",
    "SELECT o.status, COUNT(DISTINCT o.id) AS orders, COUNT(p.id) AS attempts FROM orders o "
    "LEFT JOIN payments p ON p.order_id = o.id GROUP BY o.status",
    "SELECT MAX(latency_ms) AS p_max, MIN(latency_ms) AS p_min, STDDEV(latency_ms) AS sd "
    "FROM payments WHERE status = 'SUCCEEDED'",
    "SELECT DATE_FORMAT(sampled_at, '%H:%i') AS t, waiting FROM db_pool_metrics "
    "WHERE service = 'payment-api' AND waiting > 0 ORDER BY sampled_at LIMIT 60",
    "(SELECT id FROM orders ORDER BY id LIMIT 1)",
    "SELECT id FROM orders WHERE created_at > DATE_SUB('2026-11-28 12:00:00', INTERVAL 2 HOUR) "
    "AND status <> 'PAID' ORDER BY id",
    "SELECT EXTRACT(HOUR FROM deployed_at) AS h, service FROM deployments",
    "SELECT id FROM orders LIMIT 1;",
    "SELECT status FROM orders WHERE id = \"ord_10231\"",
    "SELECT CAST(amount_cents AS DECIMAL(12, 2)) / 100 AS amount, "
    "CAST(id AS CHAR CHARACTER SET utf8mb4) AS k FROM orders LIMIT 3",
    "SELECT TIMESTAMPDIFF(SECOND, MIN(created_at), MAX(created_at)) AS span_s, "
    "EXTRACT(MINUTE FROM MIN(created_at)) AS m FROM payments",
    # --- issue 21: typed pass (bounds, text only whole) keeps these working ----------------
    "SELECT FLOOR(UNIX_TIMESTAMP(created_at) / 60) * 60 AS bucket, COUNT(*) AS n FROM payments "
    "WHERE created_at >= '2026-11-28 10:00:00' GROUP BY bucket ORDER BY bucket",
    "SELECT DATE_FORMAT(created_at, '%H:00') AS hour, status, COUNT(*) AS n FROM orders "
    "GROUP BY hour, status ORDER BY hour, status",
    "SELECT p.provider, COUNT(*) AS n, MAX(p.latency_ms) AS worst FROM payments p "
    "JOIN orders o ON o.id = p.order_id WHERE o.status IN ('PAYMENT_PENDING', 'FAILED') "
    "GROUP BY p.provider HAVING COUNT(*) > 0",
    "SELECT service, sampled_at, waiting, AVG(waiting) OVER (PARTITION BY service ORDER BY "
    "sampled_at ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS avg5 FROM db_pool_metrics "
    "WHERE sampled_at BETWEEN '2026-11-28 10:00:00' AND '2026-11-28 10:30:00' LIMIT 20",
    "SELECT COUNT(DISTINCT status) AS statuses, COUNT(DISTINCT currency) AS currencies "
    "FROM orders",
    "SELECT DISTINCT provider FROM payments ORDER BY provider",
    "SELECT id, LENGTH(change_summary) AS len, CHAR_LENGTH(change_summary) AS chars "
    "FROM deployments ORDER BY len DESC LIMIT 3",
    "SELECT MIN(error_code) AS first_code, MAX(error_code) AS last_code, "
    "COALESCE(MAX(error_code), 'none') AS code FROM payments",
    "SELECT CONCAT_WS(', ', service, version, deployed_by) AS who FROM deployments",
    "SELECT GROUP_CONCAT(DISTINCT error_code ORDER BY error_code SEPARATOR ', ') AS codes "
    "FROM payments WHERE status = 'FAILED'",
    "SELECT status, CASE WHEN latency_ms >= 5000 THEN 'slow' ELSE 'ok' END AS speed "
    "FROM payments WHERE created_at > DATE_SUB('2026-11-28 12:00:00', INTERVAL 30 MINUTE) "
    "LIMIT 5",
    "SELECT * FROM orders o JOIN payments p ON p.order_id = o.id WHERE o.id = 'ord_10245'",
    "SELECT o.* FROM orders o WHERE o.status = 'PAYMENT_PENDING' ORDER BY 1 LIMIT 3",
    "SELECT status, COUNT(*) FROM orders GROUP BY 1 ORDER BY 2 DESC",
    "SELECT id FROM orders WHERE id LIKE 'ord_102%' AND status NOT IN ('PAID') LIMIT 5",
    "SELECT IFNULL(error_code, '-') AS code, TRIM(provider) AS provider FROM payments LIMIT 5",
    "SELECT CAST(latency_ms AS CHAR(12)) AS ms, LEFT(created_at, 10) AS day FROM payments "
    "LIMIT 3",
]
