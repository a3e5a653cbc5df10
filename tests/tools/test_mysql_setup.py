"""``sre-diag setup-mysql`` on the real MariaDB: grants the non-secret columns, destroys nothing.

Each test uses databases and accounts of this run's own names. "Unchanged" is checked byte for
byte: ``CHECKSUM TABLE`` of every table plus the ``SHOW GRANTS`` of every account involved, before
and after.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.mysql import MysqlAdapter, parse_dsn
from sre_diag.tools.schemas import MysqlInput
from tests.mysql_db import ADMIN_DSN, MARIADB, admin_dsn_for, run_name

pytestmark = MARIADB

SHOP = run_name("diag_setup_shop")
FRESH = run_name("diag_setup_fresh")
USER = run_name("diag_setup_ro")
OTHER = run_name("diag_setup_other")


def _admin() -> pymysql.connections.Connection:
    params = parse_dsn(admin_dsn_for("mysql"))
    return pymysql.connect(
        host=params.host, port=params.port, user=params.user, password=params.password,
        autocommit=True, connect_timeout=5,
    )  # fmt: skip


def _rows(sql: str) -> list[tuple[object, ...]]:
    with _admin() as connection, connection.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _do(*statements: str) -> None:
    with _admin() as connection, connection.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _cleanup() -> None:
    _do(
        f"DROP DATABASE IF EXISTS {SHOP}", f"DROP DATABASE IF EXISTS {FRESH}",
        *[f"DROP USER IF EXISTS '{u}'@'{h}'" for u in (USER, OTHER)
          for h in ("%", "localhost", "127.0.0.1")],
    )  # fmt: skip


@pytest.fixture
def shop(mysql_ro_dsn: str) -> Iterator[None]:
    """An existing business database with a secret column, and another team's account."""
    _cleanup()
    _do(
        f"CREATE DATABASE {SHOP}",
        f"CREATE TABLE {SHOP}.customers (id INT PRIMARY KEY, email_domain VARCHAR(64),"
        " Card_CVV VARCHAR(4), ssn VARCHAR(11), created_at DATETIME)",
        f"INSERT INTO {SHOP}.customers VALUES (1, 'example.org', '737', '078-05-1120',"
        " '2026-11-28 10:00:00')",
        f"CREATE TABLE {SHOP}.events (id INT PRIMARY KEY, kind VARCHAR(16), at DATETIME)",
        f"INSERT INTO {SHOP}.events VALUES (1, 'login', '2026-11-28 10:00:00')",
        f"CREATE USER '{OTHER}'@'%' IDENTIFIED BY 'other-team-Pw1'",
        f"GRANT SELECT, INSERT ON {SHOP}.* TO '{OTHER}'@'%'",
    )
    yield
    _cleanup()


def _setup(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "DIAG_STATE_DIR": str(tmp_path / "state"),
                   "XDG_STATE_HOME": str(tmp_path / "xdg")}  # fmt: skip
    environment.pop("DIAG_MYSQL_ALLOWED_TABLES", None)
    environment.pop("DIAG_MYSQL_SECRET_COLUMNS", None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sre_diag", "setup-mysql", "--admin-dsn", ADMIN_DSN,
         "--ro-user", USER, *args],
        capture_output=True, text=True, timeout=120, check=False, env=environment,
    )  # fmt: skip


def _snapshot(database: str, users: tuple[str, ...]) -> tuple[object, ...]:
    tables = [str(r[0]) for r in _rows(
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}'"
    )]  # fmt: skip
    sums = _rows("CHECKSUM TABLE " + ", ".join(f"{database}.{t}" for t in tables)) if tables else []
    grants = []
    for user, host in _rows("SELECT User, Host FROM mysql.user WHERE User IN ("
                            + ", ".join(f"'{u}'" for u in users) + ") ORDER BY User, Host"):
        grants.append(sorted(_rows(f"SHOW GRANTS FOR '{user}'@'{host}'")))
    return tuple(sorted(sums)), tuple(grants)


def _column_grants(user: str) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for host, table, column in _rows(
        "SELECT Host, Table_name, Column_name FROM mysql.columns_priv WHERE User = "
        f"'{user}'"
    ):
        found.setdefault((str(host), str(table)), set()).add(str(column))
    return found


