"""Issue 21 without a server: the guard's typed pass, masks by position, secret positions,
the one secret-name detector and the bounded canonical form."""

from __future__ import annotations

import time

import pytest

from sre_diag.tools.redact import is_secret_name
from sre_diag.tools.schemas import MysqlInput
from sre_diag.tools.sql.bounds import CAP_CHARS, ColumnShape, Schema, ValueKind, column_shape
from sre_diag.tools.sql.canonical import canonical_sql
from sre_diag.tools.sql.guard import Prepared, RefusalReason, Refused, check_sql, prepare_sql
from sre_diag.tools.sql.post import PostKind, PostOp, apply_post
from tests.mysql_db import TEST_DATABASE
from tests.tools.sql_corpus import INCIDENT_SCHEMA

DATABASE = TEST_DATABASE
TABLES = frozenset(INCIDENT_SCHEMA)
R = RefusalReason


def _prepare(sql: str, schema: Schema = INCIDENT_SCHEMA) -> Prepared | Refused:
    return prepare_sql(
        sql, database=DATABASE, allowed_tables=frozenset(schema), max_rows=50, schema=schema
    )


def _reason(sql: str, schema: Schema = INCIDENT_SCHEMA) -> RefusalReason:
    decision = _prepare(sql, schema)
    assert isinstance(decision, Refused), f"prepared: {sql!r} -> {decision}"
    return decision.reason


# --- masks by the position of the checked projection ---------------------------------------------


@pytest.mark.parametrize(
    ("sql", "masked"),
    [
        # a star expands to the readable columns only (no column classified secret)
        ("SELECT * FROM api_credentials", (False, False, False)),
        ("SELECT c.* FROM api_credentials AS c", (False, False, False)),
        ("SELECT provider, API_KEY, Secret_Token FROM api_credentials", (False, True, True)),
        ("SELECT provider, api_key FROM api_credentials", (False, True)),
        ("SELECT api_key AS " + "a" * 300 + "_api_key FROM api_credentials", (True,)),
        ("SELECT id, api_key AS api_key, api_key AS api_key_2 FROM api_credentials",
         (False, True, True)),
        ("SELECT o.*, c.api_key FROM orders o JOIN api_credentials c ON c.id = o.id",
         (False,) * 7 + (True,)),
        ("SELECT * FROM orders o JOIN api_credentials c ON c.id = o.id",
         (False,) * 7 + (False, False, False)),
        ("WITH c AS (SELECT provider AS p FROM api_credentials) SELECT * FROM c", (False,)),
        ("SELECT id FROM orders UNION SELECT provider FROM api_credentials", (False,)),
        ("SELECT 1 AS one, NOW() AS t", (False, False)),
    ],
)  # fmt: skip
def test_masks_follow_the_checked_projection(sql: str, masked: tuple[bool, ...]) -> None:
    prepared = _prepare(sql)
    assert isinstance(prepared, Prepared), prepared
    assert prepared.masked == masked
    assert "*" not in prepared.text.replace("COUNT(*)", "")  # every column named explicitly


def test_a_star_the_schema_cannot_expand_is_refused() -> None:
    partial = {"orders": INCIDENT_SCHEMA["orders"]}
    for sql in (
        "SELECT * FROM payments",
        "SELECT p.* FROM payments p",
        "SELECT * FROM orders o JOIN payments p USING (id)",
        "WITH c AS (SELECT COUNT(*) FROM orders) SELECT * FROM c",
    ):
        decision = prepare_sql(
            sql,
            database=DATABASE,
            allowed_tables=frozenset({"orders", "payments"}),
            max_rows=5,
            schema=partial,
        )
        assert isinstance(decision, Refused), sql


