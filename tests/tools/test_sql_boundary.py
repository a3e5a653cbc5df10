"""The read-only boundary by class (issue 9), without a server: what ``prepare_sql`` sends.

Each class is exercised with generated variants, not one example: every Unicode whitespace
after ``--``, every position sqlglot renders raw (found automatically with a marker name), deep
nesting of every shape, the string builders, the laundering paths and quoted built-in names.
"""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
import sqlglot
from sqlglot import exp

from sre_diag.tools.sql.guard import (
    MAX_SQL_CHARS,
    Prepared,
    RefusalReason,
    Refused,
    prepare_sql,
)
from sre_diag.tools.sql.lexer import LexKind, LexRefusal, scan_raw, scan_rendered
from tests.mysql_db import TEST_DATABASE
from tests.tools.sql_corpus import INCIDENT_SCHEMA

DATABASE = TEST_DATABASE
TABLES = frozenset({"orders", "payments", "deployments", "db_pool_metrics", "api_credentials"})


def _prepare(sql: str) -> Prepared | Refused:
    return prepare_sql(
        sql, database=DATABASE, allowed_tables=TABLES, max_rows=50, schema=INCIDENT_SCHEMA
    )


def _refused(sql: str) -> Refused:
    decision = _prepare(sql)
    assert isinstance(decision, Refused), f"prepared: {sql!r} -> {decision}"
    return decision


# --- 1. parser differential: Unicode whitespace and comments ---------------------------------


def _unicode_spaces() -> list[str]:
    """Every non-ASCII code point that is whitespace, a separator or an invisible format char."""
    found = []
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        if (
            char.isspace()
            or category in {"Zs", "Zl", "Zp"}
            or (category == "Cf" and code < 0x10000)
        ):
            found.append(char)
    return found


UNICODE_SPACES = _unicode_spaces()


def test_the_generator_covers_the_known_offenders() -> None:
    for char in ("\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u200b", "\ufeff"):
        assert char in UNICODE_SPACES
    assert len(UNICODE_SPACES) > 60


@pytest.mark.parametrize(
    "template",
    [
        "SELECT 1 --{ws}; DROP TABLE orders\nFROM orders",
        "SELECT id FROM orders WHERE id = 'a' --{ws}UNION SELECT api_key FROM api_credentials",
        "SELECT id FROM orders --{ws}\n, SLEEP(5)",
        "SELECT id{ws}FROM orders",
        "SELECT id FROM orders WHERE status ={ws}'PAID'",
        "SELECT `id{ws}` FROM orders",
        "SELECT CAST(id AS CHAR CHARACTER SET utf8mb4{ws}) FROM orders",
    ],
)
def test_every_unicode_space_outside_strings_is_refused(template: str) -> None:
    for char in UNICODE_SPACES:
        decision = _prepare(template.replace("{ws}", char))
        assert isinstance(decision, Refused), (template, hex(ord(char)))


def test_unicode_inside_a_string_literal_is_data() -> None:
    for char in ("\u00a0", "\u3000", "支"):
        decision = _prepare(f"SELECT id FROM orders WHERE status = 'a{char}b'")
        assert isinstance(decision, Prepared)
        assert f"'a{char}b'" in decision.text


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 -- x",
        "SELECT 1 --\tx",
        "SELECT 1 --\x0bx",
        "SELECT 1 --\x0cx",
        "SELECT 1 --\x01x",
        "SELECT 1 --",
        "SELECT 1 # x",
        "SELECT 1 /* x */",
        "SELECT 1 /*! , SLEEP(1) */",
        "SELECT 1 /*M!100000 , SLEEP(1) */",
        "SELECT 1 /*+ MAX_EXECUTION_TIME(1) */",
        "SELECT 1 */",
        "SELECT 1--1",
    ],
)
def test_every_comment_form_is_refused(sql: str) -> None:
    _refused(sql)


# --- 1b. raw-rendered positions, found automatically -------------------------------------------

MARKER = "zqmark"

