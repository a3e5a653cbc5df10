"""The session ``query_mysql`` runs in: connection settings, the streaming cursor, the schema read.

Every pooled connection gets :data:`SESSION_INIT` and :data:`ISOLATION`, and has multi-statements
switched off at the protocol level (:func:`multi_statements_off`); results stream through
:class:`QuietStreamingCursor`. :func:`read_schema` reads the allowed tables' column kinds for the
guard's typed pass and :func:`has_public_role` says whether the server has ``PUBLIC`` grants.
"""

from __future__ import annotations

import re
import struct
from typing import Any

import aiomysql
from pymysql.constants import COMMAND

from sre_diag.tools._compat import read_packet, send_command
from sre_diag.tools.mysql.secrecy import SecretClassifier
from sre_diag.tools.sql.columns import ColumnShape, Schema, column_shape

__all__ = [
    "BASE_TABLES_SQL",
    "GROUP_CONCAT_MAX_LEN",
    "ISOLATION",
    "PASSWORD_CLAUSE",
    "SESSION_INIT",
    "QuietCursor",
    "QuietStreamingCursor",
    "has_public_role",
    "multi_statements_off",
    "read_schema",
]


# Largest GROUP_CONCAT result the server may build (the default is 1 MiB, MariaDB's 1 MiB+).
GROUP_CONCAT_MAX_LEN = 4096
# COM_SET_OPTION argument MYSQL_OPTION_MULTI_STATEMENTS_OFF.
MULTI_STATEMENTS_OFF = struct.pack("<H", 1)
# READ COMMITTED: every statement is a non-locking consistent read of the latest committed
# data, whatever the server's global level. Under a global SERIALIZABLE, InnoDB turns plain
# SELECTs inside a transaction into shared-locking reads (writers queue behind the diagnosis);
# REPEATABLE READ would also work but keeps a read view for nothing (one statement a
# transaction) and a diagnosis wants the freshest rows.
SESSION_INIT = (
    "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"
)
ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

# Columns of the allowed tables read for the guard's typed pass.
_MAX_SCHEMA_COLUMNS = 8192
_SCHEMA_SQL = (
    "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH"
    " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({marks})"
    f" ORDER BY TABLE_NAME, ORDINAL_POSITION LIMIT {_MAX_SCHEMA_COLUMNS}"
)
PASSWORD_CLAUSE = re.compile(r" IDENTIFIED (?:BY|VIA|WITH) .*?(?= WITH |$)")
BASE_TABLES_SQL = (
    "SELECT TABLE_NAME FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = %s AND TABLE_TYPE IN ('BASE TABLE', 'VIEW')"
)


class QuietCursor(aiomysql.Cursor):  # type: ignore[misc]  # aiomysql is untyped
    """A buffered cursor that does not run ``SHOW WARNINGS`` after a statement (the facts read:
    ``information_schema`` warns about views whose routines the account may not run)."""

    async def _show_warnings(self, conn: Any) -> None:
        return None


class QuietStreamingCursor(aiomysql.SSCursor):  # type: ignore[misc]  # aiomysql is untyped
    """An unbuffered cursor that does not run ``SHOW WARNINGS`` after a statement.

    aiomysql would send that extra statement and re-raise each server message through
    :mod:`warnings` (a truncated ``GROUP_CONCAT`` is expected here, and server text must not
    travel anywhere but the log). Truncation is reported by the row projection instead.
    """

    async def _show_warnings(self, conn: Any) -> None:
        return None


def has_public_role(version: str) -> bool:
    """MariaDB 10.11 and later have ``PUBLIC`` grants (``SHOW GRANTS FOR PUBLIC``)."""
    if "mariadb" not in version.lower():
        return False
    parts = version.split("-", 1)[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return True  # unknown: ask, and fail closed if the server cannot answer
    return (major, minor) >= (10, 11)


async def read_schema(
    cur: Any, database: str, tables: frozenset[str], classifier: SecretClassifier
) -> Schema:
    """Column kinds, byte lengths and secrecy of the allowed tables' columns the account can
    see, for the guard's typed pass."""
    if not tables:
        return {}
    ordered = sorted(tables)
    await cur.execute(_SCHEMA_SQL.format(marks=", ".join(["%s"] * len(ordered))),
                      (database, *ordered))  # fmt: skip
    schema: dict[str, list[ColumnShape]] = {}
    for table, column, data_type, octets in await cur.fetchall():
        length = int(octets) if octets is not None else None
        secret = classifier.is_secret(str(table), str(column))
        schema.setdefault(str(table), []).append(
            column_shape(str(column), str(data_type), length, secret=secret)
        )
    return {table: tuple(columns) for table, columns in schema.items()}


async def multi_statements_off(conn: Any) -> None:
    """Turn ``CLIENT_MULTI_STATEMENTS`` off on this connection (``COM_SET_OPTION``).

    aiomysql always asks for multi-statements at the handshake and has no option against it;
    with it on, a ``;`` smuggled past every other check would run further statements outside the
    read-only transaction and the time cap. The protocol command makes the server itself refuse
    a second statement in one request (error 1064). It uses aiomysql's packet helpers, which are
    private (``sre_diag.tools._compat``): the version range is pinned in ``pyproject.toml``, a
    canary watches the helpers and a test proves the effect.
    """
    await send_command(conn, COMMAND.COM_SET_OPTION, MULTI_STATEMENTS_OFF)
    packet = await read_packet(conn)  # an ERR packet raises here
    if not (packet.is_eof_packet() or packet.is_ok_packet()):
        raise ConnectionError("unexpected answer to COM_SET_OPTION")