# --- secret columns in every syntactic position ------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT o.id FROM orders o JOIN api_credentials c USING (api_key)",
        "SELECT * FROM orders NATURAL JOIN api_credentials",
        "SELECT id FROM orders NATURAL RIGHT JOIN api_credentials",
        "SELECT provider, api_key FROM api_credentials ORDER BY 2",
        "SELECT api_key FROM api_credentials GROUP BY 1",
        "SELECT id, provider, api_key FROM api_credentials ORDER BY 3 DESC",
        "SELECT DISTINCT provider, secret_token FROM api_credentials",
        "SELECT DISTINCT c.provider, c.Api_Key FROM api_credentials c",
        "SELECT provider, SUM(1) OVER (PARTITION BY secret_token) FROM api_credentials",
        "SELECT provider, LAG(provider) OVER (ORDER BY api_key) FROM api_credentials",
        "SELECT provider FROM api_credentials GROUP BY provider HAVING COUNT(api_key) > 1",
        "SELECT o.id FROM orders o JOIN api_credentials c ON c.secret_token = o.user_id",
        "SELECT x FROM (SELECT api_key AS x FROM api_credentials) AS d",
        "SELECT d.api_key FROM (SELECT api_key FROM api_credentials) AS d",
        "SELECT provider, api_key AS api_key_x FROM api_credentials ORDER BY api_key_x",
        "SELECT provider, api_key AS k FROM api_credentials",
        "SELECT COUNT(DISTINCT api_key) FROM api_credentials",
    ],
)
def test_secret_columns_are_only_bare_outermost_projections(sql: str) -> None:
    assert _reason(sql) in {R.SECRET_COLUMN, R.UNSUPPORTED_SYNTAX}
    if "*" not in sql:  # the untyped early pass refuses them too (a * needs the schema)
        assert isinstance(check_sql(sql, database=DATABASE, allowed_tables=TABLES), Refused)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        *[(n, True) for n in (
            "passphrase", "otp", "otp_code", "user_pin", "pin", "cvv", "card_cvc", "jwt",
            "id_jwt", "signature", "request_signature", "dsn", "db_dsn", "totp_seed", "mfaSecret",
            "session_cookie", "bearer", "sessionId", "privKey", "accessKeyId", "card_number",
            "auth_header", "webhookSig", "hmac", "nonce", "ssn", "iban", "passcode", "pinCode",
        )],
        *[(n, False) for n in (
            "shipping", "spinner", "opinion", "author", "options", "compass", "passenger",
            "dsname", "design", "status", "pipeline", "topic", "cvs_store", "jwt_count",
        )],
    ],
)  # fmt: skip
def test_secret_name_detection_knows_more_shapes(name: str, secret: bool) -> None:
    if name == "jwt_count":
        secret = True  # "jwt" as a name part: masked (erring on the side of masking)
    assert is_secret_name(name) is secret


