"""``python -m sre_diag check`` as a process, against healthy and broken configurations.

Every backend is real or a process-boundary double: runbook and log folders on disk, a real
MariaDB (own database and accounts, ``diag_test_check_*_<RUN>``), this process's own Redis,
the recording Slack API (its failure knob refuses ``auth.test``), the scripted model server. Each
broken part must be named, with its reason, and no credential may reach stdout or stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pymysql
import pytest
from aiohttp import web

from sre_diag.audit.mysql import AUDIT_TABLE
from sre_diag.doubles.recording_slack import RecordedCall, RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec
from tests.conftest import StartServer
from tests.mysql_db import ADMIN_DSN, MARIADB, run_name
from tests.slack.support import redis_url

pytestmark = MARIADB

REPO = Path(__file__).resolve().parents[2]
DATABASE = run_name("diag_test_check_db")
RO_USER, RO_PASSWORD = run_name("diag_test_check_ro"), "ro-CANARY-pw-5831"
RW_USER, RW_PASSWORD = run_name("diag_test_check_rw"), "rw-CANARY-pw-7712"
AUDIT_USER, AUDIT_PASSWORD = run_name("diag_test_check_audit"), "audit-CANARY-pw-2291"
BOT_TOKEN = "xoxb-CANARY-bot-token-4410"
ADMIN = "CCHECK0001"
OTHER = "CCHECK0002"
SECRETS = (RO_PASSWORD, RW_PASSWORD, AUDIT_PASSWORD, BOT_TOKEN, "CANARY")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Checked:
    code: int
    out: str
    err: str

    @property
    def report(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed

    def part(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(c for c in self.report["checks"] if c["name"] == name)
        return found


async def run_check(tmp_path: Path, *flags: str, **env: str) -> Checked:
    """``check`` in a clean environment (no DIAG_/OPENAI_/SLACK_ from outside, no .env)."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "OPENAI_", "SLACK_"))
    }
    settings = {
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
        **env,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "check", *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**clean, "PYTHONPATH": str(REPO), **settings}, cwd=tmp_path,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    result = Checked(process.returncode, out.decode(), err.decode())
    for secret in SECRETS:
        assert secret not in result.out + result.err
    assert "Traceback" not in result.out + result.err
    return result


# -- fixtures: a MariaDB database with a read-only, a writable and an audit account ---------------


def _admin() -> pymysql.connections.Connection:  # type: ignore[type-arg]
    parts = urlsplit(ADMIN_DSN)
    return pymysql.connect(
        host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
        user=parts.username or "root", password=parts.password or "", autocommit=True,
    )  # fmt: skip


def dsn(user: str, password: str, *, port: int | None = None, database: str = DATABASE) -> str:
    parts = urlsplit(ADMIN_DSN)
    return f"mysql://{user}:{password}@{parts.hostname}:{port or parts.port or 3306}/{database}"


@pytest.fixture(scope="module")
def mysql_accounts() -> Iterator[None]:
    try:
        conn = _admin()
    except pymysql.MySQLError as exc:
        pytest.fail(f"MariaDB/MySQL test server not usable: {exc.args[0]}", pytrace=False)
    statements = [
        f"DROP DATABASE IF EXISTS {DATABASE}",
        f"CREATE DATABASE {DATABASE}",
        f"CREATE TABLE {DATABASE}.deployments (service VARCHAR(64), version VARCHAR(32))",
        f"CREATE TABLE {DATABASE}.incidents (id INT PRIMARY KEY, title VARCHAR(200))",
    ]
    for user, password, grant in (
        (RO_USER, RO_PASSWORD, "SELECT"),
        (RW_USER, RW_PASSWORD, "SELECT, INSERT, UPDATE"),
        (AUDIT_USER, AUDIT_PASSWORD, "SELECT, INSERT, CREATE"),
    ):
        statements += [
            f"DROP USER IF EXISTS '{user}'@'%'",
            f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
            f"GRANT {grant} ON {DATABASE}.* TO '{user}'@'%'",
        ]
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    yield
    with conn.cursor() as cur:
        for user in (RO_USER, RW_USER, AUDIT_USER):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    conn.close()


