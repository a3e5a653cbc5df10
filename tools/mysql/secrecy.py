"""Can the configured account read a column classified secret? The secrecy verdict.

The guard of ``query_mysql`` is a second layer; the database is the boundary. A column is
*classified secret* by its schema name as the server spells it (:func:`sre_diag.tools.redact.
is_secret_name`, which splits ``userPin`` / ``api-key`` / ``OTP_SEED`` into parts, never the
spelling a model typed) or by ``DIAG_MYSQL_SECRET_COLUMNS`` (``table.column``, ``*`` in either
part, case-insensitive). The account must not be able to read any such column.

What the account can read is what the server itself says: ``information_schema.COLUMNS`` lists
exactly the columns on which the session holds a privilege — its own grants at every level, its
default role (and the roles granted to that role) and, on MariaDB 10.11+, ``PUBLIC``. A table-level
``SELECT`` on a table that holds a secret column therefore shows that column and fails the
verdict; column-level grants without it, or a view without it, pass. A role granted but not
active is out of the session's reach (a model can only send one ``SELECT``; ``SET ROLE`` is not
one), and the read-only verdict (:mod:`sre_diag.tools.mysql.privileges`) follows it anyway.

The grant lines (account, roles, ``PUBLIC``) say *where* a readable secret column comes from, so
that ``check`` can print the exact statements that fix it (:func:`fix_statements`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sre_diag.tools.redact import is_secret_name

__all__ = [
    "MAX_VISIBLE_COLUMNS",
    "VISIBLE_COLUMNS_SQL",
    "GrantLine",
    "SecrecyVerdict",
    "SecretClassifier",
    "SecretColumn",
    "fix_statements",
    "quote_name",
    "secrecy_verdict",
]

MAX_VISIBLE_COLUMNS = 50_000
VISIBLE_COLUMNS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA NOT IN ('information_schema', 'performance_schema')"
    f" ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION LIMIT {MAX_VISIBLE_COLUMNS + 1}"
)
# Shown in ``check`` at most: the rest is summarised by a count.
_MAX_FIX_STATEMENTS = 40


def quote_name(name: str) -> str:
    """A back-quoted identifier (inner back-quotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True, slots=True)
class SecretClassifier:
    """Decides which columns are secret: by schema name, and by the configured patterns."""

    patterns: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_setting(cls, entries: Iterable[str]) -> SecretClassifier:
        """``("staff.*", "*.note")`` → a classifier (entries are ``table.column``)."""
        pairs: list[tuple[str, str]] = []
        for entry in entries:
            table, _, column = entry.strip().partition(".")
            if table and column:
                pairs.append((table.strip().casefold(), column.strip().casefold()))
        return cls(tuple(pairs))

    def is_secret(self, table: str, column: str) -> bool:
        """True for a column of ``table`` whose schema name or a configured pattern is secret."""
        if is_secret_name(column) or is_secret_name(column.casefold()):
            return True
        folded_table, folded_column = table.casefold(), column.casefold()
        return any(
            _matches(table_pattern, folded_table) and _matches(column_pattern, folded_column)
            for table_pattern, column_pattern in self.patterns
        )


def _matches(pattern: str, name: str) -> bool:
    if "*" not in pattern:
        return pattern == name
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, name, flags=re.S) is not None


@dataclass(frozen=True, slots=True, order=True)
class SecretColumn:
    """One column classified secret that the account can read."""

    schema: str
    table: str
    column: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}.{self.column}"


@dataclass(frozen=True, slots=True)
class GrantLine:
    """One line of ``SHOW GRANTS``, with whose grants it is (``None``: the account itself)."""

    holder: str | None
    text: str


@dataclass(frozen=True, slots=True)
class SecrecyVerdict:
    """``readable``: the secret columns the account can read (empty: the verdict passes)."""

    readable: tuple[SecretColumn, ...]
    fixes: tuple[str, ...] = field(default=())
    reason: str = ""

    @property
    def passes(self) -> bool:
        """No column classified secret is readable, and everything could be verified."""
        return not self.readable and not self.reason


def secrecy_verdict(
    visible: Sequence[tuple[str, str, str]],
    grants: Sequence[GrantLine],
    classifier: SecretClassifier,
    *,
    account: str,
) -> SecrecyVerdict:
    """The verdict from the columns the session can see and the grant lines read.

    ``visible`` are ``(schema, table, column)`` rows of :data:`VISIBLE_COLUMNS_SQL`; more than
    :data:`MAX_VISIBLE_COLUMNS` cannot be verified and fail the verdict.
    """
    if len(visible) > MAX_VISIBLE_COLUMNS:
        return SecrecyVerdict((), reason="too many visible columns to verify")
    readable = tuple(sorted(
        SecretColumn(schema, table, column)
        for schema, table, column in visible
        if classifier.is_secret(table, column)
    ))  # fmt: skip
    if not readable:
        return SecrecyVerdict(())
    fixes = fix_statements(readable, visible, grants, classifier, account=account)
    return SecrecyVerdict(readable, fixes)


# --- where a readable secret column comes from, and the statements that fix it ----------------

_SELECT_GRANT = re.compile(
    r"GRANT (?P<privileges>.+?) ON (?P<object>(?:`(?:[^`]|``)*`|\*)\.(?:`(?:[^`]|``)*`|\*))"
    r" TO (?P<grantee>.+?)(?: IDENTIFIED .*| WITH .*)?$",
    re.S,
)
_QUOTED = re.compile(r"`((?:[^`]|``)*)`")


