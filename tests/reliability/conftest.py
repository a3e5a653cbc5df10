from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.mysql_db import mysql_ro_dsn
from tests.reliability.evidence import ReliabilityDb, create_reliability_db
from tests.reliability.support import OPEN

__all__ = ["mysql_ro_dsn"]


@pytest.fixture(autouse=True)
async def _close_harnesses() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().aclose()


@pytest.fixture(scope="session")
def reliability_db(mysql_ro_dsn: str) -> ReliabilityDb:
    """A separate database with hostile and canary rows, and its own read-only account."""
    return create_reliability_db()
