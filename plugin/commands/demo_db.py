"""Where ``sre-diag demo`` finds its database: a local MariaDB/MySQL, found without settings.

In order, within :data:`WAIT_SECONDS` in all:

1. ``DIAG_MYSQL_DSN`` when set (used as it is);
2. the demo account ``diag_ro`` on ``127.0.0.1:3306`` with the password ``setup-mysql`` kept in
   the state folder;
3. else the demo sets itself up with an admin login that needs no password — ``root`` over TCP,
   then ``root`` through the unix socket ``/run/mysqld/mysqld.sock`` (stock Debian/Ubuntu, where
   root logs in only that way): ``setup-mysql --demo-data`` when ``diag_demo`` does not exist,
   else the account alone. Nothing existing is dropped or revoked.

When none works the demo runs without the database and says why in one line.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sre_diag.commands.errors import SetupError
from sre_diag.commands.setup_mysql import (
    READ_ONLY_TABLES,
    password_file,
    read_password,
    run_setup,
    state_dir_of,
)
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.mysql import MysqlAdapter
from sre_diag.tools.schemas import MysqlInput

__all__ = ["ADMIN_LOGINS", "DEMO_DATABASE", "DEMO_USER", "WAIT_SECONDS", "DemoDatabase", "find"]

DEMO_DATABASE = "diag_demo"
DEMO_USER = "diag_ro"
WAIT_SECONDS = 10.0
ADMIN_LOGINS = (
    "mysql://root@127.0.0.1:3306",
    "mysql://root@localhost?unix_socket=/run/mysqld/mysqld.sock",
)
_PROBE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class DemoDatabase:
    """The DSN to use (None: run without) and, when None, the one-line reason."""

    dsn: str | None
    reason: str = ""


async def reachable(dsn: str) -> bool:
    """Whether the incident database answers a real query through the real adapter."""
    adapter = MysqlAdapter(dsn, (), connect_timeout_seconds=_PROBE_SECONDS)
    probe = MysqlInput(sql="SELECT COUNT(*) AS n FROM deployments", purpose="demo probe")
    try:
        result = await adapter.invoke(AdapterCall("demo-probe", "demo", probe))
    finally:
        await adapter.aclose()
    return isinstance(result, Ready)


def _demo_dsn(password: str) -> str:
    return f"mysql://{DEMO_USER}:{quote(password, safe='')}@127.0.0.1:3306/{DEMO_DATABASE}"


async def find(configured: str | None, settings: Any) -> DemoDatabase:
    """The demo's database, found within :data:`WAIT_SECONDS`, or why there is none."""
    if configured:
        found = await reachable(configured)
        return DemoDatabase(configured if found else None, "" if found else "DIAG_MYSQL_DSN"
                            " does not answer a query on the incident tables")  # fmt: skip
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            return await _find_local(state_dir_of(settings))
    except TimeoutError:
        return DemoDatabase(None, f"no local MySQL/MariaDB answered within {WAIT_SECONDS:g} s")


async def _find_local(state_dir: Path) -> DemoDatabase:
    stored = read_password(password_file(state_dir, DEMO_DATABASE, DEMO_USER))
    if stored is not None and await reachable(_demo_dsn(stored)):
        return DemoDatabase(_demo_dsn(stored))
    reasons: list[str] = []
    for admin in ADMIN_LOGINS:
        try:
            dsn = await asyncio.to_thread(_set_up, admin, state_dir)
        except SetupError as error:
            reasons.append(str(error))
            continue
        if await reachable(dsn):
            return DemoDatabase(dsn)
        reasons.append(f"the demo account set up through {_where(admin)} does not answer")
    return DemoDatabase(None, "; ".join(reasons) or "no local MySQL/MariaDB found")


def _where(admin: str) -> str:
    return "the unix socket" if "unix_socket" in admin else "127.0.0.1:3306"


def _set_up(admin: str, state_dir: Path) -> str:
    """``setup-mysql`` for the demo: the database only when missing, the account always."""
    from sre_diag.commands.setup_mysql import admin_connection
    from sre_diag.tools.mysql.secrecy import SecretClassifier

    with admin_connection(admin, _PROBE_SECONDS) as connection, connection.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                    (DEMO_DATABASE,))  # fmt: skip
        missing = int(cur.fetchone()[0]) == 0
    args = argparse.Namespace(
        admin_dsn=admin, database=DEMO_DATABASE, ro_user=DEMO_USER, ro_password=None,
        ro_host=None, demo_data=missing, print_sql=False, allowed_tables=READ_ONLY_TABLES,
        classifier=SecretClassifier(), state_dir=state_dir,
    )  # fmt: skip
    try:
        dsn, _ = run_setup(args)
    except Exception as error:  # a server refusal: one line, no server text
        if isinstance(error, SetupError):
            raise
        raise SetupError(f"setting up the demo database failed ({type(error).__name__})") from None
    if ":PASSWORD@" in dsn:
        raise SetupError(
            f"the account {DEMO_USER} exists with a password the state folder does not keep"
            " (set DIAG_MYSQL_DSN, or give it one with setup-mysql --ro-password)"
        )
    return dsn
