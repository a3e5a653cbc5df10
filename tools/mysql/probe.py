"""How the MySQL adapter probes itself for ``check``: reach the server, read what it is, which
allowed tables exist, and the account's read-only verdict.

Every step is bounded (``seconds``, the probe's connect bound) and reads only: ``SELECT
VERSION()``, the database's table names, the grants. Failures become a reason built from the
MySQL error number (:data:`~sre_diag.tools.mysql.codes.MEANINGS`) or the exception's kind, never
from its text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiomysql

from sre_diag.tools.base import ProbeReport, ProbeStatus
from sre_diag.tools.mysql.codes import MEANINGS, error_number
from sre_diag.tools.mysql.dsn import MysqlDsn
from sre_diag.tools.mysql.privileges import GrantVerdict
from sre_diag.tools.mysql.secrecy import SecrecyVerdict
from sre_diag.tools.probing import CONNECT_SECONDS, failed, listed, ok, os_reason, unset

__all__ = ["connect", "failure_reason", "probe_mysql", "server_facts", "server_kind"]

VerdictReader = Callable[[], Awaitable[tuple[GrantVerdict | None, SecrecyVerdict] | None]]


def failure_reason(exc: BaseException, seconds: float = CONNECT_SECONDS) -> str:
    """What an operator can act on: the error number's meaning, the OS error, or the kind."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {seconds:g} s"
    number = error_number(exc)
    if number is not None:
        return f"MySQL error {number}: {MEANINGS.get(number, type(exc).__name__)}"
    if isinstance(exc, OSError):
        return f"cannot connect: {os_reason(exc)}"
    return type(exc).__name__


async def connect(dsn: MysqlDsn, seconds: float = CONNECT_SECONDS) -> Any:
    """One plain connection (no pool, no session setup), bounded by ``seconds`` and a margin."""
    async with asyncio.timeout(seconds + 1):
        return await aiomysql.connect(
            host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, db=dsn.database,
            charset="utf8mb4", autocommit=True, connect_timeout=seconds, local_infile=False,
        )  # fmt: skip


async def server_facts(
    dsn: MysqlDsn, allowed: Sequence[str], seconds: float = CONNECT_SECONDS
) -> tuple[str, list[str], list[str]]:
    """Server version, the tables the model may read, and configured tables that are missing."""
    conn = await connect(dsn, seconds)
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT VERSION()")
            version = str((await cur.fetchone())[0])
            await cur.execute(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                (dsn.database,),
            )
            present = sorted(str(row[0]) for row in await cur.fetchall())
    finally:
        conn.close()
    wanted = [t.rpartition(".")[2] for t in allowed if t.strip()]
    if not wanted:
        return version, present, []
    return version, sorted(set(wanted) & set(present)), sorted(set(wanted) - set(present))


def server_kind(version: str) -> str:
    """``MariaDB 11.4.2`` / ``MySQL 8.0.36`` from ``SELECT VERSION()``."""
    number = version.split("-")[0]
    return f"MariaDB {number}" if "mariadb" in version.lower() else f"MySQL {number}"


async def probe_mysql(
    dsn: MysqlDsn | None,
    allowed: Sequence[str],
    *,
    require_read_only: bool,
    verdict: VerdictReader,
    require_column_grants: bool = True,
    seconds: float = CONNECT_SECONDS,
) -> ProbeReport:
    """Reachable, server kind, allowed tables present, the read-only and the secrecy verdicts
    (read by ``verdict``)."""
    if dsn is None:
        return unset("DIAG_MYSQL_DSN unset: query_mysql answers NOT_CONFIGURED")
    where = f"{dsn.user}@{dsn.host}:{dsn.port}/{dsn.database}"
    try:
        version, tables, missing = await server_facts(dsn, allowed, seconds)
    except Exception as exc:
        return failed(f"{where}: {failure_reason(exc, seconds)}", server=where)
    facts: dict[str, Any] = {
        "server": where, "kind": server_kind(version), "allowed_tables": tables,
    }  # fmt: skip
    head = f"{where}: {facts['kind']}, {len(tables)} allowed tables ({listed(tables)})"
    if missing:
        return failed(f"{head}; allowed tables not found: {listed(missing)}", **facts)
    try:
        found = await verdict()
    except Exception as exc:
        return failed(f"{head}; grants unreadable: {failure_reason(exc, seconds)}", **facts)
    grants, secrecy = found if found is not None else (None, None)
    report = _verdict_report(head, facts, grants, require_read_only)
    if secrecy is None or report.status is not ProbeStatus.OK:
        return report
    return _secrecy_report(report.detail, facts, secrecy, require_column_grants)


def _secrecy_report(
    head: str, facts: dict[str, Any], secrecy: SecrecyVerdict, required: bool
) -> ProbeReport:
    """``secret columns: not readable``, or each readable one and the statements that fix it."""
    facts["secret_columns_readable"] = [str(column) for column in secrecy.readable]
    facts["secret_column_fixes"] = list(secrecy.fixes)
    if secrecy.passes:
        return ok(f"{head}; secret columns: not readable", **facts)
    named = listed([str(column) for column in secrecy.readable]) or secrecy.reason
    if required:
        return failed(
            f"{head}; secret columns READABLE: {named}: query_mysql executes nothing until the"
            " account is granted SELECT on the other columns only (statements below)",
            **facts,
        )
    facts["warning"] = "secret columns are masked as a best-effort layer"
    return ok(
        f"{head}; secret columns READABLE: {named}: masked as a best-effort layer only"
        " (DIAG_MYSQL_REQUIRE_COLUMN_GRANTS=false)",
        **facts,
    )


def _verdict_report(
    head: str, facts: dict[str, Any], verdict: GrantVerdict | None, require_read_only: bool
) -> ProbeReport:
    read_only = verdict is not None and verdict.read_only
    facts["read_only"] = read_only
    facts["read_only_reason"] = verdict.reason if verdict is not None else None
    if read_only:
        return ok(f"{head}; read-only: yes", **facts)
    reason = verdict.reason if verdict is not None else "unknown"
    if require_read_only:
        return failed(
            f"{head}; read-only: NO ({reason}): query_mysql executes nothing until the account"
            " is granted SELECT only",
            **facts,
        )
    return ok(
        f"{head}; read-only: NO ({reason}), allowed by DIAG_MYSQL_REQUIRE_READ_ONLY=false", **facts
    )