# Statements with one slot ``{p}`` in a position that may be a name, a unit, a charset, a type
# parameter, a collation or an alias. The test below finds which of them sqlglot renders raw.
SLOT_TEMPLATES = [
    "SELECT CAST(id AS CHAR CHARACTER SET {p}) FROM orders",
    "SELECT CONVERT(id USING {p}) FROM orders",
    "SELECT CONVERT(id, CHAR CHARACTER SET {p}) FROM orders",
    "SELECT TIMESTAMPDIFF({p}, created_at, NOW()) FROM orders",
    "SELECT TIMESTAMPADD({p}, 1, created_at) FROM orders",
    "SELECT DATE_ADD(created_at, INTERVAL 1 {p}) FROM orders",
    "SELECT DATE_SUB(created_at, INTERVAL 1 {p}) FROM orders",
    "SELECT created_at + INTERVAL 1 {p} FROM orders",
    "SELECT EXTRACT({p} FROM created_at) FROM orders",
    "SELECT CAST(amount_cents AS DECIMAL({p}, 2)) FROM orders",
    "SELECT CAST(amount_cents AS DECIMAL(10, {p})) FROM orders",
    "SELECT CAST(id AS CHAR({p})) FROM orders",
    "SELECT CAST(created_at AS DATETIME({p})) FROM orders",
    "SELECT CAST(created_at AS TIME({p})) FROM orders",
    "SELECT id COLLATE {p} FROM orders",
    "SELECT id AS {p} FROM orders",
    "SELECT {p}.id FROM orders AS {p}",
    "SELECT COUNT(*) OVER {p} FROM orders WINDOW {p} AS (ORDER BY id)",
    "SELECT {p}(id) FROM orders",
    "SELECT TRIM({p} 'x' FROM id) FROM orders",
    "SELECT GROUP_CONCAT(id SEPARATOR {p}) FROM orders",
    "SELECT DATE_FORMAT(created_at, {p}) FROM orders",
    "SELECT id FROM orders WHERE id LIKE 'a%' ESCAPE {p}",
    "SELECT id FROM orders LIMIT {p}",
    "SELECT id FROM orders ORDER BY {p}",
    "SELECT * FROM orders USE INDEX ({p})",
    "SELECT * FROM orders PARTITION ({p})",
]


def _unit_function_templates() -> list[str]:
    """Every sqlglot function with a ``unit`` argument, called the MySQL way with the slot."""
    templates = []
    for name in dir(exp):
        node = getattr(exp, name)
        if isinstance(node, type) and issubclass(node, exp.Func) and "unit" in node.arg_types:
            for sql_name in node.sql_names()[:1]:
                templates.append(f"SELECT {sql_name}({{p}}, created_at, created_at) FROM orders")
                templates.append(f"SELECT {sql_name}(created_at, INTERVAL 1 {{p}}) FROM orders")
    return templates


ALL_SLOT_TEMPLATES = SLOT_TEMPLATES + _unit_function_templates()

PAYLOADS = [
    f"`{MARKER}`",
    "`utf8mb4) FROM orders; DROP TABLE orders; --`",
    "`SECOND, 1, 2) ; SELECT 1 -- `",
    "`DAY) UNION SELECT api_key FROM api_credentials -- `",
    "`10), (SELECT api_key FROM api_credentials`",
    "`x` , SLEEP(5) , `y`",
    "`a'b`",
    "`a\\`",
    "`\u00a0`",
    "`/*!50000 SLEEP(1)*/`",
]


def _bare(text: str, word: str) -> bool:
    """True when ``word`` occurs in ``text`` outside back-quotes and string literals."""
    outside = re.sub(r"`[^`]*`|'(?:[^'\\]|\\.|'')*'", " ", text)
    return word in outside


def _raw_positions(slot: str) -> list[str]:
    """Templates where sqlglot itself (not the guard) renders ``slot`` without quotes."""
    found = []
    for template in ALL_SLOT_TEMPLATES:
        try:
            tree = sqlglot.parse_one(template.replace("{p}", slot), read="mysql")
            rendered = tree.sql(dialect="mysql", identify=True)
        except Exception:
            continue
        if _bare(rendered, MARKER):
            found.append(template)
    return found


def test_the_detector_finds_the_positions_sqlglot_renders_raw() -> None:
    pasted = _raw_positions(f"`{MARKER}`")  # a quoted name pasted verbatim: the attack
    words = _raw_positions(MARKER)  # a bare word kept as a raw word (units, charsets, types)
    assert any("CHARACTER SET" in template for template in pasted), pasted
    assert any("COLLATE" in template for template in words), words
    # Units take the quoted form apart: `DAY` becomes the bare unit word DAY.
    unit = sqlglot.parse_one("SELECT DATE_ADD(a, INTERVAL 1 `DAY`)", read="mysql")
    assert _bare(unit.sql(dialect="mysql", identify=True), "DAY")


FORBIDDEN_BARE = (MARKER, "SLEEP", "DROP", "UNION", "api_key", "api_credentials", ";", "--", "/*")


