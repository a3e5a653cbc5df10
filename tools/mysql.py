"""``query_mysql``: one guarded, bounded, read-only SELECT against the business database.

Layers, outermost first, each of which alone should stop a hostile statement:

1. :mod:`tools.sql_guard` refuses anything but one allowlisted SELECT; a refusal is
   ``FORBIDDEN_QUERY`` and nothing is sent. The server receives the guard's own rendering of the
   checked tree (re-checked once more), never the model's text.
2. The statement runs inside ``START TRANSACTION READ ONLY`` … ``ROLLBACK`` with a server-enforced
   execution time cap (MariaDB ``SET STATEMENT max_statement_time=…``; MySQL
   ``max_execution_time``) and a server-side row cap, plus a client-side deadline slightly above.
3. The DSN is meant to be a read-only account granted ``SELECT`` on the allowed tables only
   (``scripts/setup_mysql.py`` creates one), so the server refuses whatever slips through.

Results are projected into :class:`~tools.schemas.MysqlRow`: at most ``max_rows`` rows (the guard
asks for one more to detect truncation), JSON scalars only, long strings cut visibly, values of
secret-looking columns replaced by ``***`` and every string passed through
:func:`tools.redact.redact`. Errors become stable codes; exception text goes to the log only,
never to the caller, and the DSN password is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlsplit

import aiomysql

from tools.base import AdapterCall, AdapterErrorCode, AdapterResult, Failed, Ready, ToolName
from tools.redact import redact
from tools.schemas import JsonScalar, MysqlInput, MysqlRow
from tools.sql_guard import Allowed, check_sql, is_secret_column, limit_rows

logger = logging.getLogger(__name__)

MASK = "***"
TRUNCATION_MARK = "…[truncated]"
# Extra time the client waits beyond the server cap before giving up on the connection.
_CLIENT_GRACE_SECONDS = 2.0
_SESSION_INIT = (
    "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"
)
_BASE_TABLES_SQL = (
    "SELECT TABLE_NAME FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'"
)

# Server / client error numbers, grouped by the stable code they map to.
_TIMEOUT_ERRORS = frozenset({1969, 3024, 1317, 1028})
_UNAVAILABLE_ERRORS = frozenset(
    {1040, 1045, 1053, 1129, 1130, 1203, 1226, 2002, 2003, 2005, 2006, 2013, 2055}
)
_FORBIDDEN_ERRORS = frozenset({1044, 1142, 1143, 1227, 1370, 1792})
_INVALID_INPUT_ERRORS = frozenset(
    {1052, 1054, 1055, 1060, 1064, 1066, 1111, 1140, 1146, 1222, 1241, 1242, 1248, 1305,
     1582, 1583, 1630}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MysqlDsn:
    """The parts of ``mysql://user:password@host:port/database``."""

    host: str
    port: int
    user: str
    password: str
    database: str

    def redacted(self) -> str:
        """The DSN without its password, safe for logs."""
        return f"mysql://{self.user}:***@{self.host}:{self.port}/{self.database}"


def parse_dsn(dsn: str) -> MysqlDsn:
    """Parse a ``mysql://`` DSN; raises ``ValueError`` (without echoing the DSN) when malformed."""
    parts = urlsplit(dsn.strip())
    if parts.scheme not in {"mysql", "mariadb"}:
        raise ValueError("DSN scheme must be mysql://")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ValueError("DSN port is not a number") from None
    database = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not parts.username or not database or "/" in database:
        raise ValueError("DSN needs user, host and exactly one database")
    return MysqlDsn(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
        database=database,
    )


@dataclass(frozen=True, slots=True)
class _ServerFacts:
    """What the adapter learns once per pool: the flavour and the tables the model may read."""

    mariadb: bool
    allowed_tables: frozenset[str]


