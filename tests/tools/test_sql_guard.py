"""The SQL guard on its own: what it refuses, why, and what it sends instead of the model's text."""

from __future__ import annotations

import pytest
import sqlglot

from sre_diag.tools.sql.guard import (
    Allowed,
    GuardDecision,
    Prepared,
    RefusalReason,
    Refused,
    check_sql,
    is_secret_column,
    limit_rows,
    prepare_sql,
)
from tests.mysql_db import TEST_DATABASE
from tests.tools.sql_corpus import BENIGN, HOSTILE, INCIDENT_SCHEMA

DATABASE = TEST_DATABASE
TABLES = frozenset({"orders", "payments", "deployments", "db_pool_metrics"})
SCHEMA = {table: INCIDENT_SCHEMA[table] for table in TABLES}


def _check(sql: str, tables: frozenset[str] = TABLES) -> GuardDecision:
    schema = {table: INCIDENT_SCHEMA[table] for table in tables if table in INCIDENT_SCHEMA}
    return check_sql(sql, database=DATABASE, allowed_tables=tables, schema=schema)


def _allowed(sql: str, tables: frozenset[str] = TABLES) -> Allowed:
    decision = _check(sql, tables)
    assert isinstance(decision, Allowed), decision
    return decision


def _rendered(sql: str, max_rows: int = 50, tables: frozenset[str] = TABLES) -> str:
    return limit_rows(_allowed(sql, tables).expression, max_rows)


def test_corpus_sizes() -> None:
    assert len(HOSTILE) >= 100
    assert len(BENIGN) >= 30


@pytest.mark.parametrize(("sql", "reason"), HOSTILE)
def test_hostile_statement_is_refused(sql: str, reason: RefusalReason | None) -> None:
    decision = _check(sql)
    assert isinstance(decision, Refused), f"allowed: {sql!r}"
    if reason is not None:
        assert decision.reason is reason


@pytest.mark.parametrize("sql", BENIGN)
def test_benign_statement_is_allowed_and_rendering_rechecks(sql: str) -> None:
    prepared = prepare_sql(
        sql, database=DATABASE, allowed_tables=TABLES, max_rows=50, schema=SCHEMA
    )
    assert isinstance(prepared, Prepared), prepared
    assert prepared.text == _rendered(sql)
    # What the adapter sends must itself pass, and be a single statement.
    assert isinstance(_check(prepared.text), Allowed)
    assert len(sqlglot.parse(prepared.text, read="mysql")) == 1


@pytest.mark.parametrize(("sql", "reason"), HOSTILE)
def test_hostile_statement_is_never_prepared(sql: str, reason: RefusalReason | None) -> None:
    prepared = prepare_sql(
        sql, database=DATABASE, allowed_tables=TABLES, max_rows=50, schema=SCHEMA
    )
    assert isinstance(prepared, Refused)


def test_limit_is_added_when_missing() -> None:
    assert _rendered("SELECT id FROM orders", 50).endswith("LIMIT 51")


def test_larger_limit_is_clamped_and_smaller_kept() -> None:
    assert _rendered("SELECT id FROM orders LIMIT 100000", 50).endswith("LIMIT 51")
    assert _rendered("SELECT id FROM orders LIMIT 7", 50).endswith("LIMIT 7")


def test_offset_survives_clamping() -> None:
    assert _rendered("SELECT id FROM orders LIMIT 10, 1000", 5).endswith("LIMIT 6 OFFSET 10")


def test_union_gets_an_outer_limit() -> None:
    rendered = _rendered("SELECT id FROM orders UNION SELECT order_id FROM payments", 3)
    assert rendered.endswith("UNION SELECT `order_id` FROM `payments` LIMIT 4")


def test_comments_are_refused_in_any_form() -> None:
    for sql in (
        "SELECT id /* hi */ FROM orders",
        "SELECT id FROM orders -- bye",
        "SELECT id FROM orders --\tbye",
        "SELECT id FROM orders # bye",
        "SELECT id FROM orders /* unterminated",
    ):
        decision = _check(sql)
        assert isinstance(decision, Refused), sql
        assert decision.reason is RefusalReason.COMMENT_HINT


def test_identifiers_are_quoted_so_keywords_cannot_turn_into_functions() -> None:
    assert _rendered("SELECT current_role FROM orders").startswith("SELECT `current_role`")


def test_table_case_and_database_qualifier_are_rewritten_to_allowlisted_spelling() -> None:
    rendered = _rendered(f"SELECT * FROM {TEST_DATABASE.upper()}.Orders o")
    assert f"FROM `{TEST_DATABASE}`.`orders` AS `o`" in rendered


def test_backslash_quote_stays_inside_the_literal() -> None:
    rendered = _rendered("SELECT id FROM orders WHERE id = 'x\\' UNION SELECT 1 -- '")
    assert "UNION" in rendered  # inside the string literal, not a second query
    assert sqlglot.parse_one(rendered, read="mysql").find(sqlglot.exp.Union) is None


def test_dual_is_dropped() -> None:
    assert _rendered("SELECT NOW() FROM DUAL") == "SELECT NOW() LIMIT 51"


def test_cte_names_resolve_by_scope() -> None:
    _allowed("WITH api_credentials AS (SELECT 1 AS a) SELECT * FROM api_credentials")
    refused = _check("WITH a AS (SELECT x FROM b), b AS (SELECT 1 AS x) SELECT * FROM a")
    assert isinstance(refused, Refused) and refused.reason is RefusalReason.TABLE_NOT_ALLOWED
    # Recursive CTEs generate rows without a bound the statement text shows: refused.
    recursive = _check(
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3) "
        "SELECT n FROM c"
    )
    assert isinstance(recursive, Refused)


def test_secret_columns_only_as_bare_projection() -> None:
    tables = TABLES | {"api_credentials"}
    _allowed("SELECT provider, api_key, secret_token FROM api_credentials", tables)
    _allowed("SELECT * FROM api_credentials", tables)
    for sql in (
        "SELECT api_key AS note FROM api_credentials",
        "SELECT CONCAT('k=', api_key) AS k FROM api_credentials",
        "SELECT provider FROM api_credentials WHERE api_key LIKE 'sk_%'",
        "SELECT 'x' AS a UNION SELECT api_key FROM api_credentials",
        "SELECT a FROM (SELECT api_key FROM api_credentials) AS t(a)",
    ):
        decision = _check(sql, tables)
        assert isinstance(decision, Refused), sql
        assert decision.reason is RefusalReason.SECRET_COLUMN


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("secret_token", True),
        ("password", True),
        ("user_pwd", True),
        ("private_key", True),
        ("key", True),
        ("keyId", True),
        ("salt", True),
        ("password_hash", True),
        ("credentials", True),
        ("monkey", False),
        ("keyboard_layout", False),
        ("order_id", False),
        ("latency_ms", False),
        ("change_summary", False),
    ],
)
def test_secret_column_names(name: str, secret: bool) -> None:
    assert is_secret_column(name) is secret


def test_system_schema_as_own_database_refuses_everything() -> None:
    decision = check_sql("SELECT 1", database="mysql", allowed_tables=frozenset())
    assert isinstance(decision, Refused) and decision.reason is RefusalReason.SYSTEM_SCHEMA


def test_limit_rows_rejects_negative_cap() -> None:
    with pytest.raises(ValueError):
        limit_rows(_allowed("SELECT 1").expression, -1)