@pytest.mark.parametrize("template", ALL_SLOT_TEMPLATES)
def test_no_quoted_name_is_ever_pasted_raw(template: str) -> None:
    for payload in [*PAYLOADS, MARKER]:
        decision = _prepare(template.replace("{p}", payload))
        if isinstance(decision, Refused):
            continue
        # Allowed only where the name stays a quoted name (or was dropped by the rewrite):
        # nothing of the payload is bare in the text, and the lexer classifies every token.
        for word in FORBIDDEN_BARE:
            assert not _bare(decision.text, word), (template, payload, decision.text)
        scan_rendered(decision.text)


# --- 2. multiple statements ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT 2",
        "SELECT 1 ;SELECT GET_LOCK('x', 0)",
        "SELECT id FROM orders WHERE id = 'a';DELETE FROM orders",
        "SELECT 1;\tUPDATE orders SET status = 'X'",
        "SELECT 1;\u00a0SELECT 2",
        "SELECT (SELECT 1; SELECT 2)",
        "SELECT ';' AS a; SELECT 2",
    ],
)
def test_stacked_statements_are_refused(sql: str) -> None:
    _refused(sql)


def test_a_semicolon_inside_a_string_is_data_and_a_trailing_one_is_dropped() -> None:
    decision = _prepare("SELECT id FROM orders WHERE status = 'a;b' ;  ")
    assert isinstance(decision, Prepared)
    assert decision.text.endswith("LIMIT 51") and "'a;b'" in decision.text


# --- 3. functions whose output is not bounded by their input ------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT REPLACE(id, 'o', 'oooo') FROM orders",
        "SELECT REPLACE(REPLACE(REPLACE(id, 'o', 'oo'), 'o', 'oo'), 'o', 'oo') FROM orders",
        "SELECT REPEAT(id, 1000) FROM orders",
        "SELECT LPAD(id, 100000000, 'x') FROM orders",
        "SELECT RPAD('a', 100000000, 'b')",
        "SELECT INSERT(id, 1, 0, id) FROM orders",
        "SELECT SPACE(100000000)",
        "SELECT CONCAT(CONCAT(id, id), CONCAT(id, id)) FROM orders",
        "SELECT CONCAT_WS(',', CONCAT(id, id), id) FROM orders",
        "SELECT CONCAT(GROUP_CONCAT(id), 'x') FROM orders",
        "WITH a AS (SELECT CONCAT(id, id, id, id) AS x FROM orders) SELECT LENGTH(x) FROM a",
        "SELECT LENGTH(x) FROM (SELECT CONCAT(id, id, id) AS x FROM orders) AS d",
        "SELECT LENGTH(x) FROM orders o JOIN (SELECT GROUP_CONCAT(id) AS x FROM orders) AS d",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",
        "SELECT id FROM orders WHERE id LIKE '%a%b%c%d%e%'",
        "SELECT id FROM orders WHERE id LIKE CONCAT('%', status, '%')",
        "SELECT id FROM orders WHERE id LIKE status",
        "SELECT id FROM orders WHERE id RLIKE '(a+)+$'",
        "SELECT id FROM orders WHERE id REGEXP '(a|aa)+'",
        "SELECT REGEXP_REPLACE(id, 'a', 'b') FROM orders",
        "SELECT BENCHMARK(1000000, MD5(id)) FROM orders",
    ],
)
def test_unbounded_work_is_refused(sql: str) -> None:
    _refused(sql)


def test_a_single_concat_and_a_bounded_like_still_pass() -> None:
    for sql in (
        "SELECT CONCAT(id, ' / ', user_id) AS k FROM orders",
        "SELECT GROUP_CONCAT(id ORDER BY id) AS ids FROM orders GROUP BY status",
        "SELECT id FROM orders WHERE status LIKE '%PEND%'",
    ):
        assert isinstance(_prepare(sql), Prepared), sql


# --- 4. secret laundering -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT (SELECT api_key FROM api_credentials LIMIT 1) AS note FROM orders",
        "SELECT id, (SELECT secret_token FROM api_credentials WHERE id = 1) AS x FROM orders",
        "WITH c(note) AS (SELECT api_key FROM api_credentials) SELECT note FROM c",
        "WITH c AS (SELECT api_key FROM api_credentials) SELECT api_key AS note FROM c",
        "WITH c AS (SELECT * FROM api_credentials) SELECT * FROM c",
        "SELECT note FROM (SELECT api_key AS api_key FROM api_credentials) AS t(note)",
        "SELECT * FROM (SELECT * FROM api_credentials) AS t",
        "SELECT provider FROM orders UNION SELECT * FROM api_credentials",
        "SELECT 'x' AS a UNION SELECT api_key FROM api_credentials",
        "SELECT id FROM orders UNION ALL SELECT t.* FROM api_credentials AS t",
        "SELECT id FROM orders WHERE EXISTS (SELECT 1 FROM api_credentials WHERE api_key > 'm')",
        "SELECT provider FROM api_credentials ORDER BY api_key",
        "SELECT provider, LENGTH(api_key) FROM api_credentials",
        "SELECT MAX(api_key) AS api_key FROM api_credentials",
        "SELECT id FROM orders WHERE id IN (SELECT api_key FROM api_credentials)",
        "SELECT * FROM orders JOIN (SELECT api_key AS k FROM api_credentials) AS s",
    ],
)
def test_secret_values_cannot_leave_under_another_name(sql: str) -> None:
    _refused(sql)


