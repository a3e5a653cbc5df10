"""Every touch of a private aiomysql internal, one named function each.

aiomysql offers no public way to do either; the version range is pinned in ``pyproject.toml``.
Each function says what it relies on; each has a canary in
``tests/harness/test_compat_canaries.py`` that fails loudly when the installed aiomysql changes
that private thing. (The harness's own touches are in ``sre_diag.harness._compat``; the tools import
nothing of the harness.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["connect_prepared", "read_packet", "send_command"]


async def connect_prepared(conn: Any) -> None:
    """Open an ``aiomysql.Connection`` the caller built (and so can close on a timeout).

    Relies on ``aiomysql.Connection._connect()``: what ``aiomysql.connect()`` awaits on the object
    it builds (socket, server greeting, authentication, ``init_command``).
    """
    await conn._connect()  # pyright: ignore[reportPrivateUsage]


async def send_command(conn: Any, command: int, argument: bytes) -> None:
    """Send one protocol command packet (``COM_*``) with its argument bytes.

    Relies on ``aiomysql.Connection._execute_command(command, sql)`` accepting ``bytes``.
    """
    await conn._execute_command(command, argument)  # pyright: ignore[reportPrivateUsage]


async def read_packet(conn: Any) -> Any:
    """The server's next packet; an ERR packet raises the matching ``pymysql`` error.

    Relies on ``aiomysql.Connection._read_packet()`` returning a packet with
    ``is_ok_packet()`` / ``is_eof_packet()``.
    """
    return await conn._read_packet()  # pyright: ignore[reportPrivateUsage]