def test_print_sql_executes_nothing(shop: None, tmp_path: Path) -> None:
    before = _snapshot(SHOP, (USER, OTHER))
    done = _setup(tmp_path, "--database", SHOP, "--print-sql")
    assert done.returncode == 0, done.stderr
    assert "GRANT SELECT (`id`, `email_domain`, `created_at`) ON" in done.stdout
    assert "CREATE USER" in done.stdout and "'%'" not in done.stdout
    assert "Card_CVV" not in done.stdout and "`ssn`" not in done.stdout
    assert _snapshot(SHOP, (USER, OTHER)) == before
    assert not _rows(f"SELECT 1 FROM mysql.user WHERE User = '{USER}'")
    fresh = _setup(tmp_path, "--database", FRESH, "--demo-data", "--print-sql")
    assert fresh.returncode == 0 and "CREATE TABLE orders" in fresh.stdout
    assert not _rows(f"SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{FRESH}'")


def test_demo_data_never_touches_an_existing_database(shop: None, tmp_path: Path) -> None:
    before = _snapshot(SHOP, (USER, OTHER))
    refused = _setup(tmp_path, "--database", SHOP, "--demo-data")
    assert refused.returncode == 2 and "nothing was changed" in refused.stderr
    assert refused.stdout == ""
    assert _snapshot(SHOP, (USER, OTHER)) == before
    assert not _rows(f"SELECT 1 FROM mysql.user WHERE User = '{USER}'")
    _do(f"CREATE DATABASE {FRESH}")  # empty, but not ours either
    assert _setup(tmp_path, "--database", FRESH, "--demo-data").returncode == 2
    assert not _rows(f"SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{FRESH}'")
    wide = _setup(tmp_path, "--database", run_name("diag_setup_x"), "--demo-data",
                  "--ro-host", "%")  # fmt: skip
    assert wide.returncode == 2 and "no % host" in wide.stderr


def test_existing_database_gets_column_grants_and_keeps_everything(
    shop: None, tmp_path: Path
) -> None:
    before = _snapshot(SHOP, (OTHER,))
    done = _setup(tmp_path, "--database", SHOP)
    assert done.returncode == 0, done.stderr
    assert _snapshot(SHOP, (OTHER,)) == before  # data and the other team's grants
    hosts = {str(r[0]) for r in _rows(f"SELECT Host FROM mysql.user WHERE User = '{USER}'")}
    assert hosts == {"localhost", "127.0.0.1"}
    grants = _column_grants(USER)
    for host in hosts:
        assert grants[(host, "customers")] == {"id", "email_domain", "created_at"}
        assert grants[(host, "events")] == {"id", "kind", "at"}
    assert not _rows(f"SELECT 1 FROM mysql.tables_priv WHERE User = '{USER}' AND Table_priv <> ''")
    # the password was generated and kept with mode 0600; the DSN works and passes both verdicts
    (stored,) = tmp_path.rglob("*.password")  # in the state folder (DIAG_STATE_DIR)
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stored.read_text(encoding="utf-8").strip() in done.stdout
    # A second run keeps the password and adds nothing; a wider grant it did not make stays.
    _do(f"GRANT SELECT ON {SHOP}.events TO '{USER}'@'127.0.0.1'")
    again = _setup(tmp_path, "--database", SHOP)
    assert again.returncode == 0 and again.stdout == done.stdout
    assert _rows(
        f"SELECT Table_priv FROM mysql.tables_priv WHERE User = '{USER}' AND Host = '127.0.0.1'"
        " AND Table_name = 'events'"
    ) == [("Select",)]


async def test_the_printed_dsn_reads_only_what_was_granted(shop: None, tmp_path: Path) -> None:
    done = _setup(tmp_path, "--database", SHOP, env={"DIAG_MYSQL_SECRET_COLUMNS": "events.kind"})
    assert done.returncode == 0, done.stderr
    assert _column_grants(USER)[("127.0.0.1", "events")] == {"id", "at"}
    adapter = MysqlAdapter(done.stdout.strip(), (), secret_columns=("events.kind",))
    try:
        verdicts = await adapter.verdicts()
        assert verdicts is not None
        grants, secrecy = verdicts
        assert grants is not None and grants.read_only and secrecy.passes
        call = AdapterCall("c1", "r1", MysqlInput(sql="SELECT * FROM customers", purpose="t"))
        result = await adapter.invoke(call)
        assert isinstance(result, Ready), result
        assert "078-05-1120" not in str(result) and "737" not in str(result)
    finally:
        await adapter.aclose()


def test_an_explicit_password_is_used_and_not_stored(shop: None, tmp_path: Path) -> None:
    done = _setup(tmp_path, "--database", SHOP, "--ro-password", "explicit-Pw-123")
    assert done.returncode == 0, done.stderr
    assert ":explicit-Pw-123@" in done.stdout
    assert not list(tmp_path.rglob("*.password"))
