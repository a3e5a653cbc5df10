"""The read-only boundary against the real MariaDB, with an account that CAN write (issue 9).

A team may point the bot at an account with more rights than it needs. With the read-only
requirement switched off on purpose (``require_read_only=False``), every attack class must
still be refused or contained by the guard and the protocol settings alone; afterwards the
tables, grants, files, named locks and process list are as before and no observation carries a
secret or a server fact. With the requirement on (the default), such an account executes
nothing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pymysql
import pytest

from sre_diag.tools.base import AdapterCall, AdapterErrorCode, AdapterResult, Failed, Ready
from sre_diag.tools.mysql import MysqlAdapter, parse_dsn
from sre_diag.tools.schemas import MysqlInput
from tests.mysql_db import MARIADB_SOLO, TEST_DATABASE, admin_dsn_for, run_name
from tests.tools.test_mysql_adapter import _checksums

pytestmark = MARIADB_SOLO

OTHER_DATABASE = run_name("diag_test_other")
RW_USER, RW_PASSWORD = run_name("diag_test_rw"), "diag-test-rw-Pw1"
VAULT_CANARY = "VAULT-CANARY-7f3a91"
STORED_CANARY = "STORED-NOW-CANARY"
LOCK_NAME = run_name("diag_boundary_lock")
OUTFILE = f"/tmp/diag_boundary_{uuid.uuid4().hex}.txt"


def _admin(database: str | None = None) -> pymysql.connections.Connection:
    params = parse_dsn(admin_dsn_for(database or "mysql"))
    return pymysql.connect(
        host=params.host, port=params.port, user=params.user, password=params.password,
        database=database, connect_timeout=5, autocommit=True,
    )  # fmt: skip


def _dsn(user: str, password: str) -> str:
    params = parse_dsn(admin_dsn_for(TEST_DATABASE))
    return f"mysql://{user}:{password}@{params.host}:{params.port}/{TEST_DATABASE}"


def _admin_rows(sql: str, database: str | None = None) -> list[tuple[object, ...]]:
    with _admin(database) as connection, connection.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


@pytest.fixture(scope="module")
def writable_dsn(mysql_ro_dsn: str) -> Iterator[str]:
    """An account with ALL on the test database, SELECT on another one and FILE; a stored
    function named like a built-in; a second database with a canary secret."""
    statements = [
        f"DROP DATABASE IF EXISTS {OTHER_DATABASE}",
        f"CREATE DATABASE {OTHER_DATABASE}",
        f"CREATE TABLE {OTHER_DATABASE}.vault (id INT PRIMARY KEY, secret_value VARCHAR(64))",
        f"INSERT INTO {OTHER_DATABASE}.vault VALUES (1, '{VAULT_CANARY}')",
        f"DROP FUNCTION IF EXISTS {TEST_DATABASE}.`now`",
        f"CREATE FUNCTION {TEST_DATABASE}.`now`() RETURNS VARCHAR(32) DETERMINISTIC "
        f"RETURN '{STORED_CANARY}'",
        f"DROP USER IF EXISTS '{RW_USER}'@'%'",
        f"CREATE USER '{RW_USER}'@'%' IDENTIFIED BY '{RW_PASSWORD}'",
        f"GRANT ALL PRIVILEGES ON {TEST_DATABASE}.* TO '{RW_USER}'@'%'",
        f"GRANT SELECT ON {OTHER_DATABASE}.* TO '{RW_USER}'@'%'",
        f"GRANT FILE, PROCESS ON *.* TO '{RW_USER}'@'%'",
    ]
    with _admin() as connection, connection.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    yield _dsn(RW_USER, RW_PASSWORD)
    with _admin() as connection, connection.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{RW_USER}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {OTHER_DATABASE}")
        cur.execute(f"DROP FUNCTION IF EXISTS {TEST_DATABASE}.`now`")


@pytest.fixture
async def rw_adapter(writable_dsn: str) -> AsyncIterator[MysqlAdapter]:
    adapter = MysqlAdapter(
        writable_dsn, (), require_read_only=False, require_column_grants=False,
        statement_timeout_seconds=2,
    )  # fmt: skip
    yield adapter
    await adapter.aclose()


def _call(sql: str) -> AdapterCall[MysqlInput]:
    return AdapterCall(
        tool_call_id="call-1", run_id="run-1", input=MysqlInput(sql=sql, purpose="boundary")
    )


def _server_facts() -> list[str]:
    (row,) = _admin_rows("SELECT VERSION(), @@datadir, @@hostname")
    secrets = _admin_rows("SELECT api_key, secret_token FROM api_credentials", TEST_DATABASE)
    facts = [str(value) for value in row if value and len(str(value)) > 3]
    facts += [str(value) for pair in secrets for value in pair]
    return [*facts, VAULT_CANARY, STORED_CANARY, RW_USER, "root:x:0:0", "pwned"]


# One class per group, several variants each; none names a payload the guard special-cases.
ATTACKS: dict[str, list[str]] = {
    "raw-rendered positions": [
        "SELECT CAST(id AS CHAR CHARACTER SET `utf8mb4) FROM orders; INSERT INTO orders (id) "
        "VALUES ('pwned'); -- `) FROM orders",
        "SELECT CONVERT(id USING `utf8mb4) AS x, LOAD_FILE('/etc/passwd') AS y FROM orders "
        "-- `) FROM orders",
        "SELECT TIMESTAMPDIFF(`SECOND, created_at, NOW()) AS d, (SELECT secret_value FROM "
        f"{OTHER_DATABASE}.vault) AS v FROM orders -- `, 1, 2) FROM orders",
        "SELECT DATE_ADD(created_at, INTERVAL 1 `DAY) INTO OUTFILE '" + OUTFILE + "' -- `) "
        "FROM orders",
        "SELECT CAST(amount_cents AS DECIMAL(`10), GET_LOCK('" + LOCK_NAME + "', 0) AS l, (1`, "
        "2)) FROM orders",
        "SELECT EXTRACT(`YEAR FROM created_at) AS y, VERSION() AS v FROM orders -- ` FROM "
        "created_at) FROM orders",
    ],
    "unicode comment differential": [
        f"SELECT id FROM orders --{space}; UPDATE orders SET status = 'pwned'\nLIMIT 1"
        for space in ("\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u200b")
    ]
    + [
        "SELECT id FROM orders WHERE id = 'x' --\u00a0 UNION SELECT secret_value FROM "
        f"{OTHER_DATABASE}.vault"
    ],
    "stacked statements": [
        "SELECT 1; INSERT INTO orders (id) VALUES ('pwned')",
        f"SELECT 1; SELECT GET_LOCK('{LOCK_NAME}', 0)",
        "SELECT id FROM orders LIMIT 1; UPDATE orders SET status = 'pwned'",
        f"SELECT 1; SELECT * FROM {OTHER_DATABASE}.vault",
        f"SELECT 1 ; SELECT 1 INTO OUTFILE '{OUTFILE}'",
    ],
    "unbounded work": [
        "SELECT REPLACE(REPLACE(REPLACE(REPLACE(id, 'o', 'oooooooo'), 'o', 'oooooooo'), 'o', "
        "'oooooooo'), 'o', 'oooooooo') AS x FROM orders",
        "SELECT LPAD(id, 100000000, 'x') AS x FROM orders",
        "WITH a AS (SELECT CONCAT(id, id, id, id, id, id, id, id) AS x FROM orders), "
        "b AS (SELECT x FROM a) SELECT LENGTH(x) FROM b",
        "SELECT id FROM orders WHERE status LIKE '%P%E%N%D%I%N%G%'",
    ],
    "secret laundering": [
        "SELECT (SELECT api_key FROM api_credentials LIMIT 1) AS note FROM orders LIMIT 1",
        "WITH c(note) AS (SELECT secret_token FROM api_credentials) SELECT note FROM c",
        "SELECT provider AS p FROM api_credentials UNION SELECT * FROM "
        "(SELECT api_key FROM api_credentials) AS x",
        "SELECT * FROM (SELECT * FROM api_credentials) AS t",
        "SELECT id FROM orders UNION ALL SELECT api_key FROM api_credentials",
    ],
    "name resolution": [
        "SELECT `now`() AS t",
        "SELECT `NOW` () AS t FROM orders LIMIT 1",
        f"SELECT {TEST_DATABASE}.now() AS t",
        f"SELECT `{TEST_DATABASE}`.`now`() AS t",
    ],
    "other databases and files": [
        f"SELECT * FROM {OTHER_DATABASE}.vault",
        f"SELECT secret_value FROM `{OTHER_DATABASE}`.`vault`",
        "SELECT LOAD_FILE('/etc/passwd') AS f",
        f"SELECT id FROM orders INTO OUTFILE '{OUTFILE}'",
        "SELECT * FROM information_schema.PROCESSLIST",
    ],
    "deep nesting": [
        "SELECT " + "(" * 1500 + "1" + ")" * 1500,
        "SELECT " + "- " * 1200 + "1",
        "SELECT " + "ABS(" * 300 + "1" + ")" * 300,
    ],
}


def _observation(result: AdapterResult) -> str:
    if isinstance(result, Ready):
        return json.dumps([item.model_dump(mode="json") for item in result.items])
    return json.dumps({"error_code": result.code.value})


@pytest.mark.parametrize("attack_class", sorted(ATTACKS))
async def test_every_attack_class_is_contained_with_a_writable_account(
    attack_class: str, rw_adapter: MysqlAdapter, writable_dsn: str
) -> None:
    before = _checksums()
    grants_before = _admin_rows(f"SHOW GRANTS FOR '{RW_USER}'@'%'")
    facts = _server_facts()
    for sql in ATTACKS[attack_class]:
        result = await rw_adapter.invoke(_call(sql[:4000]))
        assert isinstance(result, Failed), (sql, result)
        assert result.code is AdapterErrorCode.FORBIDDEN_QUERY, (sql, result)
        observation = _observation(result)
        assert not [fact for fact in facts if fact in observation], sql
    await rw_adapter.aclose()
    assert _checksums() == before
    assert _admin_rows(f"SHOW GRANTS FOR '{RW_USER}'@'%'") == grants_before
    assert not await asyncio.to_thread(Path(OUTFILE).exists)
    assert _admin_rows(f"SELECT IS_FREE_LOCK('{LOCK_NAME}')") == [(1,)]
    running = _admin_rows(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
        f"WHERE USER = '{RW_USER}' AND COMMAND <> 'Sleep'"
    )
    assert running == [(0,)]


async def test_benign_queries_still_answer_with_the_writable_account(
    rw_adapter: MysqlAdapter,
) -> None:
    result = await rw_adapter.invoke(_call("SELECT NOW() AS t, COUNT(*) AS n FROM orders"))
    assert isinstance(result, Ready)
    (row,) = result.items
    cells = row.model_dump(mode="json")["cells"]
    assert cells["t"] != STORED_CANARY and str(cells["t"])[:2] == "20"  # the built-in NOW()
    masked = await rw_adapter.invoke(_call("SELECT provider, api_key FROM api_credentials"))
    assert isinstance(masked, Ready)
    assert all(item.model_dump()["cells"]["api_key"] == "***" for item in masked.items)


async def test_the_adapters_connections_refuse_a_second_statement(
    rw_adapter: MysqlAdapter,
) -> None:
    """Multi-statements are off at the protocol level, not only in the guard."""
    assert isinstance(await rw_adapter.invoke(_call("SELECT 1 AS one")), Ready)
    before = _checksums()
    pool = await rw_adapter._ensure_pool(parse_dsn(_dsn(RW_USER, RW_PASSWORD)))
    for text in (
        "SELECT 1; SELECT 2",
        "SELECT 1; INSERT INTO orders (id) VALUES ('pwned')",
        f"SELECT 1;SELECT GET_LOCK('{LOCK_NAME}', 0)",
    ):
        conn = await rw_adapter._acquire(pool)
        try:
            async with conn.cursor() as cur:
                with pytest.raises(pymysql.err.ProgrammingError) as raised:
                    await cur.execute(text)
                assert raised.value.args[0] == 1064
        finally:
            conn.close()
            pool.release(conn)
    assert _checksums() == before
    assert _admin_rows(f"SELECT IS_FREE_LOCK('{LOCK_NAME}')") == [(1,)]


# --- the read-only requirement -------------------------------------------------------------------

ROLE_R, ROLE_W, ROLE_OUTER = (run_name(f"diag_test_role_{r}") for r in ("r", "w", "outer"))
_DB = f"{TEST_DATABASE}.*"
ROLE_ACCOUNTS: dict[str, tuple[list[str], bool]] = {
    # user: (grant statements with {u} for the account, expected read-only)
    "diag_test_u_select": ([f"GRANT SELECT ON {_DB} TO {{u}}"], True),
    "diag_test_u_view": ([f"GRANT SELECT, SHOW VIEW ON {_DB} TO {{u}}"], True),
    "diag_test_u_columns": (
        [f"GRANT SELECT (id, status) ON {TEST_DATABASE}.orders TO {{u}}"],
        True,
    ),
    "diag_test_u_role_r": (
        [f"GRANT {ROLE_R} TO {{u}}", f"SET DEFAULT ROLE {ROLE_R} FOR {{u}}"],
        True,
    ),
    "diag_test_u_insert": ([f"GRANT SELECT, INSERT ON {_DB} TO {{u}}"], False),
    "diag_test_u_grantopt": ([f"GRANT SELECT ON {_DB} TO {{u}} WITH GRANT OPTION"], False),
    "diag_test_u_global": (["GRANT SELECT, PROCESS ON *.* TO {u}"], False),
    "diag_test_u_file": (["GRANT FILE ON *.* TO {u}", f"GRANT SELECT ON {_DB} TO {{u}}"], False),
    "diag_test_u_role_w": (
        [f"GRANT SELECT ON {_DB} TO {{u}}", f"GRANT {ROLE_W} TO {{u}}"],
        False,
    ),
    "diag_test_u_nested": (
        [f"GRANT SELECT ON {_DB} TO {{u}}", f"GRANT {ROLE_OUTER} TO {{u}}"],
        False,
    ),
    "diag_test_u_admin": (
        [f"GRANT SELECT ON {_DB} TO {{u}}", f"GRANT {ROLE_R} TO {{u}} WITH ADMIN OPTION"],
        False,
    ),
}
ROLE_PASSWORD = "diag-test-role-Pw1"


@pytest.fixture(scope="module")
def role_accounts(mysql_ro_dsn: str) -> Iterator[dict[str, str]]:
    roles = [
        f"CREATE ROLE {ROLE_R}",
        f"GRANT SELECT ON {TEST_DATABASE}.* TO {ROLE_R}",
        f"CREATE ROLE {ROLE_W}",
        f"GRANT SELECT, UPDATE ON {TEST_DATABASE}.* TO {ROLE_W}",
        f"CREATE ROLE {ROLE_OUTER}",
        f"GRANT {ROLE_W} TO {ROLE_OUTER}",
    ]
    with _admin() as connection, connection.cursor() as cur:
        _drop_accounts(cur)
        for statement in roles:
            cur.execute(statement)
        for user, (grants, _) in ROLE_ACCOUNTS.items():
            account = f"'{run_name(user)}'@'%'"
            cur.execute(f"CREATE USER {account} IDENTIFIED BY '{ROLE_PASSWORD}'")
            for grant in grants:
                cur.execute(grant.format(u=account))
    yield {user: _dsn(run_name(user), ROLE_PASSWORD) for user in ROLE_ACCOUNTS}
    with _admin() as connection, connection.cursor() as cur:
        _drop_accounts(cur)


def _drop_accounts(cur: pymysql.cursors.Cursor) -> None:
    for user in ROLE_ACCOUNTS:
        cur.execute(f"DROP USER IF EXISTS '{run_name(user)}'@'%'")
    for role in (ROLE_OUTER, ROLE_W, ROLE_R):
        cur.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.parametrize("user", sorted(ROLE_ACCOUNTS))
async def test_read_only_requirement_follows_effective_privileges(
    user: str, role_accounts: dict[str, str]
) -> None:
    expected = ROLE_ACCOUNTS[user][1]
    # The secrecy verdict has its own tests (test_mysql_secrecy): these accounts read the
    # credentials table, which only the read-only requirement here is about.
    adapter = MysqlAdapter(role_accounts[user], (), require_column_grants=False)
    try:
        verdict = await adapter.read_only_verdict()
        assert verdict is not None and verdict.read_only is expected, verdict
        result = await adapter.invoke(_call("SELECT id, status FROM orders LIMIT 1"))
        if expected:
            assert isinstance(result, Ready), result
        else:
            assert result == Failed(AdapterErrorCode.NOT_CONFIGURED)
    finally:
        await adapter.aclose()


async def test_writable_account_executes_nothing_by_default(
    writable_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = MysqlAdapter(writable_dsn, ())
    try:
        for _ in range(3):
            result = await adapter.invoke(_call("SELECT COUNT(*) AS n FROM orders"))
            assert result == Failed(AdapterErrorCode.NOT_CONFIGURED)
    finally:
        await adapter.aclose()
    reasons = [r.getMessage() for r in caplog.records if "not read-only" in r.getMessage()]
    assert len(reasons) == 1 and RW_PASSWORD not in reasons[0]


async def test_setup_script_account_passes(mysql_ro_dsn: str) -> None:
    adapter = MysqlAdapter(mysql_ro_dsn, ())
    try:
        verdict = await adapter.read_only_verdict()
        assert verdict is not None and verdict.read_only
        assert isinstance(await adapter.invoke(_call("SELECT COUNT(*) AS n FROM orders")), Ready)
    finally:
        await adapter.aclose()


# --- the time cap -------------------------------------------------------------------------------


async def test_no_statement_outlives_its_cap_by_a_second(mysql_ro_dsn: str) -> None:
    ro_user = parse_dsn(mysql_ro_dsn).user
    slow = MysqlAdapter(mysql_ro_dsn, (), statement_timeout_seconds=1.0)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        result = await slow.invoke(
            _call(
                "SELECT COUNT(*) AS n FROM orders a, orders b, orders c, payments d "
                "WHERE a.amount_cents + b.amount_cents > c.amount_cents + d.latency_ms"
            )
        )
        assert result == Failed(AdapterErrorCode.TIMEOUT)
        assert loop.time() - started < 2.0
        running = _admin_rows(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            f"WHERE USER = '{ro_user}' AND COMMAND = 'Query'"
        )
        assert running == [(0,)]
    finally:
        await slow.aclose()
