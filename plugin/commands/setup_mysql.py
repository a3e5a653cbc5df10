"""Create (or recreate) the bundled incident database and its read-only diagnosis account.

    python -m sre_diag.commands.setup_mysql --admin-dsn mysql://root@127.0.0.1:3306 \\
        --database diag_demo --ro-user diag_ro --ro-password <pw>

(``scripts/setup_mysql.py`` in a checkout runs the same.)

Idempotent: the database is dropped and rebuilt from ``examples/incident/mysql/schema.sql`` and
the deterministic rows of ``examples/incident/mysql/seed.py``; the account is created if missing,
its password reset, all its privileges revoked and then ``SELECT`` granted on each business table
except ``api_credentials`` — nothing else, so the server itself refuses writes, other schemas and
the credential table whatever the guard lets through. On stdout it prints exactly one line, the
``DIAG_MYSQL_DSN`` of the read-only account. When the server cannot be reached it exits with
status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from urllib.parse import quote, unquote, urlsplit

import pymysql

from sre_diag.commands.errors import SetupError
from sre_diag.resources import BUNDLED_MYSQL

__all__ = ["READ_ONLY_TABLES", "SetupError", "main", "setup"]

# ``examples/incident/mysql``, found where the package is installed (wheel or editable).
_DATA_DIR: Path = BUNDLED_MYSQL

# The documented default allowlist: every business table but the credentials table.
READ_ONLY_TABLES = ("orders", "payments", "deployments", "db_pool_metrics")
_IDENTIFIER = re.compile(r"^[A-Za-z0-9_]{1,32}$")


def _load_seed() -> ModuleType:
    """Import ``seed.py`` by path (the incident folder is data, not a package to import)."""
    spec = importlib.util.spec_from_file_location("diag_incident_seed", _DATA_DIR / "seed.py")
    if spec is None or spec.loader is None:
        raise SetupError(f"cannot load {_DATA_DIR / 'seed.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _admin_params(admin_dsn: str) -> dict[str, object]:
    parts = urlsplit(admin_dsn)
    if parts.scheme not in {"mysql", "mariadb"} or not parts.hostname:
        raise SetupError("--admin-dsn must look like mysql://user[:password]@host[:port]")
    return {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
    }


def _schema_statements() -> list[str]:
    """``schema.sql`` split at semicolons that end a line (the file's documented format)."""
    text = (_DATA_DIR / "schema.sql").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [
        part.strip() for part in re.split(r";\s*$", "\n".join(lines), flags=re.M) if part.strip()
    ]


def _load_data(cur: pymysql.cursors.Cursor, database: str) -> None:
    cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    cur.execute(f"USE `{database}`")
    for statement in _schema_statements():
        cur.execute(statement)
    for table, (columns, rows) in _load_seed().generate().items():
        marks = ", ".join(["%s"] * len(columns))
        cur.executemany(
            f"INSERT INTO `{table}` ({', '.join(columns)}) VALUES ({marks})", list(rows)
        )


def _create_account(
    cur: pymysql.cursors.Cursor, database: str, user: str, host: str, password: str
) -> None:
    cur.execute("SELECT VERSION()")
    mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
    account = f"'{user}'@'{host}'"
    # No parameter binding here: the host part may be '%', which pymysql would take for a marker.
    secret = cur.connection.escape(password)
    cur.execute(f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY {secret}")
    cur.execute(f"ALTER USER {account} IDENTIFIED BY {secret}")
    cur.execute(f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}")
    for table in READ_ONLY_TABLES:
        cur.execute(f"GRANT SELECT ON `{database}`.`{table}` TO {account}")
    # Server-side backstops in case a client forgets its own caps.
    limits = "MAX_USER_CONNECTIONS 20"
    if mariadb:
        limits += " MAX_STATEMENT_TIME 30"
    cur.execute(f"ALTER USER {account} WITH {limits}")


def setup(args: argparse.Namespace) -> str:
    """Build everything and return the read-only DSN."""
    for label, value in (("--database", args.database), ("--ro-user", args.ro_user)):
        if not _IDENTIFIER.match(value):
            raise SetupError(f"{label} must be 1-32 letters, digits or underscores")
    if not re.fullmatch(r"[A-Za-z0-9_.%:-]{1,60}", args.ro_host):
        raise SetupError("--ro-host must be a plain host pattern such as % or localhost")
    params = _admin_params(args.admin_dsn)
    try:
        connection = pymysql.connect(**params, connect_timeout=5, autocommit=True)
    except pymysql.err.OperationalError as error:
        raise SetupError(
            f"cannot reach MySQL/MariaDB at {params['host']}:{params['port']} "
            f"as {params['user']} (error {error.args[0]})"
        ) from None
    password = args.ro_password or secrets.token_urlsafe(18)
    with connection, connection.cursor() as cur:
        _load_data(cur, args.database)
        _create_account(cur, args.database, args.ro_user, args.ro_host, password)
    host = "127.0.0.1" if params["host"] == "localhost" else params["host"]
    return (
        f"mysql://{quote(args.ro_user, safe='')}:{quote(password, safe='')}"
        f"@{host}:{params['port']}/{args.database}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--admin-dsn", default="mysql://root@127.0.0.1:3306")
    parser.add_argument("--database", default="diag_demo")
    parser.add_argument("--ro-user", default="diag_ro")
    parser.add_argument("--ro-password", default=None, help="generated when omitted")
    parser.add_argument("--ro-host", default="%", help="account host part (default %%)")
    args = parser.parse_args(argv)
    try:
        dsn = setup(args)
    except SetupError as error:
        print(f"setup_mysql: {error}", file=sys.stderr)
        return 2
    except pymysql.err.MySQLError as error:
        print(f"setup_mysql: server refused setup (error {error.args[0]})", file=sys.stderr)
        return 1
    print(dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
