"""``sre-diag setup-mysql``: the read-only diagnosis account for a database, never destructive.

    sre-diag setup-mysql --admin-dsn mysql://root@127.0.0.1:3306 --database shop \\
        --ro-user diag_ro [--ro-password PW] [--demo-data] [--print-sql]

What it does, and nothing more:

- with ``--demo-data``, and only when ``--database`` does not exist yet, creates it and loads the
  bundled incident schema and rows (an existing database, empty or not, is refused untouched);
- creates the account ``--ro-user`` on each ``--ro-host`` (default ``localhost`` and
  ``127.0.0.1``; never ``%`` for the demo data) when it does not exist, with the given password or
  a random one, and the server-side backstops ``MAX_USER_CONNECTIONS`` / ``MAX_STATEMENT_TIME``;
  an account that exists keeps its password unless ``--ro-password`` is given;
- grants ``SELECT`` on exactly the non-secret columns of each allowed table
  (``GRANT SELECT (`a`, `b`) ON `db`.`t` TO …``): the allowed tables are
  ``DIAG_MYSQL_ALLOWED_TABLES`` (the bundled incident's business tables with ``--demo-data``),
  else every base table of the database; secret columns are classified by their names and by
  ``DIAG_MYSQL_SECRET_COLUMNS``.

It never drops, revokes or rewrites anything it did not create: no ``DROP``, no ``REVOKE``, no
``ALTER`` of an account it found. ``--print-sql`` prints the statements for a DBA and executes
nothing (the columns are read, read-only, to know what to grant). A generated password is kept in
the state folder (``DIAG_STATE_DIR``, mode 0600, :func:`password_file`) so that ``sre-diag demo``
finds it. On stdout: the account's ``DIAG_MYSQL_DSN`` (or the SQL); on failure one line on
stderr and exit 2 (bad arguments, refused) or 1 (the server refused a statement).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from sre_diag.commands.errors import SetupError
from sre_diag.resources import BUNDLED_MYSQL

if TYPE_CHECKING:  # the driver and the classifier load when the command runs, not at --help
    from sre_diag.settings import Settings
    from sre_diag.tools.mysql.secrecy import SecretClassifier

__all__ = [
    "DEMO_HOSTS",
    "READ_ONLY_TABLES",
    "AccountPlan",
    "SetupError",
    "add_arguments",
    "admin_connection",
    "column_grants",
    "main",
    "password_file",
    "read_password",
    "run_setup",
    "state_dir_of",
    "table_columns",
]

# ``examples/incident/mysql``, found where the package is installed (wheel or editable).
_DATA_DIR: Path = BUNDLED_MYSQL

# The bundled incident's business tables (its credentials table is never granted).
READ_ONLY_TABLES = ("orders", "payments", "deployments", "db_pool_metrics")
DEMO_HOSTS = ("localhost", "127.0.0.1")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]{1,32}")
_HOST = re.compile(r"[A-Za-z0-9_.:%-]{1,60}")
_CONNECT_SECONDS = 5


# --- the password file ---------------------------------------------------------------------------


def password_file(state_dir: Path, database: str, user: str) -> Path:
    """Where the generated password of ``user`` for ``database`` is kept (mode 0600)."""
    return state_dir / "mysql" / f"{database}.{user}.password"


def read_password(path: Path) -> str | None:
    """The stored password, or None when there is no readable regular file of ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        text = handle.read(512).strip()
    return text or None


def _store_password(path: Path, password: str) -> None:
    """Write the password with mode 0600 (folder 0700), replacing an older file atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(password + "\n")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


# --- the admin connection -------------------------------------------------------------------------


def _admin_params(admin_dsn: str) -> dict[str, Any]:
    """``mysql://user[:pw]@host[:port]`` or ``mysql://root@localhost?unix_socket=/path``."""
    parts = urlsplit(admin_dsn)
    if parts.scheme not in {"mysql", "mariadb"} or not parts.hostname:
        raise SetupError("--admin-dsn must look like mysql://user[:password]@host[:port]")
    params: dict[str, Any] = {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
    }
    socket = parse_qs(parts.query).get("unix_socket")
    if socket:
        params["unix_socket"] = socket[0]
    return params