# -- a Slack double that also knows channel membership -------------------------------------------


@dataclass
class MemberSlackApi(RecordingSlackApi):
    """The recording Slack API, answering ``conversations.info`` with the bot's membership."""

    members: tuple[str, ...] = ()
    known: tuple[str, ...] = (ADMIN, OTHER)

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method != "conversations.info":
            return await super()._handle(request)
        params = request.query if request.method == "GET" else await request.post()
        channel = str(params.get("channel", ""))
        self.calls.append(RecordedCall(method, {"channel": channel}))
        if channel not in self.known:
            return web.json_response({"ok": False, "error": "channel_not_found"})
        info = {"id": channel, "is_member": channel in self.members}
        return web.json_response({"ok": True, "channel": info})


def runbooks(tmp_path: Path) -> Path:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "pool.md").write_text(
        "# DB pool exhaustion\n\n## Symptoms\n\ntimeouts\n\n## Fix\n\nroll back\n", encoding="utf-8"
    )
    return folder


def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    for service in ("payment-api", "order-service"):
        (folder / service / "2026-11-28").mkdir(parents=True)
    return folder


# -- healthy ---------------------------------------------------------------------------------------


async def test_healthy_configuration_every_part_ok(tmp_path: Path, mysql_accounts: None) -> None:
    async with MemberSlackApi(members=(ADMIN,)) as slack:
        checked = await run_check(
            tmp_path, "--json",
            DIAG_KNOWLEDGE_DIR=str(runbooks(tmp_path)),
            DIAG_LOGS_SOURCE=str(logs(tmp_path)),
            DIAG_MYSQL_DSN=dsn(RO_USER, RO_PASSWORD),
            DIAG_REDIS_URL=redis_url(),
            SLACK_BOT_TOKEN=BOT_TOKEN,
            DIAG_SLACK_API_URL=slack.base_url,
            DIAG_ADMIN_CHANNELS=ADMIN,
        )  # fmt: skip
    assert checked.code == 0, checked.out + checked.err
    report = checked.report
    assert report["ok"] is True
    assert {c["name"]: c["status"] for c in report["checks"]} == {
        "runbooks": "OK", "logs": "OK", "mysql": "OK", "redis": "OK", "audit": "OK", "slack": "OK",
        "model": "NOT_CONFIGURED",
    }  # fmt: skip
    assert checked.part("runbooks")["facts"]["sections"] == 2
    assert checked.part("logs")["facts"]["services"] == ["order-service", "payment-api"]
    mysql = checked.part("mysql")
    assert mysql["facts"]["kind"].startswith(("MariaDB", "MySQL"))
    assert mysql["facts"]["allowed_tables"] == ["deployments", "incidents"]
    assert mysql["facts"]["read_only"] is True
    assert checked.part("slack")["facts"]["member_of"] == [ADMIN]
    # The audit probe wrote no record: today's file exists and is empty.
    audit_files = list((tmp_path / "audit").iterdir())
    assert [f.stat().st_size for f in audit_files] == [0]


async def test_text_output_one_line_per_part_and_not_configured(tmp_path: Path) -> None:
    checked = await run_check(tmp_path, DIAG_KNOWLEDGE_DIR=str(runbooks(tmp_path)))
    assert checked.code == 0, checked.err
    lines = checked.out.strip().splitlines()
    assert [line.split()[0] for line in lines] == [
        "runbooks", "logs", "mysql", "redis", "audit", "slack", "model",
    ]  # fmt: skip
    by_name = {line.split()[0]: line for line in lines}
    assert " ok " in by_name["runbooks"] and "2 sections in 1 runbooks" in by_name["runbooks"]
    for unset in ("logs", "mysql", "redis", "slack"):
        assert "not configured" in by_name[unset]


