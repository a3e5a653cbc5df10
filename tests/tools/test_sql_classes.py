"""The guard's second layer, by class, without a server: each class of bypass with variants.

Column text (``note``, ``line``) may reach the output only whole or cut after redaction; every
function whose output can carry its text inherits its taint; formats are literals and size the
output; names settle across CTEs; predicates over text are few and literal-heavy.
"""

from __future__ import annotations

import pytest

from sre_diag.tools.sql.bounds import Schema, column_shape
from sre_diag.tools.sql.guard import Prepared, RefusalReason, Refused, prepare_sql
from tests.mysql_db import TEST_DATABASE

R = RefusalReason
SCHEMA: Schema = {
    "notes": (
        column_shape("id", "int", None),
        column_shape("note", "varchar", 2000),
        column_shape("kind", "varchar", 32),
        column_shape("at", "datetime", None),
        column_shape("userPin", "varchar", 8),
        column_shape("hr_note", "varchar", 200, secret=True),  # DIAG_MYSQL_SECRET_COLUMNS
    )
}


def _prepare(sql: str) -> Prepared | Refused:
    return prepare_sql(
        sql, database=TEST_DATABASE, allowed_tables=frozenset(SCHEMA), max_rows=50, schema=SCHEMA
    )


def _refused(sql: str) -> RefusalReason:
    decision = _prepare(sql)
    assert isinstance(decision, Refused), f"prepared: {sql!r} -> {decision}"
    return decision.reason


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT note FROM notes WHERE USERPIN = '4921'",
        "SELECT note FROM notes WHERE userpin LIKE '49%'",
        "SELECT CONCAT(' ', UserPIN, ' ') AS p FROM notes",
        "SELECT note FROM notes ORDER BY HR_NOTE",
        "SELECT LEFT(Hr_Note, 3) AS h FROM notes",
        "SELECT x FROM (SELECT uSeRpIn AS x FROM notes) AS d",
        "WITH c AS (SELECT HR_NOTE AS h FROM notes) SELECT COUNT(*) FROM c WHERE h = 'a'",
    ],
)
def test_secret_columns_are_resolved_case_folded_and_by_schema(sql: str) -> None:
    assert _refused(sql) is R.SECRET_COLUMN


def test_secret_columns_masked_by_resolved_name_and_absent_from_stars() -> None:
    prepared = _prepare("SELECT id, USERPIN, hr_NOTE FROM notes")
    assert isinstance(prepared, Prepared) and prepared.masked == (False, True, True)
    starred = _prepare("SELECT * FROM notes")
    assert isinstance(starred, Prepared)
    assert "userPin" not in starred.text and "hr_note" not in starred.text


@pytest.mark.parametrize(
    "sql",
    [
        # wrappers that used to drop the taint
        "SELECT SUBSTRING(CONVERT(note USING utf8mb4), 10, 16) AS x FROM notes",
        "SELECT SUBSTRING_INDEX(CONVERT(note USING latin1), '=', -1) AS x FROM notes",
        "SELECT FROM_UNIXTIME(0, note) AS x FROM notes",
        "SELECT SUBSTRING(FROM_UNIXTIME(0, note), 5) AS x FROM notes",
        "SELECT DATE_FORMAT(NOW(), note) AS x FROM notes",
        "SELECT JSON_EXTRACT(DATE_FORMAT(NOW(), note), '$.token') AS x FROM notes",
        "SELECT DATE_FORMAT(note, '%Y') AS x FROM notes",
        "SELECT STR_TO_DATE(note, 'pin: %Y') AS x FROM notes",
        # numbers and dates parsed out of text
        "SELECT note + 0 AS x FROM notes", "SELECT -note AS x FROM notes",
        "SELECT SUM(note) AS x FROM notes", "SELECT ROUND(note) AS x FROM notes",
        "SELECT YEAR(note) AS x FROM notes", "SELECT UNIX_TIMESTAMP(note) AS x FROM notes",
        "SELECT CAST(note AS SIGNED) AS x FROM notes", "SELECT CAST(note AS DATE) AS x FROM notes",
        "SELECT TIME_TO_SEC(kind) AS x FROM notes",
        # ordering oracles
        "SELECT id FROM notes WHERE note > 'password=m'",
        "SELECT id FROM notes WHERE note BETWEEN 'a' AND 'b'",
        "SELECT GREATEST(note, 'password=m') AS x FROM notes",
        "SELECT MAX(IF(id = 1, note, 'password=m')) AS x FROM notes",
        "SELECT x FROM (SELECT note AS x FROM notes UNION ALL SELECT 'password=m') AS d ORDER BY x",
        "SELECT note FROM notes UNION SELECT 'password=m' ORDER BY 1",
        "SELECT x FROM (SELECT note AS x FROM notes WHERE id = (SELECT MAX(id) FROM notes)"
        " UNION ALL SELECT 'password=m') AS d ORDER BY x",
        "SELECT MIN(x) FROM (SELECT COALESCE(note, 'zz') AS x FROM notes) AS d",
        "SELECT GROUP_CONCAT(x ORDER BY x SEPARATOR ' ') AS g FROM (SELECT note AS x FROM notes"
        " UNION ALL SELECT 'password=m') AS d",
        "SELECT x, RANK() OVER (ORDER BY x) AS r FROM (SELECT note AS x FROM notes"
        " UNION ALL SELECT 'password=m') AS d",
        # text pieces through sibling CTEs, column lists and same-named columns
        "WITH a AS (SELECT note AS k FROM notes), b AS (SELECT SUBSTRING(k, 1, 5) AS x FROM a)"
        " SELECT x FROM b",
        "WITH a AS (SELECT note AS id FROM notes), b AS (SELECT LEFT(id, 3) AS y FROM a)"
        " SELECT y FROM b",
        "WITH a(id) AS (SELECT note FROM notes) SELECT SUBSTRING(id, 2, 4) AS x FROM a",
        "SELECT SUBSTRING(d.id, 2) AS x FROM (SELECT note FROM notes) AS d(id)",
        "SELECT x FROM (SELECT LEFT(note, 3) AS x FROM notes) AS d",
        "SELECT LOCATE('pass', note) AS x FROM notes",
        "SELECT FIND_IN_SET('a', note) AS x FROM notes",
    ],
)
def test_every_function_that_can_carry_text_inherits_its_taint(sql: str) -> None:
    assert _refused(sql) in {R.TEXT_EXTRACTION, R.SECRET_COLUMN}