class _Unavailable(Exception):
    """The pool could not hand out a connection in time."""


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
    ) -> None:
        if max_rows < 1 or max_cell_chars < 1 or pool_max < 1:
            raise ValueError("max_rows, max_cell_chars and pool_max must be positive")
        if statement_timeout_seconds <= 0 or connect_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")
        self._dsn = _parse_configured_dsn(dsn)
        self._configured_tables = _normalise_allowlist(allowed_tables, self._dsn)
        self._max_rows = max_rows
        self._max_cell_chars = max_cell_chars
        self._statement_timeout = statement_timeout_seconds
        self._connect_timeout = connect_timeout_seconds
        self._pool_max = pool_max
        self._lock = asyncio.Lock()
        self._pool: Any = None
        self._facts: _ServerFacts | None = None
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
        checked: str | None = None
        if self._configured_tables is not None:
            # A known allowlist: refuse before touching the pool, and send what was checked.
            early = await self._guard_off_loop(call, dsn.database, self._configured_tables)
            if isinstance(early, Failed):
                return early
            checked = early
        try:
            return await self._invoke_connected(call, dsn, checked)
        except _Unavailable:
            logger.warning("query_mysql: no connection within %ss (%s)",
                           self._connect_timeout, dsn.redacted())  # fmt: skip
            return Failed(AdapterErrorCode.UNAVAILABLE)
        except Exception as error:  # mapped to a stable code; text stays in the log
            code = _classify(error)
            logger.warning(
                "query_mysql failed (%s) on %s: %s: %s",
                code.value, dsn.redacted(), type(error).__name__, redact(str(error)),
            )  # fmt: skip
            return Failed(code)

    async def aclose(self) -> None:
        """Close the pool (if one was created) and wait for its connections to end."""
        async with self._lock:
            pool, self._pool, self._facts = self._pool, None, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    # --- internals --------------------------------------------------------------------------

    async def _guard_off_loop(
        self, call: AdapterCall[MysqlInput], database: str, tables: frozenset[str]
    ) -> Failed | str:
        """The guard parses with sqlglot (~5 ms, twice): in a thread, off the event loop."""
        return await asyncio.to_thread(self._guard, call, database, tables)

    def _guard(
        self, call: AdapterCall[MysqlInput], database: str, tables: frozenset[str]
    ) -> Failed | str:
        """The text to send, or ``FORBIDDEN_QUERY`` when the guard refuses it."""
        decision = check_sql(call.input.sql, database=database, allowed_tables=tables)
        if isinstance(decision, Allowed):
            rendered = limit_rows(decision.expression, self._max_rows)
            # The rendering must itself pass: a generator quirk must not open a gap.
            if isinstance(check_sql(rendered, database=database, allowed_tables=tables), Allowed):
                return rendered
            logger.warning("query_mysql: rendering of %s did not re-check", call.tool_call_id)
            return Failed(AdapterErrorCode.FORBIDDEN_QUERY)
        logger.info(
            "query_mysql refused %s: %s (%s)", call.tool_call_id, decision.reason, decision.detail
        )
        return Failed(AdapterErrorCode.FORBIDDEN_QUERY)

    async def _invoke_connected(
        self, call: AdapterCall[MysqlInput], dsn: MysqlDsn, checked: str | None
    ) -> AdapterResult:
        pool = await self._ensure_pool(dsn)
        conn = await self._acquire(pool)
        try:
            facts = await self._ensure_facts(conn, dsn)
            sql: Failed | str = (
                checked
                if checked is not None
                else await self._guard_off_loop(call, dsn.database, facts.allowed_tables)
            )
            if isinstance(sql, Failed):
                return sql
            columns, rows = await self._run(conn, sql, facts.mariadb)
        except BaseException:
            conn.close()  # unknown protocol/transaction state: never reuse this connection
            raise
        finally:
            pool.release(conn)
        truncated = len(rows) > self._max_rows
        return Ready(items=self._project(columns, rows[: self._max_rows]), truncated=truncated)

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
                    init_command=_SESSION_INIT,
                    pool_recycle=300,
                )
                self._pools_created += 1
            return self._pool

    async def _acquire(self, pool: Any) -> Any:
        """A connection within the connect timeout; a full pool or dead server is UNAVAILABLE."""
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await pool.acquire()
        except TimeoutError:
            raise _Unavailable from None

    async def _ensure_facts(self, conn: Any, dsn: MysqlDsn) -> _ServerFacts:
        """Detect the flavour and (for an empty allowlist) the base tables, once per pool."""
        async with self._lock:
            if self._facts is not None:
                return self._facts
            async with asyncio.timeout(self._statement_timeout + _CLIENT_GRACE_SECONDS):
                async with conn.cursor() as cur:
                    await cur.execute("SELECT VERSION()")
                    version = str((await cur.fetchone())[0])
                    tables = self._configured_tables
                    if tables is None:
                        await cur.execute(_BASE_TABLES_SQL, (dsn.database,))
                        tables = frozenset(str(row[0]) for row in await cur.fetchall())
            self._facts = _ServerFacts(mariadb="mariadb" in version.lower(), allowed_tables=tables)
            logger.info("query_mysql: %s, %d allowed tables", version, len(tables))
            return self._facts

    async def _run(
        self, conn: Any, sql: str, mariadb: bool
    ) -> tuple[list[str], Sequence[Sequence[Any]]]:
        """Execute inside a read-only transaction under server and client time caps."""
        cap_rows = self._max_rows + 1
        async with asyncio.timeout(self._statement_timeout + _CLIENT_GRACE_SECONDS):
            async with conn.cursor() as cur:
                # On any failure the caller closes the connection, which ends the transaction
                # server-side; a ROLLBACK on a half-read connection could block forever.
                await cur.execute("START TRANSACTION READ ONLY")
                if mariadb:
                    await cur.execute(
                        f"SET STATEMENT max_statement_time={self._statement_timeout:.3f},"
                        f" sql_select_limit={cap_rows} FOR {sql}"
                    )
                else:
                    millis = max(1, math.ceil(self._statement_timeout * 1000))
                    await cur.execute(
                        f"SET SESSION max_execution_time={millis}, sql_select_limit={cap_rows}"
                    )
                    await cur.execute(sql)
                rows = await cur.fetchmany(cap_rows)
                columns = [str(column[0]) for column in cur.description or ()]
                await cur.execute("ROLLBACK")
        return columns, rows

    def _project(self, columns: list[str], rows: Sequence[Sequence[Any]]) -> list[MysqlRow]:
        names = _unique_names(columns)
        secret = [is_secret_column(name) for name in columns]
        return [
            MysqlRow(
                cells={
                    name: MASK if hidden else self._cell(value)
                    for name, hidden, value in zip(names, secret, row, strict=True)
                }
            )
            for row in rows
        ]

    def _cell(self, value: object) -> JsonScalar:
        scalar = to_json_scalar(value)
        if isinstance(scalar, str):
            return self._bounded_text(scalar)
        return scalar

    def _bounded_text(self, text: str) -> str:
        """Redact, then cut to ``max_cell_chars`` with a visible mark.

        The text is pre-cut with headroom first so that redaction never scans megabytes, and
        redacted before the final cut so a secret is never split out of recognition.
        """
        limit = self._max_cell_chars
        cleaned = redact(text[: limit * 4 + 256])
        if len(cleaned) > limit or len(text) > limit * 4 + 256:
            return cleaned[:limit] + TRUNCATION_MARK
        return cleaned


