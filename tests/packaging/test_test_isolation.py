"""The suite never meets another run on the machine's servers, and runs in parallel safely.

Two checkouts (or CI beside a developer) share one MariaDB and one machine: every name a test
creates there carries this run's token (``tests.mysql_db.run_name``), Redis is each pytest
process's own (``tests.slack.support.redis_port``), and every module that touches MariaDB is in
the one xdist group that runs its tests one after another (some change server-wide state for a
moment: a grant to PUBLIC, SET GLOBAL).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pymysql

from tests.mysql_db import ADMIN_DSN, RUN, TEST_DATABASE, run_name
from tests.slack.support import redis_port, redis_url

TESTS = Path(__file__).resolve().parents[1]
TOUCHES_MARIADB = re.compile(
    r"\bADMIN_DSN\b|\badmin_dsn_for\b|\bmysql_ro_dsn\b|\breliability_db\b|^import pymysql"
    r"|tests\.audit_support import|tests\.reliability\.evidence import",
    re.M,
)
"""What a module that connects to MariaDB uses (a module that only names this run's database,
``TEST_DATABASE``, in SQL it parses does not connect)."""
# Files that only parse Redis URLs (settings errors, redaction), never connect to one.
PARSES_ONLY = {"test_settings_errors.py", "test_redact.py", "test_test_isolation.py"}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if p.name != "test_test_isolation.py")


def test_every_module_that_touches_mariadb_is_in_its_xdist_group() -> None:
    missing = [
        str(p.relative_to(TESTS))
        for p in _test_modules()
        if TOUCHES_MARIADB.search(p.read_text(encoding="utf-8"))
        and not re.search(r"^pytestmark = MARIADB(_SOLO)?$", p.read_text(encoding="utf-8"), re.M)
    ]
    assert missing == [], f"add `pytestmark = MARIADB` (or MARIADB_SOLO, tests.mysql_db): {missing}"


def test_no_test_talks_to_the_machines_redis() -> None:
    shared = [
        str(p.relative_to(TESTS))
        for p in _test_modules()
        if p.name not in PARSES_ONLY and ":6379" in p.read_text(encoding="utf-8")
    ]
    assert shared == [], f"use tests.slack.support.redis_url() in {shared}"
    assert f":{redis_port()}/" in redis_url(3) and redis_port() != 6379


def test_names_on_the_shared_server_are_this_runs_own() -> None:
    assert TEST_DATABASE == f"diag_test_{RUN}" and run_name("x") == f"x_{RUN}"
    assert re.fullmatch(r"[0-9a-f]{6}", RUN)


def test_no_module_creates_a_fixed_name_on_the_server() -> None:
    fixed = re.compile(
        r"(?:CREATE|DROP) (?:DATABASE|USER|ROLE)(?: IF (?:NOT )?EXISTS)? "
        r"""['`"]?diag_\w+['`"]?(?:@|\s|"|$)"""
    )
    offenders = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if p.name != "test_test_isolation.py" and fixed.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == [], offenders


def test_the_session_database_is_this_runs(mysql_ro_dsn: str) -> None:
    assert mysql_ro_dsn.rsplit("/", 1)[1] == TEST_DATABASE
    parts = urlsplit(ADMIN_DSN)
    connection = pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
    )  # fmt: skip
    with connection, connection.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE %s", (TEST_DATABASE,))
        assert cur.fetchall() == ((TEST_DATABASE,),)


def test_xdist_groups_really_keep_their_tests_on_one_worker(tmp_path: Path) -> None:
    """The MariaDB group only protects anything if the installed pytest and xdist honour it:
    with pytest 9.2 and xdist 3.8, ``--dist loadgroup`` silently spread a group's tests."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.xdist_group('g')\n\n"
        + "".join(f"def test_{n}():\n    pass\n\n" for n in range(8)),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = re.findall(r"\[(gw\d+)\] .*PASSED", done.stdout)
    assert len(workers) == 8 and len(set(workers)) == 1, done.stdout
