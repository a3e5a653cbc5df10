"""What the ``query_mysql`` adapter learns about the server before any statement.

One read per pool, repeated every ``verdict_refresh_seconds``: the server's flavour (MariaDB or
MySQL), the tables the model may read, their column shapes for the guard's typed pass, the
account's read-only verdict with a digest of every grant line (so a change of the grants is
noticed) and the secrecy verdict. These are plain reads through the adapter's own connection;
they live apart from :mod:`sre_diag.tools.mysql.adapter`, which owns the pool, the statement
and the decision to refuse on these facts.
"""

from __future__ import annotations

import hashlib
import time as clock
from dataclasses import dataclass
from typing import Any

from sre_diag.tools.mysql.dsn import MysqlDsn
from sre_diag.tools.mysql.privileges import GrantVerdict, effective_grants_verdict
from sre_diag.tools.mysql.secrecy import (
    VISIBLE_COLUMNS_SQL,
    GrantLine,
    SecrecyVerdict,
    SecretClassifier,
    secrecy_verdict,
)
from sre_diag.tools.mysql.session import (
    BASE_TABLES_SQL,
    PASSWORD_CLAUSE,
    has_public_role,
    read_schema,
)
from sre_diag.tools.sql.columns import Schema

__all__ = ["ServerFacts", "read_facts"]


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the adapter learns once per pool: the flavour and the tables the model may read."""

    mariadb: bool
    allowed_tables: frozenset[str]
    privileges: GrantVerdict | None
    secrecy: SecrecyVerdict
    schema: Schema
    grants_digest: str
    read_at: float


async def read_facts(
    cur: Any,
    dsn: MysqlDsn,
    *,
    configured_tables: frozenset[str] | None,
    classifier: SecretClassifier,
    require_read_only: bool,
) -> ServerFacts:
    """Flavour, allowed tables (``configured_tables``, or every base table of the DSN database
    when None), their schema and the verdicts, read through ``cur``; the privilege verdict and
    the grants digest are left out unless ``require_read_only``."""
    await cur.execute("SELECT VERSION()")
    version = str((await cur.fetchone())[0])
    mariadb = "mariadb" in version.lower()
    lines: list[GrantLine] = []
    verdict, digest = await _privileges(cur, has_public_role(version), lines)
    privileges, digest = (verdict, digest) if require_read_only else (None, "")
    secrecy = await _secrecy(cur, lines, classifier)
    tables = configured_tables
    if tables is None:
        await cur.execute(BASE_TABLES_SQL, (dsn.database,))
        tables = frozenset(str(row[0]) for row in await cur.fetchall())
    schema = await read_schema(cur, dsn.database, tables, classifier)
    return ServerFacts(
        mariadb=mariadb, allowed_tables=tables, privileges=privileges, secrecy=secrecy,
        schema=schema, grants_digest=digest, read_at=clock.monotonic(),
    )  # fmt: skip


async def _secrecy(
    cur: Any, lines: list[GrantLine], classifier: SecretClassifier
) -> SecrecyVerdict:
    """Which columns classified secret the session can read (:mod:`.secrecy`)."""
    await cur.execute("SELECT CURRENT_USER()")
    user, _, host = str((await cur.fetchone())[0]).rpartition("@")
    await cur.execute(VISIBLE_COLUMNS_SQL)
    visible = [(str(a), str(b), str(c)) for a, b, c in await cur.fetchall()]
    account = f"'{user}'@'{host}'"
    return secrecy_verdict(visible, lines, classifier, account=account)


async def _privileges(
    cur: Any, include_public: bool, collected: list[GrantLine]
) -> tuple[GrantVerdict, str]:
    """The verdict over the account, its roles and (MariaDB 10.11+) ``PUBLIC``, and a
    digest of every grant line read (passwords left out); the lines go to ``collected``."""
    seen: list[str] = []

    async def show_grants(role: str | None) -> list[str]:
        await cur.execute(
            "SHOW GRANTS FOR CURRENT_USER()" if role is None else f"SHOW GRANTS FOR {role}"
        )
        lines = [str(row[0]) for row in await cur.fetchall()]
        seen.extend(f"{role}\t{PASSWORD_CLAUSE.sub('', line)}" for line in lines)
        collected.extend(GrantLine(role, line) for line in lines)
        return lines

    verdict = await effective_grants_verdict(show_grants, include_public=include_public)
    digest = hashlib.sha256("\n".join(sorted(seen)).encode()).hexdigest()
    return verdict, digest
