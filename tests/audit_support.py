"""Broken audit sinks as they happen in production, for the audit tests (no mocks).

- a real MariaDB database per test module (``diag_test_audit_*``), with ``diag_audit`` locked by
  another session (``LOCK TABLES diag_audit WRITE``) or dropped;
- a TCP server on loopback that accepts and never greets (what a wedged MySQL looks like);
- a FIFO, a symlink or a directory where the day's JSON-lines file should be.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pymysql

from sre_diag.audit.mysql import AUDIT_TABLE
from tests.mysql_db import ADMIN_DSN, admin_dsn_for

__all__ = [
    "SilentServer",
    "audit_database",
    "audit_file_names",
    "audit_rows",
    "drop_audit_table",
    "locked_audit_table",
    "make_fifos",
    "make_symlinks",
    "silent_server",
]


def _connect(database: str | None = None) -> Any:
    parts = urlsplit(ADMIN_DSN)
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=database,
        autocommit=True,
        connect_timeout=5,
    )


def audit_database(name: str, *, with_table: bool = False) -> str:
    """A fresh database ``name`` (``diag_test_audit_*``); the admin DSN pointing at it."""
    assert name.startswith("diag_test_audit_")
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
            if with_table:
                cur.execute(f"USE {name}")
                cur.execute(AUDIT_TABLE)
    finally:
        conn.close()
    return admin_dsn_for(name)


def audit_rows(database: str) -> list[dict[str, Any]]:
    """The rows of ``diag_audit``, oldest first, with the record parsed."""
    conn = _connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT run_id, session_id, outcome, record FROM diag_audit ORDER BY recorded_at"
            )
            return [
                {"run_id": r, "session_id": s, "outcome": o, "record": json.loads(rec)}
                for r, s, o, rec in cur.fetchall()
            ]
    finally:
        conn.close()


def drop_audit_table(database: str) -> None:
    conn = _connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE diag_audit")
    finally:
        conn.close()


@contextmanager
def locked_audit_table(database: str) -> Iterator[None]:
    """Another session holds ``LOCK TABLES diag_audit WRITE`` until the block ends."""
    conn = _connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("LOCK TABLES diag_audit WRITE")
        yield
        with conn.cursor() as cur:
            cur.execute("UNLOCK TABLES")
    finally:
        conn.close()


class SilentServer:
    """Accepts TCP connections on loopback and never sends a byte."""

    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)  # held open, silent, until the server closes

    async def start(self) -> SilentServer:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def dsn(self) -> str:
        return f"mysql://audit:audit-pw-SILENT-9f3@127.0.0.1:{self.port}/diag_audit"


@asynccontextmanager
async def silent_server() -> AsyncIterator[SilentServer]:
    server = await SilentServer().start()
    try:
        yield server
    finally:
        await server.close()


def audit_file_names(directory: Path) -> list[Path]:
    """Today's and tomorrow's (UTC) audit file paths: a test may straddle midnight."""
    now = datetime.now(UTC)
    return [directory / f"audit-{day:%Y-%m-%d}.jsonl" for day in (now, now + timedelta(days=1))]


def make_fifos(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = audit_file_names(directory)
    for path in paths:
        os.mkfifo(path)
    return paths


def make_symlinks(directory: Path, target: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = audit_file_names(directory)
    for path in paths:
        path.symlink_to(target)
    return paths