def test_outermost_secret_projection_keeps_its_name_for_masking() -> None:
    for sql in (
        "SELECT provider, api_key FROM api_credentials",
        "SELECT * FROM api_credentials",
        "SELECT c.* FROM api_credentials AS c",
        "SELECT api_key AS old_api_key FROM api_credentials",
    ):
        assert isinstance(_prepare(sql), Prepared), sql


# --- 5. quoted built-in names resolve to stored functions ----------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT `now`()",
        "SELECT `NOW` ()",
        "SELECT `now`\n()",
        "SELECT `utc_timestamp`() FROM orders",
        "SELECT `count`(*) FROM orders",
        "SELECT `IFNULL`(status, 'x') FROM orders",
        "SELECT `date_format`(created_at, '%H') FROM orders",
        f"SELECT {TEST_DATABASE}.now()",
        f"SELECT `{TEST_DATABASE}`.`now`()",
    ],
)
def test_quoted_function_names_are_refused(sql: str) -> None:
    _refused(sql)


def test_anonymous_built_ins_are_rendered_as_bare_words() -> None:
    decision = _prepare("SELECT now(), time_to_sec('00:01:00'), weekday(created_at) FROM orders")
    assert isinstance(decision, Prepared)
    assert "NOW()" in decision.text and "TIME_TO_SEC(" in decision.text
    assert "`now`" not in decision.text.lower()


# --- 6. deep nesting ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + "(" * 1500 + "1" + ")" * 1500,
        "SELECT " + "(" * 40 + "1" + ")" * 40,
        "SELECT " + "NOT " * 900 + "1",
        "SELECT " + "- " * 1500 + "1",
        "SELECT " + "~" * 2000 + "1",
        "SELECT " + "ABS(" * 200 + "1" + ")" * 200,
        "SELECT " + "CASE WHEN 1 THEN " * 300 + "1" + " END" * 300,
        "SELECT 1 FROM orders WHERE " + " AND ".join(["id = 'x'"] * 600),
        "SELECT " + "(SELECT " * 100 + "1" + ")" * 100,
        "SELECT " + "1 + " * 1300 + "1",
        "SELECT " + "x" * (MAX_SQL_CHARS + 1),
    ],
)
def test_deep_or_huge_input_is_refused_never_raised(sql: str) -> None:
    decision = _refused(sql[: MAX_SQL_CHARS * 3])
    assert decision.reason in {
        RefusalReason.TOO_COMPLEX,
        RefusalReason.PARSE_ERROR,
        RefusalReason.LEXICAL,
        RefusalReason.UNSUPPORTED_SYNTAX,
    }


# --- the lexer itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1;",
        "SELECT @a",
        "SELECT ?",
        "SELECT 1e",
        "SELECT 1abc",
        "SELECT 0x41",
        "SELECT x'41'",
        "SELECT _utf8mb4'a'",
        "SELECT N'a'",
        "SELECT 'unterminated",
        "SELECT `unterminated",
        "SELECT `a``b`",
        "SELECT \\N",
        "SELECT {fn now()}",
        "SELECT $1",
        "SELECT 1 := 2",
        "SELECT '\u00a0' FROM `t\u00e9`",
        "SELECT 1 FROM t\x00",
    ],
)
def test_the_lexer_refuses_what_it_cannot_classify(text: str) -> None:
    with pytest.raises(LexRefusal):
        scan_rendered(text)


def test_rendered_mode_only_knows_its_vocabulary() -> None:
    with pytest.raises(LexRefusal):
        scan_rendered("SELECT SLEEP(1)")
    with pytest.raises(LexRefusal):
        scan_rendered('SELECT "a"')
    tokens = scan_rendered("SELECT `a`, 'b''c', 1.5e3 FROM `t` WHERE `a` <=> 2 LIMIT 51")
    kinds = [token.kind for token in tokens]
    assert kinds.count(LexKind.QUOTED_IDENT) == 3 and kinds.count(LexKind.STRING) == 1
    # The model may write double-quoted strings and a trailing semicolon.
    assert [t.kind for t in scan_raw('SELECT "a" ;')] == [LexKind.WORD, LexKind.STRING]
