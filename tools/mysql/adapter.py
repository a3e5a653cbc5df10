"""``query_mysql``: one guarded, bounded, read-only SELECT against the business database.

Layers, outermost first, each of which alone should stop a hostile statement (README "The
read-only boundary of query_mysql"):

1. :func:`sre_diag.tools.sql.guard.prepare_sql` refuses anything but one allowlisted SELECT
   (``FORBIDDEN_QUERY``, nothing sent) and returns the guard's own rendering of the checked tree,
   verified byte for byte by a conservative MariaDB lexer; the model's text is never sent.
2. Every pooled connection has multi-statements switched off at the protocol level; the
   statement runs inside ``START TRANSACTION READ ONLY`` … ``ROLLBACK`` with a server-enforced
   time cap (MariaDB ``SET STATEMENT max_statement_time=…``; MySQL ``max_execution_time``), a
   server-side row cap and a ``GROUP_CONCAT`` cap; a statement still running 0.3 s after the cap
   is killed from a separate connection.
3. With ``require_read_only`` (default) the account's effective privileges are read before its
   first statement (roles and, on MariaDB 10.11+, ``PUBLIC`` followed) and re-read every
   ``verdict_refresh_seconds``; an account that can do more than read, or whose grants changed
   since they were first read, executes nothing (``NOT_CONFIGURED``, logged once).

Results are streamed (unbuffered cursor, stopped at the row cap or the byte cap) and projected,
in a worker thread, into :class:`~sre_diag.tools.schemas.MysqlRow`: at most ``max_rows`` rows (the
guard
asks for one more to detect truncation), JSON scalars only, long strings cut visibly, the values
at the output positions the guard marked secret replaced by ``***`` (by position, never by the
label the server returns), and every string passed through :func:`sre_diag.tools.redact.redact`. The
guard's typed pass needs the allowed tables' column types: they are read with the privilege
verdict, which is re-read every ``verdict_refresh_seconds``. Errors become stable codes;
exception text goes to the log only, never to the caller, and the DSN password is never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import logging
import math
import threading
import time as clock
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiomysql

from sre_diag.log import log_failure
from sre_diag.tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    Failed,
    ProbeReport,
    Ready,
    ToolName,
)
from sre_diag.tools.errors import PoolUnavailable
from sre_diag.tools.mysql.codes import classify
from sre_diag.tools.mysql.dsn import MysqlDsn, normalise_allowlist, parse_configured_dsn
from sre_diag.tools.mysql.privileges import GrantVerdict, effective_grants_verdict
from sre_diag.tools.mysql.probe import probe_mysql
from sre_diag.tools.mysql.rows import RowProjection
from sre_diag.tools.mysql.secrecy import (
    VISIBLE_COLUMNS_SQL,
    GrantLine,
    SecrecyVerdict,
    SecretClassifier,
    secrecy_verdict,
)
from sre_diag.tools.mysql.session import (
    BASE_TABLES_SQL,
    GROUP_CONCAT_MAX_LEN,
    ISOLATION,
    PASSWORD_CLAUSE,
    SESSION_INIT,
    QuietCursor,
    QuietStreamingCursor,
    has_public_role,
    multi_statements_off,
    read_schema,
)
from sre_diag.tools.mysql.values import cell_bytes
from sre_diag.tools.redact import redact
from sre_diag.tools.schemas import MysqlInput
from sre_diag.tools.sql.columns import Schema

if TYPE_CHECKING:
    from sre_diag.tools.sql.guard import Prepared, Refused

__all__ = [
    "MAX_RESULT_BYTES",
    "MIN_STATEMENT_TIMEOUT_SECONDS",
    "ColumnInfo",
    "MysqlAdapter",
    "TableColumns",
]

logger = logging.getLogger(__name__)

# Extra time the client waits beyond the server cap before it kills the statement itself.
_CLIENT_GRACE_SECONDS = 0.3
# Time allowed for the out-of-band ``KILL QUERY`` (connect + statement).
_KILL_TIMEOUT_SECONDS = 0.6
# The server cap is never rendered below this (a sub-millisecond value would render as 0,
# which MariaDB reads as "no cap").
MIN_STATEMENT_TIMEOUT_SECONDS = 0.01
# Bytes of cell data read from one result before the adapter stops reading (streamed).
MAX_RESULT_BYTES = 1024 * 1024
# Guard decisions kept per adapter, by statement text, for the facts they were made with.
_PREPARED_CACHE = 256


@dataclass(frozen=True, slots=True)
class _ServerFacts:
    """What the adapter learns once per pool: the flavour and the tables the model may read."""

    mariadb: bool
    allowed_tables: frozenset[str]
    privileges: GrantVerdict | None
    secrecy: SecrecyVerdict
    schema: Schema
    grants_digest: str
    read_at: float


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column of the catalogue: name, SQL type, and whether it is classified secret (its
    values are never shown: not readable)."""

    name: str
    type: str
    masked: bool