# --- text columns leave only whole --------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUBSTRING(change_summary, LOCATE('Bearer ', change_summary) + 7) FROM deployments",
        "SELECT SUBSTRING_INDEX(SUBSTRING_INDEX(change_summary, '@', 1), ':', -1) FROM deployments",
        "SELECT CONCAT_WS(' ', LEFT(change_summary, 5), SUBSTRING(change_summary, 6)) "
        "FROM deployments",
        "SELECT SUBSTR(deployed_by, 2) FROM deployments",
        "SELECT LOCATE('a', status) FROM orders",
        "SELECT INSTR(status, 'a') FROM orders",
        "SELECT POSITION('a' IN status) FROM orders",
        "SELECT TRIM(BOTH 'x' FROM status) FROM orders",
        "SELECT TRIM(LEADING 'P' FROM status) FROM orders",
        "SELECT CAST(change_summary AS CHAR(10)) FROM deployments",
        "SELECT CAST(change_summary AS BINARY(10)) FROM deployments",
        "SELECT JSON_EXTRACT(change_summary, '$.password') FROM deployments",
        "SELECT change_summary ->> '$.password' FROM deployments",
        "SELECT JSON_UNQUOTE(change_summary) FROM deployments",
        "SELECT CONCAT('x', status) FROM orders",
        "SELECT CONCAT(status, 'x') FROM orders",
        "SELECT CONCAT(status, '/', id) FROM orders",
        "SELECT CONCAT(status, '_', id) FROM orders",
        "SELECT CONCAT(status, '=', id) FROM orders",
        "SELECT CONCAT(status, id) FROM orders",
        "SELECT CONCAT(amount_cents, status) FROM orders",
        "SELECT CONCAT(status, '') FROM orders",
        "SELECT CONCAT_WS('', status, id) FROM orders",
        "SELECT CONCAT_WS('-', status, id) FROM orders",
        "SELECT GROUP_CONCAT(status SEPARATOR '') FROM orders",
        "SELECT GROUP_CONCAT(status SEPARATOR ' x') FROM orders",
        "SELECT GROUP_CONCAT(status, id) FROM orders",
        "SELECT LEFT(COALESCE(status, 'x'), 2) FROM orders",
        "SELECT LEFT(IF(id = 'a', status, id), 2) FROM orders",
        "SELECT SUBSTRING(MAX(change_summary), 2) FROM deployments",
        "SELECT LEFT(d.s, 3) FROM (SELECT status AS s FROM orders) AS d",
        "WITH c AS (SELECT status AS s FROM orders) SELECT UPPER(s) FROM c",
        "SELECT LEFT((SELECT MAX(status) FROM orders), 2)",
        "SELECT LEFT(unknown_column, 2) FROM orders",
        "SELECT STR_TO_DATE(change_summary, 'pin: %Y') FROM deployments",
        "SELECT STR_TO_DATE(status, '%d') FROM orders",
    ],
)
def test_text_columns_are_never_cut_searched_or_recased(sql: str) -> None:
    assert _reason(sql) in {R.TEXT_EXTRACTION, R.EXPRESSION_TOO_LARGE, R.EXPENSIVE_PATTERN}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CONCAT(id, ' ', status) FROM orders",
        "SELECT CONCAT(id, ', ', status, ' | ', currency) FROM orders",
        "SELECT CONCAT('order ', id, ';') FROM orders",
        "SELECT CONCAT_WS(' ; ', id, status) FROM orders",
        "SELECT GROUP_CONCAT(status ORDER BY status SEPARATOR '|') FROM orders",
        "SELECT GROUP_CONCAT(DISTINCT status) FROM orders",
        "SELECT LEFT(created_at, 10), SUBSTRING(amount_cents, 1, 2) FROM orders",
        "SELECT UPPER(DATE_FORMAT(created_at, '%b')) FROM orders",
        "SELECT LENGTH(change_summary), CHAR_LENGTH(change_summary) FROM deployments",
        "SELECT TRIM(status), COALESCE(error_code, 'none'), IFNULL(error_code, '-') FROM payments",
        "SELECT CAST(status AS CHAR), CAST(amount_cents AS CHAR(12)) FROM orders",
        "SELECT DATE(created_at), HOUR(created_at) FROM orders",
        "SELECT STR_TO_DATE('2026-11-28', '%Y-%m-%d') AS d, DATE(created_at) FROM orders",
        "SELECT CONCAT(UPPER('a'), ' ', status) FROM orders",
    ],
)
def test_whole_values_and_non_text_functions_still_pass(sql: str) -> None:
    assert isinstance(_prepare(sql), Prepared), sql


# --- static cost and size bounds ----------------------------------------------------------------

