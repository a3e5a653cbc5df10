"""The ``mysql://user:password@host:port/database`` DSN and the configured table allowlist.

:func:`parse_dsn` never echoes the DSN in its errors; :meth:`MysqlDsn.redacted` is the form that
may be logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["MysqlDsn", "normalise_allowlist", "parse_configured_dsn", "parse_dsn"]

logger = logging.getLogger(__name__)


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


def parse_configured_dsn(dsn: str | None) -> MysqlDsn | None:
    """The parsed DSN, or None (→ ``NOT_CONFIGURED``) when unset or malformed."""
    if dsn is None or not dsn.strip():
        return None
    try:
        return parse_dsn(dsn)
    except ValueError as error:
        logger.warning("query_mysql disabled: DIAG_MYSQL_DSN is malformed (%s)", error)
        return None


def normalise_allowlist(tables: tuple[str, ...], dsn: MysqlDsn | None) -> frozenset[str] | None:
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