@dataclass(frozen=True, slots=True)
class TableColumns:
    """One allowed table of the catalogue with its columns (in table order)."""

    table: str
    columns: tuple[ColumnInfo, ...]


class MysqlAdapter:
    """The ``query_mysql`` evidence adapter (safe to call concurrently)."""

    def __init__(
        self,
        dsn: str | None,
        allowed_tables: tuple[str, ...],
        *,
        max_rows: int = 50,
        max_cell_chars: int = 200,
        statement_timeout_seconds: float = 5.0,
        connect_timeout_seconds: float = 5.0,
        pool_max: int = 4,
        require_read_only: bool = True,
        require_column_grants: bool = True,
        secret_columns: tuple[str, ...] = (),
        verdict_refresh_seconds: float = 300.0,
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        if max_rows < 1 or max_cell_chars < 1 or pool_max < 1 or max_result_bytes < 1:
            raise ValueError("max_rows, max_cell_chars, pool_max and max_result_bytes: positive")
        if statement_timeout_seconds <= 0 or connect_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")
        if verdict_refresh_seconds <= 0:
            raise ValueError("verdict_refresh_seconds must be positive")
        self._raw_dsn = dsn
        self._allowed_entries = allowed_tables
        self._dsn = parse_configured_dsn(dsn)
        self._configured_tables = normalise_allowlist(allowed_tables, self._dsn)
        self._max_rows = max_rows
        self._rows = RowProjection(max_cell_chars)
        self._statement_timeout = max(statement_timeout_seconds, MIN_STATEMENT_TIMEOUT_SECONDS)
        self._connect_timeout = connect_timeout_seconds
        self._pool_max = pool_max
        self._require_read_only = require_read_only
        self._require_column_grants = require_column_grants
        self._secret_columns = secret_columns
        self._classifier = SecretClassifier.from_setting(secret_columns)
        self._verdict_refresh = verdict_refresh_seconds
        self._max_result_bytes = max_result_bytes
        self._single_statement: weakref.WeakSet[Any] = weakref.WeakSet()
        self._prepared: OrderedDict[str, tuple[float, Prepared | Refused]] = OrderedDict()
        self._prepared_lock = threading.Lock()
        self._lock = asyncio.Lock()
        self._pool: Any = None
        self._facts: _ServerFacts | None = None
        self._verdict_changed = False
        self._pools_created = 0

    @property
    def tool(self) -> ToolName:
        """This adapter serves ``query_mysql``."""
        return ToolName.QUERY_MYSQL

    @property
    def pools_created(self) -> int:
        """How many pools this instance has created (one in normal operation)."""
        return self._pools_created

    @property
    def pool_open(self) -> bool:
        """Whether a pool currently exists and is not closed."""
        return self._pool is not None and not self._pool.closed

    async def invoke(self, call: AdapterCall[MysqlInput]) -> AdapterResult:
        """Guard, run and project one statement; every expected failure is a ``Failed`` code."""
        if self._dsn is None:
            return Failed(AdapterErrorCode.NOT_CONFIGURED)
        dsn = self._dsn
        try:
            return await self._invoke_connected(call, dsn)
        except PoolUnavailable:
            logger.warning("query_mysql: no connection within %ss (%s)",
                           self._connect_timeout, dsn.redacted())  # fmt: skip
            return Failed(AdapterErrorCode.UNAVAILABLE)
        except Exception as error:  # mapped to a stable code; text stays in the log
            code = classify(error)
            logger.warning(
                "query_mysql failed (%s) on %s: %s: %s",
                code.value, dsn.redacted(), type(error).__name__, redact(str(error)),
            )  # fmt: skip
            return Failed(code)

    async def warm(self) -> None:
        """Import the SQL guard now, in a thread (a service's start), not at the first statement."""
        if self._dsn is not None:
            await asyncio.to_thread(importlib.import_module, "sre_diag.tools.sql.guard")

    async def aclose(self) -> None:
        """Close the pool (if one was created) and wait for its connections to end."""
        async with self._lock:
            pool, self._pool, self._facts = self._pool, None, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    # --- internals --------------------------------------------------------------------------

    def _guard(self, call: AdapterCall[MysqlInput], facts: _ServerFacts) -> Failed | Prepared:
        """The verified text to send, its masks and post-redaction functions, or
        ``FORBIDDEN_QUERY``: ONE guard pass (and one parse of the rendering).

        The guard (sqlglot, ~50 ms to import) loads at the first statement: a run that sends
        none never imports it; ``warm`` imports it ahead for a long-lived process. CPU work:
        the caller runs this in a thread.
        """
        from sre_diag.tools.sql.guard import Prepared, prepare_sql

        sql = call.input.sql
        with self._prepared_lock:
            cached = self._prepared.get(sql)
            if cached is not None and cached[0] == facts.read_at:
                self._prepared.move_to_end(sql)
        if cached is not None and cached[0] == facts.read_at:
            decision = cached[1]  # decided with these very facts: the same verdict
        else:
            decision = prepare_sql(
                sql, database=self._database(), allowed_tables=facts.allowed_tables,
                max_rows=self._max_rows, schema=facts.schema,
            )  # fmt: skip
            with self._prepared_lock:
                self._prepared[sql] = (facts.read_at, decision)
                while len(self._prepared) > _PREPARED_CACHE:
                    self._prepared.popitem(last=False)
        if isinstance(decision, Prepared):
            return decision
        self._log_refusal(call, decision)
        return Failed(AdapterErrorCode.FORBIDDEN_QUERY)

    def _database(self) -> str:
        return self._dsn.database if self._dsn is not None else ""

    @staticmethod
    def _log_refusal(call: AdapterCall[MysqlInput], decision: Refused) -> None:
        logger.info(
            "query_mysql refused %s: %s (%s)",
            _short_id(call.tool_call_id), decision.reason, decision.detail,
        )  # fmt: skip

    async def _invoke_connected(
        self, call: AdapterCall[MysqlInput], dsn: MysqlDsn
    ) -> AdapterResult:
        pool = await self._ensure_pool(dsn)
        conn = await self._acquire(pool)
        reusable = False
        try:
            facts = await self._ensure_facts(conn, dsn)
            if self._refuses(facts):
                reusable = True
                return Failed(AdapterErrorCode.NOT_CONFIGURED)
            prepared = await asyncio.to_thread(self._guard, call, facts)
            if isinstance(prepared, Failed):
                reusable = True
                return prepared
            columns, rows, complete = await self._run(conn, prepared.text, facts.mariadb, dsn)
            reusable = complete
        finally:
            if not reusable:
                conn.close()  # unknown protocol/transaction state, or a result left unread
            pool.release(conn)
        if len(columns) != len(prepared.masked):
            logger.error("query_mysql: result has %d columns, the checked projection %d",
                         len(columns), len(prepared.masked))  # fmt: skip
            return Failed(AdapterErrorCode.INTERNAL)
        truncated = len(rows) > self._max_rows or not complete
        items = await asyncio.to_thread(
            self._rows.project, columns, rows[: self._max_rows], prepared.masked, prepared.post
        )
        return Ready(items=items, truncated=truncated)

    def _refuses(self, facts: _ServerFacts) -> bool:
        """No statement runs for an account that can do more than read, that can read a column
        classified secret (with ``require_column_grants``), or whose grants changed since the
        adapter first read them."""
        if self._verdict_changed:
            return True
        if self._require_column_grants and not facts.secrecy.passes:
            return True
        return facts.privileges is not None and not facts.privileges.read_only

    async def read_only_verdict(self) -> GrantVerdict | None:
        """The account's privilege verdict (re-read every ``verdict_refresh_seconds``); None
        when not configured.

        For ``check`` and for the log: the adapter executes nothing with an account that can do
        more than read while ``require_read_only`` holds.
        """
        found = await self.verdicts()
        return found[0] if found is not None else None

    async def verdicts(self) -> tuple[GrantVerdict | None, SecrecyVerdict] | None:
        """The read-only verdict (None when not required) and the secrecy verdict, as last
        read (re-read every ``verdict_refresh_seconds``); None when not configured."""
        if self._dsn is None:
            return None
        pool = await self._ensure_pool(self._dsn)
        conn = await self._acquire(pool)
        try:
            facts = await self._ensure_facts(conn, self._dsn)
        except BaseException:
            conn.close()
            raise
        finally:
            pool.release(conn)
        return facts.privileges, facts.secrecy

    async def probe(self) -> ProbeReport:
        """For ``check``: reachable, server kind, the allowed tables present, and the read-only
        verdict, each step bounded by ``connect_timeout_seconds``
        (:mod:`sre_diag.tools.mysql.probe`)."""
        return await probe_mysql(
            self._dsn, self._allowed_entries, require_read_only=self._require_read_only,
            require_column_grants=self._require_column_grants,
            verdict=self._probe_verdicts, seconds=self._connect_timeout,
        )  # fmt: skip

    async def _probe_verdicts(self) -> tuple[GrantVerdict | None, SecrecyVerdict] | None:
        """The verdicts ``check`` reports: the read-only one is read even when
        ``require_read_only`` is off (then by a twin that reads the grants, closed after)."""
        if self._require_read_only:
            return await self.verdicts()
        twin = MysqlAdapter(
            self._raw_dsn, self._allowed_entries, connect_timeout_seconds=self._connect_timeout,
            secret_columns=self._secret_columns,
        )  # fmt: skip
        try:
            return await twin.verdicts()
        finally:
            await twin.aclose()

    async def catalogue(self, limit: int) -> list[TableColumns] | None:
        """The allowed tables the account can see, with their columns and types (columns
        classified secret marked not readable), for the tool description; ``None`` when not
        configured.

        Read through the same read-only account from ``information_schema.COLUMNS``, restricted
        to the DSN database and the allowed tables (at most ``limit`` columns): names and types
        only, never a row of data. An account refused by a verdict gets no catalogue: raises
        ``PermissionError``; connection or server failures raise.
        """
        if self._dsn is None:
            return None
        dsn = self._dsn
        pool = await self._ensure_pool(dsn)
        conn = await self._acquire(pool)
        try:
            facts = await self._ensure_facts(conn, dsn)
            if self._refuses(facts):
                raise PermissionError("the account fails the read-only or the secrecy verdict")
            rows = await self._columns(conn, dsn.database, sorted(facts.allowed_tables), limit)
        except BaseException:
            conn.close()
            raise
        finally:
            pool.release(conn)
        tables: dict[str, list[ColumnInfo]] = {}
        for table, column, column_type in rows:
            name = str(column)
            tables.setdefault(str(table), []).append(
                ColumnInfo(name, str(column_type), masked=self._classifier.is_secret(
                    str(table), name))
            )
        return [TableColumns(table, tuple(columns)) for table, columns in tables.items()]

    async def _columns(
        self, conn: Any, database: str, tables: list[str], limit: int
    ) -> list[tuple[Any, ...]]:
        if not tables:
            return []
        marks = ", ".join(["%s"] * len(tables))
        sql = (
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS"
            f" WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({marks})"
            f" ORDER BY TABLE_NAME, ORDINAL_POSITION LIMIT {int(limit)}"
        )
        async with asyncio.timeout(self._statement_timeout + _CLIENT_GRACE_SECONDS):
            async with conn.cursor() as cur:
                await cur.execute(sql, (database, *tables))
                return list(await cur.fetchall())

    async def _ensure_pool(self, dsn: MysqlDsn) -> Any:
        """Create the single pool on first use; connections are opened lazily by the pool."""
        async with self._lock:
            if self._pool is None:
                self._pool = await aiomysql.create_pool(
                    minsize=0,
                    maxsize=self._pool_max,
                    host=dsn.host,
                    port=dsn.port,
                    user=dsn.user,
                    password=dsn.password,
                    db=dsn.database,
                    charset="utf8mb4",
                    autocommit=True,
                    connect_timeout=self._connect_timeout,
                    init_command=SESSION_INIT,
                    pool_recycle=300,
                    local_infile=False,
                )
                self._pools_created += 1
            return self._pool

    async def _acquire(self, pool: Any) -> Any:
        """A connection within the connect timeout, switched to one statement per request and
        pinned to READ COMMITTED.

        A full pool or a dead server is UNAVAILABLE.
        """
        try:
            async with asyncio.timeout(self._connect_timeout):
                conn = await pool.acquire()
        except TimeoutError:
            raise PoolUnavailable from None
        if conn not in self._single_statement:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    await multi_statements_off(conn)
                    async with conn.cursor() as cur:
                        await cur.execute(ISOLATION)
            except BaseException:
                conn.close()
                pool.release(conn)
                raise
            self._single_statement.add(conn)
        return conn

    async def _ensure_facts(self, conn: Any, dsn: MysqlDsn) -> _ServerFacts:
        """Flavour, allowed tables, their schema and the privilege verdict, before any query;
        re-read every ``verdict_refresh_seconds``. A change of the grants disables the adapter
        for good (logged once)."""
        async with self._lock:
            old = self._facts
            if old is not None and clock.monotonic() - old.read_at < self._verdict_refresh:
                return old
            async with asyncio.timeout(self._statement_timeout + _CLIENT_GRACE_SECONDS):
                async with conn.cursor(QuietCursor) as cur:
                    facts = await self._read_facts(cur, dsn)
            self._facts = facts
            self._log_facts(old, facts, dsn)
            return facts

    async def _read_facts(self, cur: Any, dsn: MysqlDsn) -> _ServerFacts:
        await cur.execute("SELECT VERSION()")
        version = str((await cur.fetchone())[0])
        mariadb = "mariadb" in version.lower()
        lines: list[GrantLine] = []
        verdict, digest = await self._privileges(cur, has_public_role(version), lines)
        privileges, digest = (verdict, digest) if self._require_read_only else (None, "")
        secrecy = await self._secrecy(cur, lines)
        tables = self._configured_tables
        if tables is None:
            await cur.execute(BASE_TABLES_SQL, (dsn.database,))
            tables = frozenset(str(row[0]) for row in await cur.fetchall())
        schema = await read_schema(cur, dsn.database, tables, self._classifier)
        return _ServerFacts(
            mariadb=mariadb, allowed_tables=tables, privileges=privileges, secrecy=secrecy,
            schema=schema, grants_digest=digest, read_at=clock.monotonic(),
        )  # fmt: skip

    async def _secrecy(self, cur: Any, lines: list[GrantLine]) -> SecrecyVerdict:
        """Which columns classified secret the session can read (:mod:`.secrecy`)."""
        await cur.execute("SELECT CURRENT_USER()")
        user, _, host = str((await cur.fetchone())[0]).rpartition("@")
        await cur.execute(VISIBLE_COLUMNS_SQL)
        visible = [(str(a), str(b), str(c)) for a, b, c in await cur.fetchall()]
        account = f"'{user}'@'{host}'"
        return secrecy_verdict(visible, lines, self._classifier, account=account)

    def _log_facts(self, old: _ServerFacts | None, facts: _ServerFacts, dsn: MysqlDsn) -> None:
        privileges = facts.privileges
        if old is not None and old.grants_digest != facts.grants_digest:
            if not self._verdict_changed:
                logger.error(
                    "query_mysql disabled: the grants of %s changed while running (%s);"
                    " restart after checking them", dsn.user,
                    privileges.reason if privileges is not None else "unknown",
                )  # fmt: skip
            self._verdict_changed = True
        elif old is None and privileges is not None and not privileges.read_only:
            logger.error(
                "query_mysql disabled: the account %s is not read-only (%s); grant it SELECT"
                " only, or set DIAG_MYSQL_REQUIRE_READ_ONLY=false (guard tests only)",
                dsn.user, privileges.reason,
            )  # fmt: skip
        elif old is None and not facts.secrecy.passes:
            self._log_secrecy(facts.secrecy, dsn)
        elif old is None:
            logger.info("query_mysql: %d allowed tables", len(facts.allowed_tables))

    def _log_secrecy(self, secrecy: SecrecyVerdict, dsn: MysqlDsn) -> None:
        names = ", ".join(str(column) for column in secrecy.readable[:8]) or secrecy.reason
        if self._require_column_grants:
            logger.error(
                "query_mysql disabled: the account %s can read columns classified secret (%s);"
                " grant SELECT on the other columns only (`sre-diag check` prints the"
                " statements), or set DIAG_MYSQL_REQUIRE_COLUMN_GRANTS=false", dsn.user, names,
            )  # fmt: skip
        else:
            logger.warning(
                "query_mysql: the account %s can read columns classified secret (%s); they are"
                " masked as a best-effort layer (DIAG_MYSQL_REQUIRE_COLUMN_GRANTS=false)",
                dsn.user, names,
            )  # fmt: skip

    @staticmethod
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

    async def _run(
        self, conn: Any, sql: str, mariadb: bool, dsn: MysqlDsn
    ) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        """Execute inside a read-only transaction under server and client time caps.

        The result is streamed (unbuffered cursor): reading stops at the row cap or once the
        cells read reach ``max_result_bytes``; ``complete`` is false when rows were left unread
        (the caller then closes the connection instead of reusing it). The server cap stops the
        statement; should it still run when the client's own timer (cap + 0.3 s) fires, the
        statement is killed from a separate connection, so it never outlives its cap by a second.
        """
        cap_rows = self._max_rows + 1
        try:
            async with asyncio.timeout(self._statement_timeout + _CLIENT_GRACE_SECONDS):
                cur = await conn.cursor(QuietStreamingCursor)
                # On any failure the caller closes the connection, which ends the transaction
                # server-side; a ROLLBACK on a half-read connection could block.
                await cur.execute("START TRANSACTION READ ONLY")
                await cur.execute(self._capped(sql, cap_rows, mariadb))
                if not mariadb:
                    await cur.execute(sql)
                columns = [str(column[0]) for column in cur.description or ()]
                rows, complete = await self._read_rows(cur, cap_rows)
                if complete:
                    await cur.execute("ROLLBACK")
                    await cur.close()
        except TimeoutError:
            await self._kill_query(conn, dsn)
            raise
        return columns, rows, complete

    def _capped(self, sql: str, cap_rows: int, mariadb: bool) -> str:
        """MariaDB: the statement under ``SET STATEMENT``; MySQL: the session caps (the statement
        follows). The time cap is rounded UP to the millisecond, never to 0 (no cap)."""
        millis = max(1, math.ceil(self._statement_timeout * 1000))
        caps = f"sql_select_limit={cap_rows}, group_concat_max_len={GROUP_CONCAT_MAX_LEN}"
        if mariadb:
            return f"SET STATEMENT max_statement_time={millis / 1000:.3f}, {caps} FOR {sql}"
        return f"SET SESSION max_execution_time={millis}, {caps}"

    async def _read_rows(self, cur: Any, cap_rows: int) -> tuple[list[tuple[Any, ...]], bool]:
        rows: list[tuple[Any, ...]] = []
        size = 0
        while True:
            row = await cur.fetchone()
            if row is None:
                return rows, True
            rows.append(tuple(row))
            size += sum(cell_bytes(value) for value in row)
            if len(rows) > cap_rows or size >= self._max_result_bytes:
                return rows, False

    async def _kill_query(self, conn: Any, dsn: MysqlDsn) -> None:
        """``KILL QUERY`` the statement of ``conn`` from a fresh connection (own threads only)."""
        thread_id = int(conn.thread_id())
        try:
            async with asyncio.timeout(_KILL_TIMEOUT_SECONDS):
                killer = await aiomysql.connect(
                    host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password,
                    connect_timeout=_KILL_TIMEOUT_SECONDS,
                )  # fmt: skip
                try:
                    async with killer.cursor() as cur:
                        await cur.execute("KILL QUERY %s", (thread_id,))
                finally:
                    killer.close()
        except Exception as error:  # the connection is closed by the caller in any case
            log_failure(logger, logging.WARNING, "query_mysql: KILL QUERY failed: %s", exc=error)


def _short_id(tool_call_id: str) -> str:
    """A tool call id bounded for the log."""
    return tool_call_id[:64]
