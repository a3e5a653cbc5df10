"""Shared fixtures: the scripted model server (fails on extra requests and unused steps)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer
from tests.mysql_db import MARIADB, drop_run_objects, mysql_ro_dsn

__all__ = ["StartServer", "model_server", "mysql_ro_dsn"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses this run's business database runs in the MariaDB group (xdist)."""
    for item in items:
        if "mysql_ro_dsn" in getattr(item, "fixturenames", ()):
            for mark in MARIADB:
                item.add_marker(mark)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the run itself, not one xdist worker
        drop_run_objects()


StartServer = Callable[[Sequence[ModelStep]], Awaitable[ScriptedModelServer]]


@pytest.fixture
async def model_server() -> AsyncIterator[StartServer]:
    """Start scripted servers; at teardown each must have served exactly its script."""
    servers: list[ScriptedModelServer] = []

    async def start(steps: Sequence[ModelStep]) -> ScriptedModelServer:
        server = await ScriptedModelServer(list(steps)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()
    for server in servers:
        server.assert_complete()