async def test_no_evidence_source_is_warned_not_failed(tmp_path: Path) -> None:
    """Issue 22: nothing to read evidence from works (exit 0) but is said, in text and JSON."""
    unset = {"DIAG_KNOWLEDGE_DIR": "", "DIAG_LOGS_SOURCE": "", "DIAG_MYSQL_DSN": ""}
    warning = "no evidence source is set (DIAG_KNOWLEDGE_DIR, DIAG_LOGS_SOURCE, DIAG_MYSQL_DSN)"
    text = await run_check(tmp_path, **unset)
    assert text.code == 0, text.err
    last = text.out.strip().splitlines()[-1]
    assert last.split()[0] == "warning" and warning in last
    as_json = await run_check(tmp_path, "--json", **unset)
    assert as_json.code == 0 and as_json.report["ok"] is True
    assert len(as_json.report["warnings"]) == 1 and warning in as_json.report["warnings"][0]
    logs_only = await run_check(
        tmp_path, "--json", **{**unset, "DIAG_LOGS_SOURCE": str(logs(tmp_path))}
    )
    assert logs_only.report["warnings"] == []


async def test_allowed_tables_are_the_configured_ones(tmp_path: Path, mysql_accounts: None) -> None:
    checked = await run_check(
        tmp_path, "--json",
        DIAG_MYSQL_DSN=dsn(RO_USER, RO_PASSWORD), DIAG_MYSQL_ALLOWED_TABLES="deployments",
    )  # fmt: skip
    assert checked.code == 0, checked.out
    assert checked.part("mysql")["facts"]["allowed_tables"] == ["deployments"]
    missing = await run_check(
        tmp_path, "--json",
        DIAG_MYSQL_DSN=dsn(RO_USER, RO_PASSWORD), DIAG_MYSQL_ALLOWED_TABLES="deployments,nosuch",
    )  # fmt: skip
    assert missing.code == 1
    assert "allowed tables not found: nosuch" in missing.part("mysql")["detail"]


# -- broken parts, each named ----------------------------------------------------------------------


def _failed(checked: Checked, name: str) -> str:
    assert checked.code == 1, checked.out + checked.err
    assert checked.report["ok"] is False
    part = checked.part(name)
    assert part["status"] == "FAILED", part
    others = [c for c in checked.report["checks"] if c["name"] != name]
    assert all(c["status"] != "FAILED" for c in others), others
    detail: str = part["detail"]
    return detail


async def test_missing_runbook_folder(tmp_path: Path) -> None:
    checked = await run_check(tmp_path, "--json", DIAG_KNOWLEDGE_DIR=str(tmp_path / "nope"))
    assert "does not exist" in _failed(checked, "runbooks")


async def test_empty_runbook_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not markdown", encoding="utf-8")
    checked = await run_check(tmp_path, "--json", DIAG_KNOWLEDGE_DIR=str(tmp_path / "empty"))
    assert "no runbook sections" in _failed(checked, "runbooks")


async def test_missing_log_folder(tmp_path: Path) -> None:
    checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=str(tmp_path / "nologs"))
    assert "does not exist" in _failed(checked, "logs")


async def test_loki_unreachable_names_host_not_credentials(tmp_path: Path) -> None:
    port = closed_port()
    checked = await run_check(
        tmp_path, "--json", DIAG_LOGS_SOURCE=f"http://loki:CANARY-loki-pw@127.0.0.1:{port}"
    )
    detail = _failed(checked, "logs")
    assert f"Loki at 127.0.0.1:{port} unreachable" in detail
    assert "loki:" not in detail


