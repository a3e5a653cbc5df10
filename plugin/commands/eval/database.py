"""``eval``'s throwaway database: created from ``mysql.sql`` through the admin DSN with a
SELECT-only account, dropped after the run."""

from __future__ import annotations

import asyncio
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from sre_diag.commands.errors import EvalDatabaseError
from sre_diag.commands.eval.cases import EvalUsageError
from sre_diag.log import failure_reason

__all__ = [
    "AdminDsn",
    "EvalDatabaseError",
    "ThrowawayDatabase",
    "sql_statements",
]


_ADMIN_CONNECT_SECONDS = 5


@dataclass(frozen=True, slots=True)
class AdminDsn:
    """``--mysql-admin-dsn``: an account that may create databases and users."""

    host: str
    port: int
    user: str
    password: str

    @classmethod
    def parse(cls, dsn: str) -> AdminDsn:
        try:
            parts = urlsplit(dsn.strip())
            port = parts.port or 3306
        except ValueError:
            raise EvalUsageError("--mysql-admin-dsn: the port must be a number") from None
        if parts.scheme.lower() not in {"mysql", "mariadb"} or not parts.hostname:
            raise EvalUsageError("--mysql-admin-dsn must look like mysql://user[:pw]@host[:port]")
        user = unquote(parts.username or "root")
        return cls(parts.hostname, port, user, unquote(parts.password or ""))


def sql_statements(text: str) -> list[str]:
    """``mysql.sql`` split at semicolons that end a line; ``--`` comment lines dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    parts = re.split(r";\s*$", "\n".join(lines), flags=re.M)
    return [part.strip() for part in parts if part.strip()]


class ThrowawayDatabase:
    """A database ``diag_eval_<case>_<random>`` loaded from ``mysql.sql`` and a SELECT-only
    account on it; both dropped on exit, whatever happened."""

    def __init__(self, admin: AdminDsn, case_id: str, sql_file: Path) -> None:
        slug = re.sub(r"[^a-z0-9]+", "_", case_id.lower()).strip("_")[:30] or "case"
        token = secrets.token_hex(4)
        self.admin = admin
        self.database = f"diag_eval_{slug}_{token}"
        self.user = f"diag_eval_{token}"
        self.password = secrets.token_urlsafe(18)
        self.sql_file = sql_file

    @property
    def dsn(self) -> str:
        host = "127.0.0.1" if self.admin.host == "localhost" else self.admin.host
        return (
            f"mysql://{quote(self.user, safe='')}:{quote(self.password, safe='')}"
            f"@{host}:{self.admin.port}/{self.database}"
        )

    def _connect(self) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.admin.host,
            port=self.admin.port,
            user=self.admin.user,
            password=self.admin.password,
            connect_timeout=_ADMIN_CONNECT_SECONDS,
            autocommit=True,
            charset="utf8mb4",
        )

    def _create(self) -> None:
        statements = sql_statements(self.sql_file.read_text(encoding="utf-8"))
        account = f"'{self.user}'@'%'"
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE `{self.database}` "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
            cur.execute(f"USE `{self.database}`")
            for statement in statements:
                cur.execute(statement)
            secret = conn.escape(self.password)
            cur.execute(f"CREATE USER {account} IDENTIFIED BY {secret}")
            # Column-level grants of the non-secret columns, as setup-mysql gives them: the
            # secrecy verdict of query_mysql passes for any case schema.
            from sre_diag.commands.setup_mysql import column_grants, table_columns
            from sre_diag.tools.mysql.secrecy import SecretClassifier

            columns = table_columns(cur, self.database)
            grants, _ = column_grants(
                self.database, columns, sorted(columns), SecretClassifier(), account
            )
            for grant in grants:
                cur.execute(grant)

    def _drop(self) -> None:
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            cur.execute(f"DROP USER IF EXISTS '{self.user}'@'%'")

    async def __aenter__(self) -> str:
        import pymysql

        try:
            await asyncio.to_thread(self._create)
        except (pymysql.MySQLError, OSError, UnicodeDecodeError) as exc:
            await self.__aexit__()
            code = exc.args[0] if isinstance(exc, pymysql.MySQLError) and exc.args else ""
            raise EvalDatabaseError(
                f"mysql.sql could not be loaded ({failure_reason(exc)} {code})".strip()
            ) from None
        return self.dsn

    async def __aexit__(self, *exc_info: object) -> None:
        import pymysql

        try:
            await asyncio.to_thread(self._drop)
        except pymysql.MySQLError:
            sys.stderr.write(f"eval: could not drop {self.database} / {self.user}\n")
