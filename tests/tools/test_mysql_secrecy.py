"""The secrecy verdict on the real MariaDB: which grants let the account read a secret column.

A database of this run's own holds a ``staff`` table whose secret columns are secret only through
a short part of their name, spelled in mixed case (``user_PIN``, ``cardCvv``, ``otp_Seed``), a
``notes`` table made secret by ``DIAG_MYSQL_SECRET_COLUMNS``, and a view without the secrets.
Each account gets one way of reading; the verdict, ``query_mysql`` and ``check`` must agree, and
the statements ``check`` prints must fix the account when an admin runs them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from sre_diag.commands.check import check_mysql, render_text
from sre_diag.commands.exits import load_settings
from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready
from sre_diag.tools.mysql import MASK, MysqlAdapter, parse_dsn
from sre_diag.tools.mysql.secrecy import GrantLine, SecretClassifier, secrecy_verdict
from sre_diag.tools.schemas import MysqlInput, MysqlRow
from tests.mysql_db import MARIADB, admin_dsn_for, run_name

pytestmark = MARIADB

DB = run_name("diag_secrecy")
PASSWORD = "diag-secrecy-Pw1"
PIN, CVV, SEED = "4921", "737", "JBSWY3DPEHPK3PXP"
ACCOUNTS: dict[str, list[str]] = {
    "table": ["GRANT SELECT ON {db}.staff TO {u}"],
    "database": ["GRANT SELECT ON {db}.* TO {u}"],
    "columns": ["GRANT SELECT (id, name, team) ON {db}.staff TO {u}"],
    "column_secret": ["GRANT SELECT (id, name, user_PIN) ON {db}.staff TO {u}"],
    "view": ["GRANT SELECT ON {db}.staff_public TO {u}"],
    "notes": ["GRANT SELECT ON {db}.notes TO {u}"],
    "role": ["GRANT {role} TO {u}", "SET DEFAULT ROLE {role} FOR {u}"],
}
ROLE = run_name("diag_secrecy_role")


def _user(kind: str) -> str:
    return run_name(f"diag_sec_{kind}")


def _admin() -> pymysql.connections.Connection:
    params = parse_dsn(admin_dsn_for("mysql"))
    return pymysql.connect(
        host=params.host, port=params.port, user=params.user, password=params.password,
        autocommit=True, connect_timeout=5,
    )  # fmt: skip


def _admin_do(*statements: str) -> None:
    with _admin() as connection, connection.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _dsn(kind: str) -> str:
    params = parse_dsn(admin_dsn_for(DB))
    return f"mysql://{_user(kind)}:{PASSWORD}@{params.host}:{params.port}/{DB}"


def _drop() -> None:
    _admin_do(
        *[f"DROP USER IF EXISTS '{_user(kind)}'@'%'" for kind in ACCOUNTS],
        f"DROP ROLE IF EXISTS {ROLE}",
        f"DROP DATABASE IF EXISTS {DB}",
    )


@pytest.fixture(scope="module")
def accounts(mysql_ro_dsn: str) -> Iterator[None]:
    _drop()
    _admin_do(
        f"CREATE DATABASE {DB}",
        f"CREATE TABLE {DB}.staff (id INT PRIMARY KEY, name VARCHAR(32), team VARCHAR(16),"
        " user_PIN VARCHAR(8), cardCvv VARCHAR(4), otp_Seed VARCHAR(32))",
        f"INSERT INTO {DB}.staff VALUES (1, 'ana', 'sre', '{PIN}', '{CVV}', '{SEED}')",
        f"CREATE TABLE {DB}.notes (id INT PRIMARY KEY, body VARCHAR(200))",
        f"INSERT INTO {DB}.notes VALUES (1, 'hello')",
        f"CREATE VIEW {DB}.staff_public AS SELECT id, name, team FROM {DB}.staff",
        f"CREATE ROLE {ROLE}",
        f"GRANT SELECT ON {DB}.staff TO {ROLE}",
    )
    for kind, grants in ACCOUNTS.items():
        account = f"'{_user(kind)}'@'%'"
        _admin_do(f"CREATE USER {account} IDENTIFIED BY '{PASSWORD}'")
        _admin_do(*[g.format(db=DB, u=account, role=ROLE) for g in grants])
    yield
    _drop()


def _call(sql: str) -> AdapterCall[MysqlInput]:
    return AdapterCall("call-s1", "run-s1", MysqlInput(sql=sql, purpose="secrecy"))


@pytest.mark.parametrize(
    ("kind", "readable"),
    [
        ("table", {"staff.user_PIN", "staff.cardCvv", "staff.otp_Seed"}),
        ("database", {"staff.user_PIN", "staff.cardCvv", "staff.otp_Seed"}),
        ("role", {"staff.user_PIN", "staff.cardCvv", "staff.otp_Seed"}),
        ("column_secret", {"staff.user_PIN"}),
        ("columns", set()),
        ("view", set()),
    ],
)
async def test_the_verdict_follows_what_the_account_can_read(
    accounts: None, kind: str, readable: set[str]
) -> None:
    adapter = MysqlAdapter(_dsn(kind), ())
    try:
        found = await adapter.verdicts()
        assert found is not None
        _, secrecy = found
        assert {f"{c.table}.{c.column}" for c in secrecy.readable} == readable
        result = await adapter.invoke(_call("SELECT COUNT(*) AS n FROM " + (
            "staff_public" if kind == "view" else "staff"
        )))  # fmt: skip
        if readable:
            assert result == Failed(AdapterErrorCode.NOT_CONFIGURED)
        else:
            assert isinstance(result, Ready), result
    finally:
        await adapter.aclose()


async def test_configured_secret_columns_count_like_named_ones(accounts: None) -> None:
    plain = MysqlAdapter(_dsn("notes"), ())
    configured = MysqlAdapter(_dsn("notes"), (), secret_columns=("NOTES.*",))
    try:
        assert isinstance(await plain.invoke(_call("SELECT body FROM notes")), Ready)
        assert await configured.invoke(_call("SELECT body FROM notes")) == Failed(
            AdapterErrorCode.NOT_CONFIGURED
        )
    finally:
        await plain.aclose()
        await configured.aclose()


@pytest.mark.parametrize("kind", ["table", "database", "column_secret", "role"])
async def test_the_printed_statements_fix_the_account(accounts: None, kind: str) -> None:
    before = MysqlAdapter(_dsn(kind), ())
    try:
        found = await before.verdicts()
        assert found is not None and not found[1].passes
        fixes = found[1].fixes
    finally:
        await before.aclose()
    assert fixes and all(f.startswith(("REVOKE ", "GRANT SELECT (")) for f in fixes), fixes
    _admin_do(*(fix.rstrip(";") for fix in fixes))
    after = MysqlAdapter(_dsn(kind), ())
    try:
        found = await after.verdicts()
        assert found is not None and found[1].passes, (fixes, found[1])
        result = await after.invoke(_call("SELECT id, name FROM staff"))
        assert isinstance(result, Ready), (fixes, result)
    finally:
        await after.aclose()
        account = f"'{_user(kind)}'@'%'"
        _admin_do(f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}")
        _admin_do(*[g.format(db=DB, u=account, role=ROLE) for g in ACCOUNTS[kind]])


async def test_check_names_each_column_and_the_fix(
    accounts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIAG_MYSQL_DSN", _dsn("table"))
    failed = await check_mysql(load_settings())
    text = render_text([failed])
    assert failed.status.value == "FAILED", text
    for column in ("user_PIN", "cardCvv", "otp_Seed"):
        assert f"{DB}.staff.{column}" in text
    assert f"REVOKE SELECT ON `{DB}`.`staff` FROM `{_user('table')}`@`%`;" in text
    assert f"GRANT SELECT (`id`, `name`, `team`) ON `{DB}`.`staff` TO" in text
    assert PASSWORD not in text and PIN not in text
    monkeypatch.setenv("DIAG_MYSQL_REQUIRE_COLUMN_GRANTS", "false")
    warned = await check_mysql(load_settings())
    assert warned.status.value == "OK" and "best-effort" in warned.detail


async def test_opting_out_masks_the_columns_whatever_their_case(
    accounts: None, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = MysqlAdapter(_dsn("table"), (), require_column_grants=False)
    try:
        result = await adapter.invoke(
            _call("SELECT name, user_pIn, CARDCVV, Otp_seed FROM staff")
        )
        assert isinstance(result, Ready), result
        (row,) = result.items
        assert isinstance(row, MysqlRow)
        assert row.cells == {"name": "ana", "user_pIn": MASK, "CARDCVV": MASK, "Otp_seed": MASK}
        starred = await adapter.invoke(_call("SELECT * FROM staff"))
        assert isinstance(starred, Ready)
        assert [set(r.cells) for r in starred.items if isinstance(r, MysqlRow)] == [
            {"id", "name", "team"}
        ]
        for sql in (
            "SELECT name FROM staff WHERE user_pIn = '4921'",
            "SELECT CONCAT(' ', cardcvv, ' ') AS c FROM staff",
            "SELECT name FROM staff ORDER BY OTP_SEED",
        ):
            assert await adapter.invoke(_call(sql)) == Failed(AdapterErrorCode.FORBIDDEN_QUERY)
    finally:
        await adapter.aclose()
    assert any("best-effort" in r.getMessage() for r in caplog.records)


def test_the_classifier_reads_schema_spellings_and_patterns() -> None:
    classifier = SecretClassifier.from_setting(["staff.*note*", "*.ssn_last4"])
    for table, column in (("t", "userPin"), ("t", "OTP_SEED"), ("t", "card-cvv"),
                          ("STAFF", "HR_Notes"), ("x", "SSN_LAST4")):  # fmt: skip
        assert classifier.is_secret(table, column), column
    for table, column in (("t", "shipping"), ("t", "monkey"), ("other", "notes")):
        assert not classifier.is_secret(table, column), column


def test_fixes_follow_the_grant_that_opens_the_column() -> None:
    visible = [("d", "t", "id"), ("d", "t", "api_key"), ("d", "u", "id")]
    grants = [
        GrantLine(None, "GRANT USAGE ON *.* TO `a`@`%`"),
        GrantLine(None, "GRANT `r` TO `a`@`%`"),
        GrantLine("`r`", "GRANT SELECT ON `d`.* TO `r`"),
    ]
    verdict = secrecy_verdict(visible, grants, SecretClassifier(), account="'a'@'%'")
    assert [str(c) for c in verdict.readable] == ["d.t.api_key"]
    assert verdict.fixes == (
        "REVOKE SELECT ON `d`.* FROM `r`;",
        "GRANT SELECT (`id`) ON `d`.`t` TO `r`;",
        "GRANT SELECT (`id`) ON `d`.`u` TO `r`;",
    )