def to_json_scalar(value: object) -> JsonScalar:
    """A driver value as a JSON scalar (strings are not yet bounded or redacted)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<binary {len(value)} bytes>"
    if isinstance(value, set | frozenset):
        return ",".join(sorted(str(item) for item in value))
    return str(value)


def _decimal(value: Decimal) -> JsonScalar:
    """Integral decimals (``SUM`` of integers) as ints, others as floats, non-finite as text."""
    if not value.is_finite():
        return str(value)
    if value == value.to_integral_value() and abs(value) < 2**53:
        return int(value)
    return float(value)


def _duration(value: timedelta) -> str:
    """A MySQL ``TIME`` value (the driver's timedelta) as ``[-]HH:MM:SS[.ffffff]``."""
    sign = "-" if value < timedelta(0) else ""
    micros = abs(value) // timedelta(microseconds=1)
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def _unique_names(columns: list[str]) -> list[str]:
    """Column labels made unique (``id``, ``id#2``) so joined rows lose no cell."""
    seen: dict[str, int] = {}
    names: list[str] = []
    for column in columns:
        seen[column] = seen.get(column, 0) + 1
        names.append(column if seen[column] == 1 else f"{column}#{seen[column]}")
    return names


def _parse_configured_dsn(dsn: str | None) -> MysqlDsn | None:
    """The parsed DSN, or None (→ ``NOT_CONFIGURED``) when unset or malformed."""
    if dsn is None or not dsn.strip():
        return None
    try:
        return parse_dsn(dsn)
    except ValueError as error:
        logger.warning("query_mysql disabled: DIAG_MYSQL_DSN is malformed (%s)", error)
        return None


def _normalise_allowlist(tables: tuple[str, ...], dsn: MysqlDsn | None) -> frozenset[str] | None:
    """The configured allowlist, or None when empty (read from the server on first use).

    Entries may be ``table`` or ``<dsn database>.table``; entries naming another database are
    dropped with a warning, since the guard only ever admits the DSN's own database.
    """
    names: set[str] = set()
    for entry in (t.strip() for t in tables if t.strip()):
        database, _, table = entry.rpartition(".")
        if database and (dsn is None or database != dsn.database):
            logger.warning("query_mysql: ignoring allowlist entry outside the DSN database")
            continue
        names.add(table)
    return frozenset(names) if names else None


def _classify(error: BaseException) -> AdapterErrorCode:
    """Map a driver/server/network failure to a stable code."""
    if isinstance(error, TimeoutError):
        return AdapterErrorCode.TIMEOUT
    number = _error_number(error)
    for codes, result in (
        (_TIMEOUT_ERRORS, AdapterErrorCode.TIMEOUT),
        (_UNAVAILABLE_ERRORS, AdapterErrorCode.UNAVAILABLE),
        (_FORBIDDEN_ERRORS, AdapterErrorCode.FORBIDDEN_QUERY),
        (_INVALID_INPUT_ERRORS, AdapterErrorCode.INVALID_INPUT),
    ):
        if number in codes:
            return result
    if isinstance(error, ConnectionError | OSError):
        return AdapterErrorCode.UNAVAILABLE
    return AdapterErrorCode.INTERNAL


def _error_number(error: BaseException) -> int | None:
    """The MySQL error number carried by pymysql errors (``args[0]``), if any."""
    args = getattr(error, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None
