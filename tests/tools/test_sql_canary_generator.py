"""Canaries: random statements over text holding secrets never bring a secret back in clear.

A table of this run's own holds free text in which each canary sits where redaction finds it
(``password=…``, ``Bearer …``, a DSN password, ``token=…``, a JSON ``token``), and a secret column
the account is not granted (the database is the boundary). A seeded generator composes
expressions over the text, nesting 1–4 deep, from templates for every function the guard allows,
and places them in plain selects, CTE chains, derived tables, joins, predicates and set
operations. Every statement runs through the real adapter on MariaDB: it is refused, fails on
the server, or returns no six consecutive characters of any canary, in any case.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pymysql
import pytest

from sre_diag.tools.base import AdapterCall, Failed, Ready
from sre_diag.tools.mysql import MysqlAdapter, parse_dsn
from sre_diag.tools.schemas import MysqlInput
from sre_diag.tools.sql.walk import _ALLOWED_ANONYMOUS_FUNCTIONS, _ALLOWED_FUNCTION_NODES
from tests.mysql_db import MARIADB, admin_dsn_for, run_name

pytestmark = MARIADB

DB = run_name("diag_canary")
USER = run_name("diag_canary_ro")
PASSWORD = "diag-canary-Pw1"
SEED = 20261128
STATEMENTS = 1500
CANARIES = ("Qz7Kp2Lm9Xw4Rt6V", "Hb3Nc8Vd1Fs5Gj0K", "Wm4Yq9Tz2Lp7Rx1D", "Ce6Ua3Ko8Bn5Ih2J",
            "Py1Gs7Dw4Mk9Zt3E")  # fmt: skip
NOTES = (
    f"login ok password={CANARIES[0]} retry later",
    f"upstream: Authorization: Bearer {CANARIES[1]}AbCdEf12",
    f"dsn mysql://app:{CANARIES[2]}@db:3306/shop failed",
    f"rotated token={CANARIES[3]}; next in 30d",
    json.dumps({"event": "login", "token": CANARIES[4]}),
)

# One template per function the guard allows (by sqlglot class or anonymous name); {0} is the
# nested expression, {s} a short string literal, {n} a small number.
TEMPLATES: dict[str, list[str]] = {
    "Concat": ["CONCAT({0}, {s})", "CONCAT({s}, {0}, {s})"],
    "ConcatWs": ["CONCAT_WS({s}, {0}, {0})"],
    "GroupConcat": ["GROUP_CONCAT({0} SEPARATOR {s})"],
    "Substring": ["SUBSTRING({0}, {n}, {n})", "SUBSTR({0}, {n})"],
    "SubstringIndex": ["SUBSTRING_INDEX({0}, {s}, {n})", "SUBSTRING_INDEX({0}, {s}, -{n})"],
    "Lower": ["LOWER({0})"], "Upper": ["UPPER({0})"],
    "Left": ["LEFT({0}, {n})"], "Right": ["RIGHT({0}, {n})"],
    "Trim": ["TRIM({0})", "TRIM(LEADING {s} FROM {0})"],
    "Length": ["LENGTH({0})"], "StrPosition": ["LOCATE({s}, {0})", "INSTR({0}, {s})"],
    "Coalesce": ["COALESCE({0}, {s})"], "If": ["IF({0} = {s}, {0}, {s})"],
    "Case": ["CASE WHEN {0} LIKE '%pass%' THEN {0} ELSE {s} END"],
    "Nullif": ["NULLIF({0}, {s})"], "Greatest": ["GREATEST({0}, {s})"],
    "Least": ["LEAST({0}, {s})"], "Cast": ["CAST({0} AS CHAR)", "CAST({0} AS CHAR(8))",
                                           "CAST({0} AS SIGNED)", "CONVERT({0} USING utf8mb4)"],
    "Count": ["COUNT({0})"], "Sum": ["SUM({0})"], "Avg": ["AVG({0})"], "Min": ["MIN({0})"],
    "Max": ["MAX({0})"], "Stddev": ["STDDEV({0})"], "StddevPop": ["STDDEV_POP({0})"],
    "StddevSamp": ["STDDEV_SAMP({0})"], "Variance": ["VARIANCE({0})"],
    "VariancePop": ["VAR_POP({0})"],
    "RowNumber": ["ROW_NUMBER() OVER (ORDER BY {0})"], "Rank": ["RANK() OVER (ORDER BY {0})"],
    "DenseRank": ["DENSE_RANK() OVER (ORDER BY {0})"], "Ntile": ["NTILE(2) OVER (ORDER BY {0})"],
    "Lag": ["LAG({0}) OVER (ORDER BY id)"], "Lead": ["LEAD({0}) OVER (ORDER BY id)"],
    "FirstValue": ["FIRST_VALUE({0}) OVER (ORDER BY id)"],
    "LastValue": ["LAST_VALUE({0}) OVER (ORDER BY id)"],
    "NthValue": ["NTH_VALUE({0}, 1) OVER (ORDER BY id)"],
    "PercentRank": ["PERCENT_RANK() OVER (ORDER BY {0})"],
    "CumeDist": ["CUME_DIST() OVER (ORDER BY {0})"],
    "Abs": ["ABS({0})"], "Ceil": ["CEIL({0})"], "Floor": ["FLOOR({0})"], "Round": ["ROUND({0})"],
    "Trunc": ["TRUNCATE({0}, 0)"], "Sign": ["SIGN({0})"], "Pow": ["POW({0}, 2)"],
    "Sqrt": ["SQRT({0})"], "Ln": ["LN({0})"], "Exp": ["EXP({0})"],
    "TimeToStr": ["DATE_FORMAT({0}, {s})", "DATE_FORMAT(NOW(), {0})"],
    "StrToDate": ["STR_TO_DATE({0}, '%Y')"], "TsOrDsToDate": ["DATE({0})"],
    "TsOrDsToTimestamp": ["TIMESTAMP({0})"], "DateAdd": ["DATE_ADD({0}, INTERVAL 1 DAY)"],
    "DateSub": ["DATE_SUB({0}, INTERVAL 1 DAY)"], "DateDiff": ["DATEDIFF({0}, NOW())"],
    "TimestampDiff": ["TIMESTAMPDIFF(SECOND, {0}, NOW())"],
    "Extract": ["EXTRACT(YEAR FROM {0})"], "Year": ["YEAR({0})"], "Month": ["MONTH({0})"],
    "Day": ["DAY({0})"], "Hour": ["HOUR({0})"], "Minute": ["MINUTE({0})"],
    "Second": ["SECOND({0})"], "Dayname": ["DAYNAME({0})"], "LastDay": ["LAST_DAY({0})"],
    "UnixToTime": ["FROM_UNIXTIME({0})", "FROM_UNIXTIME(0, {0})"],
    "JSONExtract": ["JSON_EXTRACT({0}, '$.token')"], "JSONExtractScalar": ["{0} ->> '$.token'"],
    "Exists": ["EXISTS (SELECT 1 FROM vault WHERE note = {0})"],
    "FIELD": ["FIELD({0}, {s}, {s})"], "FIND_IN_SET": ["FIND_IN_SET({s}, {0})"],
    "IFNULL": ["IFNULL({0}, {s})"], "CHAR_LENGTH": ["CHAR_LENGTH({0})"],
    "JSON_UNQUOTE": ["JSON_UNQUOTE(JSON_EXTRACT({0}, '$.token'))"],
    "DATE_FORMAT": ["DATE_FORMAT({0}, '%Y')"], "FROM_UNIXTIME": ["FROM_UNIXTIME(1, {0})"],
    "UNIX_TIMESTAMP": ["UNIX_TIMESTAMP({0})"], "TIME_TO_SEC": ["TIME_TO_SEC({0})"],
    "And": ["({0} AND 1)"], "Or": ["({0} OR 0)"], "Xor": ["({0} XOR 0)"],
    "CURDATE": ["IF({0} = {s}, CURDATE(), NULL)"], "CURTIME": ["IF({0} = {s}, CURTIME(), 1)"],
    "NOW": ["COALESCE({0}, NOW())"], "UTC_TIMESTAMP": ["COALESCE({0}, UTC_TIMESTAMP())"],
    "CurrentDate": ["COALESCE({0}, CURRENT_DATE)"], "CurrentTime": ["COALESCE({0}, CURRENT_TIME)"],
    "CurrentTimestamp": ["COALESCE({0}, CURRENT_TIMESTAMP)"],
    "UtcTimestamp": ["COALESCE({0}, UTC_TIMESTAMP)"],
    "ConvertTimezone": ["CONVERT_TZ({0}, '+00:00', '+01:00')"],
    "DayOfMonth": ["DAYOFMONTH({0})"], "DayOfWeek": ["DAYOFWEEK({0})"],
    "DayOfYear": ["DAYOFYEAR({0})"], "Quarter": ["QUARTER({0})"], "Week": ["WEEK({0})"],
    "MICROSECOND": ["MICROSECOND({0})"], "MONTHNAME": ["MONTHNAME({0})"],
    "SEC_TO_TIME": ["SEC_TO_TIME({0})"], "TIMEDIFF": ["TIMEDIFF({0}, NOW())"],
    "Time": ["TIME({0})"], "Timestamp": ["TIMESTAMP({0}, '01:00:00')"],
    "TimestampAdd": ["TIMESTAMPADD(SECOND, 1, {0})"], "WEEKDAY": ["WEEKDAY({0})"],
    "YEARWEEK": ["YEARWEEK({0})"],
    "arith": ["({0} + 0)", "({0} * 1)", "-{0}", "({0} DIV 1)", "({0} | 0)"],
    "compare": ["({0} > {s})", "({0} LIKE '%ass%')", "({0} = {s})"],
}
_STRINGS = ("' '", "'='", "'@'", "';'", "'pass'", "'Bearer '", "'%Y%m'", "''", "':'", "'x'")


def _generated_templates_cover_the_allowlist() -> set[str]:
    names = {node.__name__ for node in _ALLOWED_FUNCTION_NODES} | set(_ALLOWED_ANONYMOUS_FUNCTIONS)
    return names - set(TEMPLATES)


class _Generator:
    """Seeded composition of expressions and statement shapes."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._names = sorted(TEMPLATES)

    def expression(self, depth: int, base: str = "note") -> str:
        text = base
        for _ in range(depth):
            template = self._random.choice(TEMPLATES[self._random.choice(self._names)])
            text = template.format(
                text, s=self._random.choice(_STRINGS), n=self._random.randint(1, 40)
            )
        return text

    def statement(self) -> str:
        depth = self._random.randint(1, 4)
        shape = self._random.randrange(8)
        if shape == 0:
            return f"SELECT {self.expression(depth)} AS x FROM vault"
        if shape == 1:
            inner, outer = self.expression(1), self.expression(depth - 1 or 1, "a.x")
            return f"WITH a AS (SELECT id, {inner} AS x FROM vault) SELECT {outer} AS y FROM a"
        if shape == 2:
            first, second = self.expression(1), self.expression(1, "a.x")
            third = self.expression(depth, "b.y")
            return (f"WITH a AS (SELECT id, {first} AS x FROM vault), b AS (SELECT id, {second}"
                    f" AS y FROM a) SELECT {third} AS z FROM b")  # fmt: skip
        if shape == 3:
            inner = self.expression(depth)
            return f"SELECT d.x FROM (SELECT {inner} AS x FROM vault) AS d ORDER BY d.x"
        if shape == 4:
            expr = self.expression(depth, "v2.note")
            return f"SELECT v1.id, {expr} AS x FROM vault v1 JOIN vault v2 ON v2.id = v1.id"
        if shape == 5:
            return f"SELECT id FROM vault WHERE {self.expression(depth)} LIKE '%Qz7%'"
        if shape == 6:
            return (f"SELECT {self.expression(depth)} AS x FROM vault UNION ALL"
                    f" SELECT {self._random.choice(_STRINGS)}")  # fmt: skip
        return (f"SELECT label, {self.expression(depth)} AS x FROM vault GROUP BY label, x"
                " ORDER BY x")  # fmt: skip