@dataclass(frozen=True, slots=True)
class _Grant:
    grantee: str
    schema: str | None  # None: *.*
    table: str | None  # None: db.*
    columns: frozenset[str] | None  # None: every column


def _parse_grants(grants: Sequence[GrantLine]) -> list[_Grant]:
    found: list[_Grant] = []
    for line in grants:
        match = _SELECT_GRANT.fullmatch(" ".join(line.text.split()))
        if match is None:
            continue
        schema, table = _object(match.group("object"))
        for privilege in _split_privileges(match.group("privileges")):
            name, _, columns = privilege.partition("(")
            if name.strip().upper() not in {"SELECT", "ALL PRIVILEGES", "ALL"}:
                continue
            listed = frozenset(c.casefold() for c in _column_names(columns)) if columns else None
            found.append(_Grant(match.group("grantee").strip(), schema, table, listed))
    return found


def _column_names(text: str) -> list[str]:
    quoted = [name.replace("``", "`") for name in _QUOTED.findall(text)]
    if quoted:
        return quoted
    return [part.strip(" )") for part in text.split(",") if part.strip(" )")]


def _object(text: str) -> tuple[str | None, str | None]:
    schema_text, table_text = _split_object(text)
    return _unquote(schema_text), _unquote(table_text)


def _split_object(text: str) -> tuple[str, str]:
    if text.startswith("`"):
        end = 1
        while True:
            end = text.index("`", end)
            if text[end : end + 2] == "``":
                end += 2
                continue
            return text[: end + 1], text[end + 2 :]
    return text[:1], text[2:]


def _unquote(text: str) -> str | None:
    if text == "*":
        return None
    return text[1:-1].replace("``", "`")


def _split_privileges(text: str) -> list[str]:
    parts: list[str] = []
    depth, current = 0, list[str]()
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return parts


def _schema_matches(pattern: str, schema: str) -> bool:
    """A database name in a grant is a ``LIKE`` pattern (``\\_`` an escaped underscore)."""
    regex, index = "", 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            regex += re.escape(pattern[index + 1])
            index += 2
            continue
        regex += {"%": ".*", "_": "."}.get(char, re.escape(char))
        index += 1
    return re.fullmatch(regex, schema, flags=re.S | re.I) is not None


def _covers(grant: _Grant, column: SecretColumn) -> bool:
    if grant.schema is not None and not _schema_matches(grant.schema, column.schema):
        return False
    if grant.table is not None and grant.table.casefold() != column.table.casefold():
        return False
    return grant.columns is None or column.column.casefold() in grant.columns


def fix_statements(
    readable: Sequence[SecretColumn],
    visible: Sequence[tuple[str, str, str]],
    grants: Sequence[GrantLine],
    classifier: SecretClassifier,
    *,
    account: str,
) -> tuple[str, ...]:
    """The ``REVOKE`` / ``GRANT SELECT (…)`` statements that leave only non-secret columns.

    A wider grant (``*.*``, ``db.*``, a whole table) is replaced by column-level grants of the
    non-secret columns the account reads today; a column-level grant loses the secret columns.
    """
    parsed = _parse_grants(grants)
    statements: list[str] = []
    for column in readable:
        sources = [grant for grant in parsed if _covers(grant, column)] or [
            _Grant(account, column.schema, column.table, None)
        ]
        for grant in sources:
            statements.extend(_fix(grant, column, visible, classifier))
    unique = list(dict.fromkeys(statements))
    if len(unique) > _MAX_FIX_STATEMENTS:
        rest = len(unique) - _MAX_FIX_STATEMENTS
        return (*unique[:_MAX_FIX_STATEMENTS], f"-- and {rest} more statements")
    return tuple(unique)


def _fix(
    grant: _Grant,
    column: SecretColumn,
    visible: Sequence[tuple[str, str, str]],
    classifier: SecretClassifier,
) -> list[str]:
    target = f"{quote_name(column.schema)}.{quote_name(column.table)}"
    if grant.columns is not None:
        return [f"REVOKE SELECT ({quote_name(column.column)}) ON {target} FROM {grant.grantee};"]
    scope = _scope_text(grant)
    tables = sorted({
        (schema, table) for schema, table, _ in visible
        if (grant.schema is None or _schema_matches(grant.schema, schema))
        and (grant.table is None or grant.table.casefold() == table.casefold())
        and schema == column.schema
    })  # fmt: skip
    statements = [f"REVOKE SELECT ON {scope} FROM {grant.grantee};"]
    for schema, table in tables:
        keep = [
            name for s, t, name in visible
            if s == schema and t == table and not classifier.is_secret(table, name)
        ]  # fmt: skip
        if keep:
            names = ", ".join(quote_name(name) for name in keep)
            statements.append(
                f"GRANT SELECT ({names}) ON {quote_name(schema)}.{quote_name(table)}"
                f" TO {grant.grantee};"
            )
    return statements


def _scope_text(grant: _Grant) -> str:
    if grant.schema is None:
        return "*.*"
    if grant.table is None:
        return f"{quote_name(grant.schema)}.*"
    return f"{quote_name(grant.schema)}.{quote_name(grant.table)}"