async def test_loki_reachable_lists_services(tmp_path: Path) -> None:
    seen: list[str] = []

    async def values(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"status": "success", "data": ["payment-api", "checkout"]})

    app = web.Application()
    app.router.add_get("/loki/api/v1/label/{label}/values", values)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        checked = await run_check(tmp_path, "--json", DIAG_LOGS_SOURCE=f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
    assert checked.code == 0, checked.out
    assert checked.part("logs")["facts"]["services"] == ["payment-api", "checkout"]
    assert seen == ["/loki/api/v1/label/service/values"]


async def test_mysql_wrong_password(tmp_path: Path, mysql_accounts: None) -> None:
    checked = await run_check(tmp_path, "--json", DIAG_MYSQL_DSN=dsn(RO_USER, "CANARY-wrong"))
    assert "1045: access denied (user or password)" in _failed(checked, "mysql")


async def test_mysql_closed_port(tmp_path: Path) -> None:
    port = closed_port()
    checked = await run_check(
        tmp_path, "--json", DIAG_MYSQL_DSN=dsn(RO_USER, RO_PASSWORD, port=port)
    )
    detail = _failed(checked, "mysql")
    assert f"127.0.0.1:{port}" in detail and "cannot connect" in detail


async def test_mysql_writable_account_is_not_read_only(
    tmp_path: Path, mysql_accounts: None
) -> None:
    checked = await run_check(tmp_path, "--json", DIAG_MYSQL_DSN=dsn(RW_USER, RW_PASSWORD))
    detail = _failed(checked, "mysql")
    assert "read-only: NO" in detail and "executes nothing" in detail
    assert checked.part("mysql")["facts"]["read_only"] is False
    opted_out = await run_check(
        tmp_path, "--json",
        DIAG_MYSQL_DSN=dsn(RW_USER, RW_PASSWORD), DIAG_MYSQL_REQUIRE_READ_ONLY="false",
    )  # fmt: skip
    assert opted_out.code == 0
    assert "DIAG_MYSQL_REQUIRE_READ_ONLY=false" in opted_out.part("mysql")["detail"]


async def test_redis_closed_port(tmp_path: Path) -> None:
    port = closed_port()
    checked = await run_check(
        tmp_path, "--json", DIAG_REDIS_URL=f"redis://:CANARY-redis@127.0.0.1:{port}/0"
    )
    assert f"Redis at 127.0.0.1:{port} unreachable" in _failed(checked, "redis")


def _replace(today: Path, *, by: str) -> None:
    """Put a directory, or a symlink to a regular file, where today's audit file goes."""
    today.unlink()
    if by == "directory":
        today.mkdir()
    else:
        target = today.parent.parent / "elsewhere"
        target.write_text("", encoding="utf-8")
        today.symlink_to(target)


async def test_audit_directory_where_the_file_would_be(tmp_path: Path) -> None:
    first = await run_check(tmp_path, "--json")
    _replace(Path(first.part("audit")["facts"]["path"]), by="directory")
    checked = await run_check(tmp_path, "--json")
    assert "is a directory" in _failed(checked, "audit")


async def test_audit_symlink_is_refused(tmp_path: Path) -> None:
    first = await run_check(tmp_path, "--json")
    _replace(Path(first.part("audit")["facts"]["path"]), by="symlink")
    checked = await run_check(tmp_path, "--json")
    assert "symbolic link" in _failed(checked, "audit")


async def test_mysql_audit_sink(tmp_path: Path, mysql_accounts: None) -> None:
    writable = await run_check(tmp_path, "--json", DIAG_AUDIT_SINK=dsn(AUDIT_USER, AUDIT_PASSWORD))
    assert writable.code == 0, writable.out
    assert "created on the first write" in writable.part("audit")["detail"]
    conn = _admin()
    with conn.cursor() as cur:
        cur.execute(f"USE {DATABASE}")
        cur.execute(AUDIT_TABLE)
    try:
        again = await run_check(tmp_path, "--json", DIAG_AUDIT_SINK=dsn(AUDIT_USER, AUDIT_PASSWORD))
        assert again.code == 0, again.out
        assert "diag_audit writable" in again.part("audit")["detail"]
        read_only = await run_check(tmp_path, "--json", DIAG_AUDIT_SINK=dsn(RO_USER, RO_PASSWORD))
        assert "1142" in _failed(read_only, "audit")
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {DATABASE}.diag_audit")
            assert cur.fetchone() == (0,)  # the probe wrote nothing
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {DATABASE}.diag_audit")
        conn.close()


async def test_slack_auth_test_refused(tmp_path: Path) -> None:
    async with MemberSlackApi(members=(ADMIN,)) as slack:
        slack.fail("auth.test", error="invalid_auth")
        checked = await run_check(
            tmp_path, "--json",
            SLACK_BOT_TOKEN=BOT_TOKEN, DIAG_SLACK_API_URL=slack.base_url, DIAG_ADMIN_CHANNELS=ADMIN,
        )  # fmt: skip
    assert "auth.test refused: invalid_auth" in _failed(checked, "slack")


async def test_slack_admin_channels_the_bot_is_not_in(tmp_path: Path) -> None:
    async with MemberSlackApi(members=(ADMIN,), known=(ADMIN, OTHER)) as slack:
        checked = await run_check(
            tmp_path, "--json",
            SLACK_BOT_TOKEN=BOT_TOKEN, DIAG_SLACK_API_URL=slack.base_url,
            DIAG_ADMIN_CHANNELS=f"{ADMIN},{OTHER},CCHECK0404",
        )  # fmt: skip
    detail = _failed(checked, "slack")
    assert f"{OTHER}: the bot is not a member" in detail
    assert "CCHECK0404: conversations.info refused: channel_not_found" in detail
    facts = checked.part("slack")["facts"]
    assert facts["member_of"] == [ADMIN]
    assert facts["not_member_of"] == [OTHER, "CCHECK0404"]


async def test_slack_unreachable(tmp_path: Path) -> None:
    checked = await run_check(
        tmp_path, "--json", SLACK_BOT_TOKEN=BOT_TOKEN,
        DIAG_SLACK_API_URL=f"http://127.0.0.1:{closed_port()}/api/", DIAG_ADMIN_CHANNELS=ADMIN,
    )  # fmt: skip
    assert "auth.test unreachable" in _failed(checked, "slack")


# -- the model hook and invalid settings ----------------------------------------------------------


async def test_model_probe_only_with_the_flag(tmp_path: Path, model_server: StartServer) -> None:
    # The capability probes themselves: tests/cli/test_check_model.py.
    call = ToolCallSpec("call-1", "probe_echo", {"word": "ok"})
    draft = ModelStep(content=json.dumps({
        "conclusion": None, "analysis": [], "action_plan": [], "recommendations": [],
        "limitations": {"checked_scope": [], "missing_info": ["probe"]},
    }))  # fmt: skip
    echo = ModelStep(tool_calls=(call,))
    server = await model_server([echo, echo, draft])
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-CANARY-key"}
    without = await run_check(tmp_path, "--json", **env)
    assert without.part("model")["status"] == "NOT_PROBED"  # named, never contacted
    assert without.report["model"]["status"] == "NOT_PROBED"
    assert server.request_count == 0
    checked = await run_check(tmp_path, "--json", "--model", **env)
    assert checked.code == 0, checked.out
    assert checked.part("model")["status"] == "OK"
    assert checked.part("model")["facts"]["endpoint"] == urlsplit(server.base_url).netloc
    port = closed_port()
    down = await run_check(
        tmp_path, "--json", "--model",
        OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="sk-CANARY-key",
    )  # fmt: skip
    assert f"endpoint 127.0.0.1:{port} unreachable" in _failed(down, "model")


async def test_invalid_settings_exit_2(tmp_path: Path) -> None:
    checked = await run_check(tmp_path, "--json", DIAG_REDIS_URL="CANARY-garbage")
    assert checked.code == 2
    error = checked.report["error"]
    assert error["code"] == "INVALID_SETTINGS"
    assert "DIAG_REDIS_URL must be redis://" in error["message"]
    text = await run_check(tmp_path, DIAG_MAX_MODEL_CALLS="0")
    assert text.code == 2
    assert text.out.startswith("settings  FAILED")
    assert "DIAG_MAX_MODEL_CALLS must be at least 1" in text.out