BIG: Schema = {
    "logs": (
        column_shape("id", "bigint", None),
        column_shape("message", "text", 65535),
        column_shape("detail", "text", 65535),
        column_shape("payload", "longtext", 4294967295),
        column_shape("doc", "json", None),
        column_shape("line", "varchar", 4000),
        column_shape("level", "enum", 20),
        column_shape("at", "datetime", None),
    )
}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM logs",
        "SELECT id FROM logs WHERE payload LIKE '%timeout%'",
        "SELECT id FROM logs WHERE message LIKE '%" + "x" * 40 + "%'",
        "SELECT id FROM logs WHERE CONCAT(message, ' ', detail) LIKE '%a%'",
        "SELECT COUNT(DISTINCT CONCAT(line, ' ', line, ' ', line)) FROM logs a",
        "SELECT COUNT(DISTINCT message) FROM logs",
        "SELECT DISTINCT message FROM logs",
        "SELECT message, COUNT(*) FROM logs GROUP BY message",
        "SELECT COUNT(*) FROM logs GROUP BY line, at, line, level, line",
        "SELECT CAST(id AS BINARY(65535)) FROM logs",
        "SELECT CAST(id AS CHAR(5000)) FROM logs",
        "SELECT CAST(id AS BINARY(1025)) FROM logs",
        "SELECT LOCATE('" + "y" * 600 + "', CAST(id AS CHAR(1000))) FROM logs",
        "SELECT SUBSTRING_INDEX(CAST(at AS CHAR(1000)), '" + "z" * 600 + "', 1) FROM logs",
        "SELECT FIND_IN_SET('" + "q" * 600 + "', CAST(id AS CHAR(1000))) FROM logs",
        "SELECT LOCATE('a', CONCAT(line, ' ', line, ' ', line)) FROM logs",
        "SELECT GREATEST(message, detail) AS g, line FROM logs",
        "SELECT (SELECT MAX(payload) FROM logs) AS m",
    ],
)
def test_statements_whose_cost_or_size_is_unbounded_are_refused(sql: str) -> None:
    assert _reason(sql, BIG) in {R.EXPRESSION_TOO_LARGE, R.TEXT_EXTRACTION, R.UNSUPPORTED_SYNTAX}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, line, level, at FROM logs WHERE message LIKE '%pool exhausted%'",
        "SELECT message FROM logs WHERE at > '2026-11-28 10:00:00' LIMIT 5",
        "SELECT level, COUNT(*) FROM logs GROUP BY level",
        "SELECT line, COUNT(*) FROM logs GROUP BY line",
        "SELECT LENGTH(payload) AS n FROM logs",
        "SELECT CAST(id AS CHAR(1024)) FROM logs",
        "SELECT message, detail FROM logs",
        "SELECT id, payload FROM logs",
        "SELECT doc AS d, level FROM logs ORDER BY at DESC",
    ],
)
def test_bounded_diagnostics_on_wide_tables_pass(sql: str) -> None:
    assert isinstance(_prepare(sql, BIG), Prepared), sql


def test_refusals_name_the_class_never_the_threshold() -> None:
    decision = _prepare("SELECT message, detail, payload, doc, line FROM logs", BIG)
    assert isinstance(decision, Refused)
    assert decision.reason is R.EXPRESSION_TOO_LARGE
    assert not any(str(n) in decision.detail for n in (65536, 64, 8192, 1024))


def test_wide_text_columns_are_sent_cut_by_the_guard_itself() -> None:
    prepared = _prepare("SELECT id, payload, message AS m FROM logs", BIG)
    assert isinstance(prepared, Prepared), prepared
    assert prepared.text == (
        f"SELECT `id`, LEFT(`payload`, {CAP_CHARS}) AS `payload`, "
        f"LEFT(`message`, {CAP_CHARS}) AS `m` FROM `logs` LIMIT 51"
    )
    # The cap is recognised only in exactly that shape, as an outermost projection.
    for sql in (
        f"SELECT DISTINCT LEFT(payload, {CAP_CHARS - 1}) AS p FROM logs",
        f"SELECT x FROM (SELECT LEFT(payload, {CAP_CHARS}) AS x FROM logs) AS d",
        f"SELECT id FROM logs WHERE LEFT(message, {CAP_CHARS}) = 'a'",
    ):
        assert _reason(sql, BIG) in {R.TEXT_EXTRACTION, R.EXPRESSION_TOO_LARGE}, sql


