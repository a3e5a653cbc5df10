"""Real-MariaDB fixture for the ``query_mysql`` and CLI tests (no mocks).

The session fixture runs ``scripts/setup_mysql.py`` into the database ``diag_test`` with the
read-only account ``diag_test_ro``. The admin DSN comes from ``DIAG_TEST_MYSQL_ADMIN_DSN``
(default ``mysql://root@127.0.0.1:3306``). An unreachable server FAILS the tests on purpose: a
skipped security suite is indistinguishable from a passing one in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_DATABASE = "diag_test"
TEST_RO_USER = "diag_test_ro"
TEST_RO_PASSWORD = "diag-test-ro-Pw1"
ADMIN_DSN = os.environ.get("DIAG_TEST_MYSQL_ADMIN_DSN", "mysql://root@127.0.0.1:3306")


def admin_dsn_for(database: str) -> str:
    """The admin DSN pointed at ``database`` (for tests that need more than the RO grants)."""
    parts = urlsplit(ADMIN_DSN)
    return f"{parts.scheme}://{parts.netloc}/{database}"


@pytest.fixture(scope="session")
def mysql_ro_dsn() -> str:
    """Build ``diag_test`` once per session and return the read-only account's DSN."""
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "setup_mysql.py"),
            "--admin-dsn",
            ADMIN_DSN,
            "--database",
            TEST_DATABASE,
            "--ro-user",
            TEST_RO_USER,
            "--ro-password",
            TEST_RO_PASSWORD,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        pytest.fail(
            "MariaDB/MySQL test server not usable (set DIAG_TEST_MYSQL_ADMIN_DSN or start "
            f"mariadbd): {completed.stderr.strip() or completed.stdout.strip()}",
            pytrace=False,
        )
    return completed.stdout.strip()