def admin_connection(admin_dsn: str, seconds: float = _CONNECT_SECONDS) -> Any:
    """An autocommit connection as the admin; :class:`SetupError` (no credential) if refused."""
    import pymysql

    params = _admin_params(admin_dsn)
    try:
        return pymysql.connect(**params, connect_timeout=seconds, autocommit=True)
    except pymysql.err.MySQLError as error:
        where = params.get("unix_socket") or f"{params['host']}:{params['port']}"
        raise SetupError(
            f"cannot reach MySQL/MariaDB at {where} as {params['user']}"
            f" (error {error.args[0] if error.args else type(error).__name__})"
        ) from None


# --- what to run ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccountPlan:
    """Everything the command will run, in order, and the DSN it prints."""

    statements: tuple[str, ...]
    load_demo_rows: bool
    password: str | None
    password_generated: bool
    notes: tuple[str, ...]


def _load_seed() -> ModuleType:
    """Import ``seed.py`` by path (the incident folder is data, not a package to import)."""
    spec = importlib.util.spec_from_file_location("diag_incident_seed", _DATA_DIR / "seed.py")
    if spec is None or spec.loader is None:
        raise SetupError(f"cannot load {_DATA_DIR / 'seed.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema_statements() -> list[str]:
    """``schema.sql`` split at semicolons that end a line (the file's documented format)."""
    text = (_DATA_DIR / "schema.sql").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [
        part.strip() for part in re.split(r";\s*$", "\n".join(lines), flags=re.M) if part.strip()
    ]


def _database_state(cur: Any, database: str) -> tuple[bool, int]:
    """Whether ``database`` exists and how many tables it holds (as the admin sees them)."""
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                (database,))  # fmt: skip
    exists = int(cur.fetchone()[0]) > 0
    cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                (database,))  # fmt: skip
    return exists, int(cur.fetchone()[0])


def table_columns(cur: Any, database: str) -> dict[str, list[str]]:
    """Each table's columns in table order, as the admin sees them."""
    cur.execute(
        "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
        " ORDER BY TABLE_NAME, ORDINAL_POSITION",
        (database,),
    )
    columns: dict[str, list[str]] = {}
    for table, column in cur.fetchall():
        columns.setdefault(str(table), []).append(str(column))
    return columns


def _demo_columns() -> dict[str, list[str]]:
    return {table: list(columns) for table, (columns, _) in _load_seed().generate().items()}


def _accounts_present(cur: Any, user: str, hosts: Sequence[str]) -> set[str]:
    cur.execute("SELECT Host FROM mysql.user WHERE User = %s", (user,))
    found = {str(row[0]) for row in cur.fetchall()}
    return {host for host in hosts if host in found}


def column_grants(
    database: str,
    columns: dict[str, list[str]],
    tables: Iterable[str],
    classifier: SecretClassifier,
    account: str,
) -> tuple[list[str], list[str]]:
    """``GRANT SELECT (<non-secret columns>) ON db.t TO account`` per allowed table, and notes
    for the tables that cannot be granted (missing, or nothing but secret columns)."""
    statements: list[str] = []
    notes: list[str] = []
    by_folded = {name.casefold(): name for name in columns}
    for wanted in tables:
        table = by_folded.get(wanted.rpartition(".")[2].casefold())
        if table is None:
            notes.append(f"table {wanted} not found in {database}: not granted")
            continue
        keep = [name for name in columns[table] if not classifier.is_secret(table, name)]
        if not keep:
            notes.append(f"table {table} holds only secret columns: not granted")
            continue
        names = ", ".join(quote_name(name) for name in keep)
        statements.append(
            f"GRANT SELECT ({names}) ON {quote_name(database)}.{quote_name(table)} TO {account}"
        )
    return statements, notes