def _admin_do(*statements: str, rows: list[tuple[object, ...]] | None = None) -> None:
    params = parse_dsn(admin_dsn_for("mysql"))
    connection = pymysql.connect(
        host=params.host, port=params.port, user=params.user, password=params.password,
        autocommit=True, connect_timeout=5,
    )  # fmt: skip
    with connection, connection.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        if rows:
            cur.executemany(f"INSERT INTO {DB}.vault VALUES (%s, %s, %s, %s, %s, %s)", rows)


@pytest.fixture(scope="module")
def vault_dsn(mysql_ro_dsn: str) -> Iterator[str]:
    rows: list[tuple[object, ...]] = [
        (i + 1, note, f"l{i % 2}", i, f"2026-11-28 10:0{i}:00", f"ak_{CANARIES[i]}")
        for i, note in enumerate(NOTES)
    ]
    _admin_do(
        f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
        f"CREATE TABLE {DB}.vault (id INT PRIMARY KEY, note TEXT, label VARCHAR(8), n INT,"
        " at DATETIME, api_key VARCHAR(64))",
        f"DROP USER IF EXISTS '{USER}'@'%'",
        f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'",
        f"GRANT SELECT (id, note, label, n, at) ON {DB}.vault TO '{USER}'@'%'",
        rows=rows,
    )  # fmt: skip
    params = parse_dsn(admin_dsn_for(DB))
    yield f"mysql://{USER}:{PASSWORD}@{params.host}:{params.port}/{DB}"
    _admin_do(f"DROP USER IF EXISTS '{USER}'@'%'", f"DROP DATABASE IF EXISTS {DB}")