def test_formats_size_the_output_so_statements_stay_small() -> None:
    # A 1.8 KB statement used to build a megabyte haystack out of FROM_UNIXTIME's format: a
    # format is now a literal, sized at 10 bytes a directive, so the largest haystack a
    # statement can build is a few times its own length, and anything bigger is refused.
    for sql in (
        "SELECT FROM_UNIXTIME(0, CONCAT('%W', kind)) AS x FROM notes",
        "SELECT DATE_FORMAT(at, kind) AS x FROM notes",
    ):
        assert _refused(sql) in {R.EXPRESSION_TOO_LARGE, R.TEXT_EXTRACTION, R.EXPENSIVE_PATTERN}
    bounded = _prepare("SELECT LOCATE('x', FROM_UNIXTIME(0, '" + "%W" * 400 + "')) AS n")
    assert isinstance(bounded, Prepared)
    fine = _prepare("SELECT DATE_FORMAT(at, '%Y-%m-%d %H:%i') AS m, COUNT(*) AS n FROM notes"
                    " GROUP BY m")  # fmt: skip
    assert isinstance(fine, Prepared)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT FIELD(1, note LIKE '%rd=ab%', note LIKE '%rd=ac%', note LIKE '%rd=ad%') AS f"
        " FROM notes",
        "SELECT id FROM notes WHERE note LIKE '%ass%' AND note LIKE '%wor%' AND kind LIKE '%abc%'",
        "SELECT id FROM notes WHERE note LIKE '%a%'",
        "SELECT id FROM notes WHERE note LIKE '%ab%'",
        "SELECT id FROM notes WHERE note LIKE '%__%'",
        "SELECT id FROM notes WHERE note LIKE '%abc!%' ESCAPE '!'",
    ],
)
def test_predicates_over_text_are_few_and_name_enough(sql: str) -> None:
    assert _refused(sql) is R.EXPENSIVE_PATTERN


def test_an_underscore_in_a_text_pattern_is_literal() -> None:
    prepared = _prepare("SELECT COUNT(*) AS n FROM notes WHERE kind LIKE 'DB_POOL%'")
    assert isinstance(prepared, Prepared)
    assert "LIKE 'DB\\\\_POOL%'" in prepared.text
    again = _prepare(prepared.text.replace(" LIMIT 51", ""))
    assert isinstance(again, Prepared) and again.text == prepared.text


def test_recovering_a_redacted_value_takes_more_than_a_hundred_runs() -> None:
    """The design bound: with at most two LIKE over text a statement, each naming three or more
    literal characters and no single-character wildcard, extending a known prefix by one
    character tests at most two candidates a run; a 16-character value over 62 symbols needs on
    average 31 candidates a character, so about 16 * 31 / 2 = 248 runs."""
    runs = 16 * (62 // 2) / 2
    assert runs > 100
    three = _prepare("SELECT id FROM notes WHERE note LIKE '%rd=ab%' OR note LIKE '%rd=ac%'")
    assert isinstance(three, Prepared)
    assert _refused(
        "SELECT id FROM notes WHERE note LIKE '%rd=ab%' OR note LIKE '%rd=ac%'"
        " OR note LIKE '%rd=ad%'"
    ) is R.EXPENSIVE_PATTERN