def quote_name(name: str) -> str:
    """A back-quoted identifier (inner back-quotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


def _escape(password: str) -> str:
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _account_statements(
    user: str, hosts: Sequence[str], present: set[str], password: str | None, mariadb: bool
) -> list[str]:
    statements: list[str] = []
    limits = "MAX_USER_CONNECTIONS 20" + (" MAX_STATEMENT_TIME 30" if mariadb else "")
    for host in hosts:
        account = f"'{user}'@'{host}'"
        if host not in present:
            secret = _escape(password or "")
            statements.append(f"CREATE USER {account} IDENTIFIED BY {secret} WITH {limits}")
        elif password is not None:
            statements.append(f"ALTER USER {account} IDENTIFIED BY {_escape(password)}")
    return statements


def plan_setup(cur: Any, args: argparse.Namespace, stored: str | None) -> AccountPlan:
    """Read what exists (read-only) and decide every statement; raises :class:`SetupError` for
    what the command refuses."""
    hosts: list[str] = list(dict.fromkeys(args.ro_host or DEMO_HOSTS))
    exists, tables = _database_state(cur, args.database)
    statements: list[str] = []
    if args.demo_data:
        if "%" in "".join(hosts):
            raise SetupError("--demo-data binds the account to local hosts only (no % host)")
        if exists:
            state = "holds tables" if tables else "exists"
            raise SetupError(
                f"database {args.database} already {state}: --demo-data only creates a new"
                " database (nothing was changed)"
            )
        statements.append(
            f"CREATE DATABASE {quote_name(args.database)}"
            " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        )
        statements.append(f"USE {quote_name(args.database)}")
        statements.extend(_schema_statements())
        columns, allowed = _demo_columns(), list(READ_ONLY_TABLES)
    else:
        if not exists:
            raise SetupError(
                f"database {args.database} does not exist (use --demo-data to create the"
                " bundled demo database)"
            )
        columns = table_columns(cur, args.database)
        allowed = list(args.allowed_tables) or sorted(columns)
    cur.execute("SELECT VERSION()")
    mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
    present = _accounts_present(cur, args.ro_user, hosts)
    password, generated = _password(args, present, hosts, stored)
    statements.extend(_account_statements(args.ro_user, hosts, present, password, mariadb))
    notes: list[str] = []
    for host in hosts:
        grants, missing = column_grants(
            args.database, columns, allowed, args.classifier, f"'{args.ro_user}'@'{host}'"
        )
        statements.extend(grants)
        notes = notes or missing
    if present and args.ro_password is None and stored is None:
        notes.append(f"account {args.ro_user} existed: its password was left unchanged")
    return AccountPlan(tuple(statements), args.demo_data, password, generated, tuple(notes))


def _password(
    args: argparse.Namespace, present: set[str], hosts: Sequence[str], stored: str | None
) -> tuple[str | None, bool]:
    """The explicit password; else the stored one (an account this command created); else a
    new random one when some account must be created; else None (left unchanged)."""
    if args.ro_password is not None:
        return args.ro_password, False
    if stored is not None:
        return stored, False
    if set(hosts) - present:
        return secrets.token_urlsafe(24), True
    return None, False


def _load_rows(cur: Any) -> None:
    for table, (columns, rows) in _load_seed().generate().items():
        marks = ", ".join(["%s"] * len(columns))
        names = ", ".join(quote_name(column) for column in columns)
        cur.executemany(f"INSERT INTO {quote_name(table)} ({names}) VALUES ({marks})", list(rows))


# --- the command ----------------------------------------------------------------------------------


def _check_arguments(args: argparse.Namespace) -> None:
    for label, value in (("--database", args.database), ("--ro-user", args.ro_user)):
        if not _IDENTIFIER.fullmatch(value or ""):
            raise SetupError(f"{label} must be 1-32 letters, digits or underscores")
    for host in args.ro_host or ():
        if not _HOST.fullmatch(host):
            raise SetupError("--ro-host must be a plain host such as localhost or 10.0.0.%")
    if args.ro_password is not None and not 8 <= len(args.ro_password) <= 128:
        raise SetupError("--ro-password must be 8 to 128 characters")


def run_setup(args: argparse.Namespace) -> tuple[str, tuple[str, ...]]:
    """Plan and (unless ``--print-sql``) execute; the text for stdout and notes for stderr."""
    _check_arguments(args)
    params = _admin_params(args.admin_dsn)
    stored_path = password_file(args.state_dir, args.database, args.ro_user)
    stored = read_password(stored_path) if args.ro_password is None else None
    with admin_connection(args.admin_dsn) as connection, connection.cursor() as cur:
        plan = plan_setup(cur, args, stored)
        if args.print_sql:
            return _printed(plan), plan.notes
        _execute(cur, plan, args.database)
    if plan.password_generated and plan.password is not None:
        _store_password(stored_path, plan.password)
    return _dsn(args, params, plan.password), plan.notes


def _execute(cur: Any, plan: AccountPlan, database: str) -> None:
    """Run the plan; a demo database this run created is dropped again if loading it fails."""
    created = False
    try:
        for statement in plan.statements:
            cur.execute(statement)
            created = created or statement.startswith("CREATE DATABASE")
        if plan.load_demo_rows:
            _load_rows(cur)
    except BaseException:
        if created:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_name(database)}")
        raise


def state_dir_of(settings: Settings) -> Path:
    """``DIAG_STATE_DIR`` (default ``$XDG_STATE_HOME/sre-diag``, else
    ``~/.local/state/sre-diag``): where the generated password is kept."""
    return settings.state_dir


def _printed(plan: AccountPlan) -> str:
    lines = [statement.rstrip(";") + ";" for statement in plan.statements]
    if plan.load_demo_rows:
        lines.append("-- then the bundled rows: examples/incident/mysql/seed.sql")
    return "\n".join(lines)


def _dsn(args: argparse.Namespace, params: dict[str, Any], password: str | None) -> str:
    host = "127.0.0.1" if params["host"] == "localhost" else params["host"]
    secret = quote(password, safe="") if password is not None else "PASSWORD"
    return (
        f"mysql://{quote(args.ro_user, safe='')}:{secret}@{host}:{params['port']}/{args.database}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (shared by ``sre-diag setup-mysql`` and ``scripts/setup_mysql.py``)."""
    parser.add_argument("--admin-dsn", required=True, metavar="DSN",
                        help="an account that may create users and grant, e.g. mysql://root@host"
                        " (add ?unix_socket=/run/mysqld/mysqld.sock for a socket login)")
    parser.add_argument("--database", required=True, metavar="DB", help="the business database")
    parser.add_argument("--ro-user", required=True, metavar="USER", help="the read-only account")
    parser.add_argument("--ro-password", metavar="PW",
                        help="its password (default: kept, or random and stored in the state"
                        " folder)")
    parser.add_argument("--ro-host", action="append", metavar="HOST",
                        help="an account host part (repeatable; default localhost and 127.0.0.1)")
    parser.add_argument("--demo-data", action="store_true",
                        help="create DB (it must not exist) with the bundled incident schema")
    parser.add_argument("--print-sql", action="store_true",
                        help="print the statements for a DBA and execute nothing")  # fmt: skip


