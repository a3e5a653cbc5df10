"""The MySQL sink: one row per run in ``diag_audit`` of a writable audit account's database.

One short connection per record, so nothing stale outlives a failure: a server restart, a
dropped table or a killed session costs at most that record. The table is created when an
insert finds it missing (error 1146), then the insert is retried once, so a first failed write
or a later ``DROP`` never loses the records after it. The session's lock waits are capped below
``DIAG_AUDIT_TIMEOUT_SECONDS`` (another session's ``LOCK TABLES diag_audit WRITE`` ends in error
1205, not a day's wait); the audit writer's timeout bounds the rest (connect, a server that
never greets, the login, the insert) and closes the connection when it fires.

Every column is bounded to its size and every value is valid UTF-8; the record is at most
``MAX_RECORD_BYTES``. Failures raise ``AuditWriteError`` with the MySQL error code and what the
sink was doing; the DSN's password never appears in a reason.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sre_diag.audit.errors import MysqlAuditFailure
from sre_diag.audit.record import (
    MAX_RUN_ID_CHARS,
    MAX_SESSION_ID_CHARS,
    bounded_id,
    encode_record,
    safe_text,
)
from sre_diag.errors import ConfigError
from sre_diag.log import failure_reason
from sre_diag.tools._compat import connect_prepared

__all__ = ["MysqlAuditSink"]

_log = logging.getLogger(__name__)

AUDIT_TABLE = """
CREATE TABLE IF NOT EXISTS diag_audit (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  kind VARCHAR(16) NOT NULL,
  run_id VARCHAR(64) NOT NULL,
  session_id VARCHAR(255) NOT NULL,
  outcome VARCHAR(16) NOT NULL,
  recorded_at DATETIME(6) NOT NULL,
  record LONGTEXT NOT NULL,
  KEY diag_audit_run (run_id),
  KEY diag_audit_session (session_id),
  KEY diag_audit_recorded (recorded_at)
) DEFAULT CHARSET=utf8mb4
"""
_INSERT = (
    "INSERT INTO diag_audit (kind, run_id, session_id, outcome, recorded_at, record)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
_NO_SUCH_TABLE = 1146
_OUTCOME_CHARS = 16
_KIND_CHARS = 16
_MEANINGS = {
    1044: "access denied to the database",
    1045: "access denied (user or password)",
    1049: "unknown database",
    1062: "a record with this run_id already exists",
    1142: "the account may not write diag_audit",
    1054: "diag_audit has an older layout (no kind column); drop it to have it recreated",
    1146: "diag_audit does not exist",
    1205: "lock wait timeout: another session holds a lock on diag_audit",
    1406: "a value is too long for its column",
    2003: "cannot reach the server",
    2013: "the server closed the connection",
}
_CONNECTING = "connecting to MySQL (TCP connect, server greeting, login)"
_INSERTING = "inserting into diag_audit (waiting for table locks)"


class MysqlAuditSink:
    """One row per run in ``diag_audit``, bounded by ``timeout_seconds`` (see the module doc)."""

    def __init__(self, dsn: str, *, timeout_seconds: float = 5.0) -> None:
        from sre_diag.tools.mysql import parse_dsn

        try:
            self._dsn = parse_dsn(dsn)
        except ValueError as exc:
            raise ConfigError(f"DIAG_AUDIT_SINK: {exc}") from None
        self._timeout = timeout_seconds
        # Lock waits end on the server before the writer's timeout fires (whole seconds, >= 1).
        lock_wait = max(1, int(timeout_seconds // 2))
        self._session = (
            f"SET SESSION lock_wait_timeout = {lock_wait}, innodb_lock_wait_timeout = {lock_wait}"
        )
        self.phase = "idle"

    async def write(self, record: dict[str, Any]) -> None:
        row = _row(record)
        conn = await self._connect()
        try:
            await self._insert(conn, row)
        finally:
            conn.close()

    async def aclose(self) -> None:
        return None  # one connection per record: nothing stays open

    async def _connect(self) -> Any:
        import aiomysql

        self.phase = _CONNECTING
        d = self._dsn
        conn = aiomysql.Connection(
            host=d.host, port=d.port, user=d.user, password=d.password, db=d.database,
            charset="utf8mb4", autocommit=True, connect_timeout=self._timeout,
            init_command=self._session, local_infile=False,
        )  # fmt: skip
        try:
            # aiomysql.connect() builds this same object but loses it when cancelled during the
            # server greeting, leaking the socket; holding it here lets the timeout close it.
            await connect_prepared(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, Exception):
                raise self._failure(exc) from None
            raise
        return conn

    async def _insert(self, conn: Any, row: tuple[Any, ...]) -> None:
        self.phase = _INSERTING
        try:
            await self._execute(conn, _INSERT, row)
        except MysqlAuditFailure as failure:
            if failure.code != _NO_SUCH_TABLE:
                raise
            self.phase = "creating the missing diag_audit table"
            await self._execute(conn, AUDIT_TABLE, None)
            _log.warning("audit: diag_audit was missing in %s; created it", self._dsn.database)
            self.phase = _INSERTING
            await self._execute(conn, _INSERT, row)

    async def _execute(self, conn: Any, sql: str, args: tuple[Any, ...] | None) -> None:
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql, args)
        except Exception as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: Exception) -> MysqlAuditFailure:
        """The reason, without the raw response beyond a bounded message, never the password."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        message = str(exc.args[1]) if len(exc.args) > 1 else ""
        if self._dsn.password:
            message = message.replace(self._dsn.password, "***")
        meaning = _MEANINGS.get(code or 0) or safe_text(message, 160) or failure_reason(exc)
        where = f"{self._dsn.host}:{self._dsn.port}/{self._dsn.database}"
        label = f"MySQL error {code}" if code is not None else failure_reason(exc)
        return MysqlAuditFailure(f"{label}: {meaning}, while {self.phase} at {where}", code)


def _row(record: dict[str, Any]) -> tuple[str, str, str, str, datetime, str]:
    """The column values, each within its column: ids cut with a hash, text valid UTF-8."""
    try:
        recorded = datetime.fromisoformat(str(record.get("recorded_at")))
    except ValueError:
        recorded = datetime.now(UTC)
    if recorded.tzinfo is not None:
        recorded = recorded.astimezone(UTC)
    return (
        safe_text(str(record.get("kind") or "diagnosis"), _KIND_CHARS),
        bounded_id(str(record.get("run_id")), MAX_RUN_ID_CHARS),
        bounded_id(str(record.get("session_id")), MAX_SESSION_ID_CHARS),
        safe_text(str(record.get("outcome")), _OUTCOME_CHARS),
        recorded.replace(tzinfo=None),
        encode_record(record),
    )