def _fragments() -> set[str]:
    return {c[i : i + 6].lower() for c in CANARIES for i in range(len(c) - 5)}


def test_the_templates_cover_every_allowed_function() -> None:
    assert not _generated_templates_cover_the_allowlist()


async def test_no_generated_statement_returns_a_canary(vault_dsn: str) -> None:
    adapter = MysqlAdapter(vault_dsn, (), statement_timeout_seconds=2.0)
    generator = _Generator(SEED)
    fragments = _fragments()
    ran = refused = 0
    try:
        control = await adapter.invoke(AdapterCall(
            "c0", "r0", MysqlInput(sql="SELECT note FROM vault", purpose="control")
        ))  # fmt: skip
        assert isinstance(control, Ready) and len(control.items) == len(NOTES)
        plain = json.dumps([item.model_dump() for item in control.items]).lower()
        assert not [f for f in fragments if f in plain], plain  # redaction's own baseline
        for index in range(STATEMENTS):
            sql = generator.statement()
            result = await adapter.invoke(AdapterCall(
                f"c{index}", "r-canary", MysqlInput(sql=sql[:4000], purpose="canary")
            ))  # fmt: skip
            if isinstance(result, Failed):
                refused += 1
                continue
            assert isinstance(result, Ready)
            ran += 1
            seen = json.dumps([item.model_dump() for item in result.items]).lower()
            leaked = [f for f in fragments if f in seen]
            assert not leaked, (sql, leaked, seen[:500])
    finally:
        await adapter.aclose()
    assert ran >= 100 and refused >= 100, (ran, refused)  # both paths were exercised