@pytest.mark.parametrize(
    ("sql", "sent", "op"),
    [
        ("SELECT RIGHT(status, 3) FROM orders", "SELECT `status` AS `RIGHT(status, 3)`",
         PostOp(PostKind.RIGHT, 3)),
        ("SELECT LOWER(id) AS i FROM orders", "SELECT `id` AS `i`", PostOp(PostKind.LOWER)),
        ("SELECT UPPER(error_code) FROM payments", "SELECT `error_code` AS `UPPER(error_code)`",
         PostOp(PostKind.UPPER)),
        ("SELECT SUBSTRING_INDEX(status, ';', -2) AS s FROM orders", "SELECT `status` AS `s`",
         PostOp(PostKind.SUBSTRING_INDEX, -2, ";")),
    ],
)  # fmt: skip
def test_outermost_cuts_and_recasing_run_after_redaction(sql: str, sent: str, op: PostOp) -> None:
    prepared = _prepare(sql)
    assert isinstance(prepared, Prepared), prepared
    assert prepared.text.startswith(sent + " FROM"), prepared.text
    assert prepared.post == (op,)
    # Grouped, distinct or nested, the function is judged as written: refused over text.
    for shaped in (sql.replace("SELECT ", "SELECT DISTINCT ", 1),
                   f"SELECT x FROM ({sql}) AS d(x)"):  # fmt: skip
        assert _reason(shaped) is R.TEXT_EXTRACTION, shaped


def test_post_functions_follow_mysql() -> None:
    text = "a;b;c"
    assert apply_post(PostOp(PostKind.SUBSTRING_INDEX, 1, ";"), text) == "a"
    assert apply_post(PostOp(PostKind.SUBSTRING_INDEX, -2, ";"), text) == "b;c"
    assert apply_post(PostOp(PostKind.SUBSTRING_INDEX, 0, ";"), text) == ""
    assert apply_post(PostOp(PostKind.LEFT, 2), text) == "a;"
    assert apply_post(PostOp(PostKind.RIGHT, 2), text) == ";c"
    assert apply_post(PostOp(PostKind.UPPER), text) == "A;B;C"


def test_column_shapes_from_the_catalogue() -> None:
    assert column_shape("n", "INT", None) == ColumnShape("n", ValueKind.NUMBER, 40)
    assert column_shape("t", "datetime", None).kind is ValueKind.TEMPORAL
    assert column_shape("s", "varchar", 128) == ColumnShape("s", ValueKind.TEXT, 128)
    assert column_shape("e", "enum", 8).kind is ValueKind.LABEL
    assert column_shape("g", "something_new", None) == ColumnShape(
        "g", ValueKind.TEXT, 2**32
    )  # unknown types are text of unknown size


def test_any_value_is_refused_everywhere() -> None:
    for sql in (
        "SELECT ANY_VALUE(id) FROM orders",
        "SELECT status, ANY_VALUE(amount_cents) FROM orders GROUP BY status",
        "SELECT `any_value`(id) FROM orders",
    ):
        assert _reason(sql) in {R.FORBIDDEN_FUNCTION, R.LEXICAL}


# --- bounded parsing before the guard (the canonical form) ---------------------------------------

DEEP = [
    "SELECT " + "(" * 3000 + "1" + ")" * 3000,
    "SELECT " + "- " * 1990 + "1",
    "SELECT " + "NOT " * 995 + "1",
    "SELECT " + "~" * 3990 + "1",
    "SELECT " + "ABS(" * 790 + "1" + ")" * 790,
    "SELECT " + "+".join(["1"] * 1990),
    "SELECT " + "CASE WHEN 1 THEN " * 300 + "1" + " END" * 300,
    "SELECT 1 FROM t WHERE " + " OR ".join(["a = 1"] * 600),
    "SELECT " + "(SELECT " * 400 + "1" + ")" * 400,
    "SELECT 1 " + "UNION SELECT 1 " * 260,
    "SELECT " + "[" * 3990,
    "SELECT '" + "\\" * 3990,
]


@pytest.mark.parametrize("sql", DEEP)
def test_canonical_form_and_guard_bound_every_deep_shape(sql: str) -> None:
    started = time.perf_counter()
    text = MysqlInput(sql=sql[:4000], purpose="deep").canonical()
    assert isinstance(text, str) and text
    decision = _prepare(sql[:4000])
    assert isinstance(decision, Refused)
    assert time.perf_counter() - started < 2.0


def test_canonical_form_of_oversized_text_never_parses() -> None:
    text = canonical_sql("SELECT " + "(" * 100_000)
    assert text.startswith("select (")
    assert canonical_sql("SELECT  id FROM orders ;") == canonical_sql("select id from orders")
