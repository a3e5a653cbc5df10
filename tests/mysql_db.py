"""Real-MariaDB fixture for the ``query_mysql`` and CLI tests (no mocks).

The session fixture runs ``scripts/setup_mysql.py --demo-data`` into the database
``diag_test_<RUN>`` (dropped first if an earlier session of this run left it) with the read-only
account ``diag_test_ro_<RUN>`` on ``localhost`` / ``127.0.0.1`` and this suite's own password
(column-level grants: every non-secret column of the bundled incident's business tables). The
admin DSN comes from ``DIAG_TEST_MYSQL_ADMIN_DSN`` (default ``mysql://root@127.0.0.1:3306``). An
unreachable server FAILS the tests on purpose: a skipped security suite is indistinguishable
from a passing one in CI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql
import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = os.environ.setdefault("DIAG_TEST_RUN", uuid.uuid4().hex[:6])
if not re.fullmatch(r"[0-9a-f]{6}", RUN):  # it is a LIKE pattern when the run's names are dropped
    raise RuntimeError(f"DIAG_TEST_RUN must be 6 hex digits (a run's own token), not {RUN!r}")
"""This pytest run's token (its xdist workers inherit it from the environment): every database,
account, role and lock name a test creates on the shared server carries it, so two checkouts
never touch each other's. Within one run, the tests that use MariaDB share one xdist group."""


def run_name(base: str) -> str:
    """``base`` made this run's own (``diag_test`` → ``diag_test_3fa9c1``)."""
    return f"{base}_{RUN}"


MARIADB = [pytest.mark.xdist_group("mariadb")]
"""The marks of every test module that touches the shared MariaDB server (``pytestmark =
MARIADB``; tests using ``mysql_ro_dsn`` get them from the root conftest too): one xdist group,
so they run one after another on one worker of the parallel phase — they share this run's
``diag_test_<RUN>`` and its audit tables (a test holds ``LOCK TABLES`` on one)."""

MARIADB_SOLO = [pytest.mark.solo, *MARIADB]
"""The marks of the MariaDB modules that run in ``scripts/test``'s serial phase instead
(``-m solo``, after the parallel one): those that change server-wide state for a moment (a
grant to PUBLIC, SET GLOBAL) and those that time the server's own kill checks or a sink's
bounds to within a second, which a busy CPU would blur."""

TEST_DATABASE = run_name("diag_test")
TEST_RO_USER = run_name("diag_test_ro")
TEST_RO_PASSWORD = "diag-test-ro-Pw1"
ADMIN_DSN = os.environ.get("DIAG_TEST_MYSQL_ADMIN_DSN", "mysql://root@127.0.0.1:3306")


def admin_dsn_for(database: str) -> str:
    """The admin DSN pointed at ``database`` (for tests that need more than the RO grants)."""
    parts = urlsplit(ADMIN_DSN)
    return f"{parts.scheme}://{parts.netloc}/{database}"


def _admin_connection() -> pymysql.connections.Connection[Any]:
    parts = urlsplit(ADMIN_DSN)
    return pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""), autocommit=True, connect_timeout=5,
    )  # fmt: skip


def _drop_test_database() -> None:
    """This run's own database only (``--demo-data`` creates it anew)."""
    try:
        connection = _admin_connection()
    except pymysql.MySQLError:
        return  # the setup below reports the unreachable server
    with connection, connection.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{TEST_DATABASE}`")


@pytest.fixture(scope="session")
def mysql_ro_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Build ``diag_test_<RUN>`` once per session and return the read-only account's DSN."""
    _drop_test_database()
    state = tmp_path_factory.mktemp("setup-state")
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "setup_mysql.py"),
            "--admin-dsn",
            ADMIN_DSN,
            "--database",
            TEST_DATABASE,
            "--ro-user",
            TEST_RO_USER,
            "--ro-password",
            TEST_RO_PASSWORD,
            "--demo-data",
        ],
        env={**os.environ, "DIAG_STATE_DIR": str(state), "XDG_STATE_HOME": str(state)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        pytest.fail(
            "MariaDB/MySQL test server not usable (set DIAG_TEST_MYSQL_ADMIN_DSN or start "
            f"mariadbd): {completed.stderr.strip() or completed.stdout.strip()}",
            pytrace=False,
        )
    return completed.stdout.strip()


def drop_run_objects() -> None:
    """Drop every database, account and role this run created (their names end in ``_<RUN>``);
    called once when the run ends (by the xdist controller, not by each worker)."""
    try:
        connection = _admin_connection()
    except pymysql.MySQLError:
        return  # no server: the tests that needed it failed already
    pattern = f"%\\_{RUN}"
    with connection, connection.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE %s", (pattern,))
        for (name,) in cur.fetchall():
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute("SELECT user, host, is_role FROM mysql.user WHERE user LIKE %s", (pattern,))
        for user, host, is_role in cur.fetchall():
            if is_role == "Y":
                cur.execute(f"DROP ROLE IF EXISTS `{user}`")
            else:
                cur.execute(f"DROP USER IF EXISTS `{user}`@`{host}`")
