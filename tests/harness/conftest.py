from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.harness.support import OPEN_HARNESSES


@pytest.fixture(autouse=True)
async def _close_harnesses() -> AsyncIterator[None]:
    yield
    while OPEN_HARNESSES:
        await OPEN_HARNESSES.pop().aclose()