def prepared_arguments(
    args: argparse.Namespace, allowed: Sequence[str], secret: Sequence[str], state_dir: Path
) -> argparse.Namespace:
    """``args`` with what the settings say: allowed tables, secret columns, the state folder."""
    from sre_diag.tools.mysql.secrecy import SecretClassifier

    args.allowed_tables = tuple(allowed)
    args.classifier = SecretClassifier.from_setting(secret)
    args.state_dir = state_dir
    return args


def execute(args: argparse.Namespace) -> int:
    """Run the command on prepared arguments; print; the exit status."""
    import pymysql

    try:
        text, notes = run_setup(args)
    except SetupError as error:
        print(f"setup-mysql: {error}", file=sys.stderr)
        return 2
    except pymysql.err.MySQLError as error:
        number = error.args[0] if error.args else type(error).__name__
        print(f"setup-mysql: the server refused a statement (error {number})", file=sys.stderr)
        return 1
    for note in notes:
        print(f"setup-mysql: {note}", file=sys.stderr)
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sre_diag.commands.setup_mysql`` (settings read like ``sre-diag``)."""
    from sre_diag.commands.exits import load_settings

    parser = argparse.ArgumentParser(prog="setup-mysql", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    settings = load_settings()
    prepared = prepared_arguments(
        args, settings.mysql_allowed_tables, settings.mysql_secret_columns,
        state_dir_of(settings),
    )  # fmt: skip
    return execute(prepared)


if __name__ == "__main__":
    sys.exit(main())
