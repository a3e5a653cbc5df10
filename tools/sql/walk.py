"""The guard's walk over a parsed statement: allowlists of nodes, functions, tables and names.

One :class:`TreeChecker` pass raises :class:`~sre_diag.tools.sql.refusal.Refusal` at the first node
that is not on an allowlist (functions, clauses, variables, tables of the DSN's own database, the
system schemas refused), rewrites table and database names to their allowlisted spelling, and
bounds the constructs whose server-side cost the statement does not bound (``LIKE`` wildcards,
nested string builders, recursive CTEs). :func:`check_secret_positions` then refuses ordinals
and ``DISTINCT`` rows that would compare a projected secret column without naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from sre_diag.tools.redact import is_secret_name
from sre_diag.tools.sql.lexer import RENDERED_VOCABULARY
from sre_diag.tools.sql.refusal import Refusal, RefusalReason

__all__ = [
    "MAX_LIKE_WILDCARDS",
    "MAX_TYPE_PARAMETER",
    "NO_SCHEMA_SECRETS",
    "SYSTEM_SCHEMAS",
    "SecretNames",
    "TreeChecker",
    "check_secret_positions",
    "is_secret_column",
]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

# Bounds that keep the checker and the server's evaluation small.
MAX_LIKE_WILDCARDS = 4
MAX_TYPE_PARAMETER = 65535
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


# --- function allowlist ----------------------------------------------------------------------
# Typed sqlglot nodes that render back to pure MySQL computations. Anything not listed here
# (UUID, RAND, USER(), VERSION(), REPEAT, LPAD, compression, crypto, XML, ...) is refused.
_ALLOWED_FUNCTION_NODES: frozenset[type[exp.Func]] = frozenset(
    {
        # logic and conditionals
        exp.And, exp.Or, exp.Xor, exp.Case, exp.If, exp.Coalesce, exp.Nullif,
        exp.Greatest, exp.Least, exp.Exists, exp.Cast,
        # aggregates
        exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.GroupConcat,
        exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance, exp.VariancePop,
        # window functions
        exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile, exp.Lag, exp.Lead,
        exp.FirstValue, exp.LastValue, exp.NthValue, exp.PercentRank, exp.CumeDist,
        # strings
        exp.Concat, exp.ConcatWs, exp.Substring, exp.SubstringIndex, exp.Lower, exp.Upper,
        exp.Left, exp.Right, exp.Trim, exp.Length, exp.StrPosition,
        # numbers
        exp.Abs, exp.Ceil, exp.Floor, exp.Round, exp.Trunc, exp.Sign, exp.Pow,
        exp.Sqrt, exp.Ln, exp.Exp,
        # dates and times
        exp.TimeToStr, exp.StrToDate, exp.TsOrDsToDate, exp.TsOrDsToTimestamp,
        exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.UtcTimestamp,
        exp.DateAdd, exp.DateSub, exp.DateDiff, exp.TimestampDiff, exp.TimestampAdd,
        exp.Extract, exp.Year, exp.Quarter, exp.Month, exp.Week, exp.Day, exp.DayOfWeek,
        exp.DayOfMonth, exp.DayOfYear, exp.Dayname, exp.Hour, exp.Minute, exp.Second,
        exp.LastDay, exp.Time, exp.Timestamp, exp.UnixToTime, exp.ConvertTimezone,
        # JSON reads
        exp.JSONExtract, exp.JSONExtractScalar,
    }
)  # fmt: skip

# Functions sqlglot leaves as ``Anonymous``, by upper-case name; same criterion as above.
_ALLOWED_ANONYMOUS_FUNCTIONS = frozenset(
    {
        "NOW", "CURDATE", "CURTIME", "UTC_TIMESTAMP", "TIMEDIFF", "TIME_TO_SEC", "SEC_TO_TIME",
        "UNIX_TIMESTAMP", "FROM_UNIXTIME", "WEEKDAY", "YEARWEEK", "MICROSECOND", "MONTHNAME",
        "DATE_FORMAT", "JSON_UNQUOTE", "FIELD", "FIND_IN_SET", "IFNULL", "CHAR_LENGTH",
    }
)  # fmt: skip

# --- secret columns ---------------------------------------------------------------------------
# One name detector for the whole project (sre_diag.tools.redact); kept under its old name.
is_secret_column = is_secret_name


@dataclass(frozen=True, slots=True)
class SecretNames:
    """Which column names the guard treats as secret, as the server resolves them.

    MariaDB resolves column names case-insensitively, so a name is judged case-folded as well as
    spelled (``user_pIn`` is ``user_pin``), and against the schema: every column of the
    statement's schema classified secret (by its own spelling, ``userPin``, or by
    ``DIAG_MYSQL_SECRET_COLUMNS``) makes its case-folded name secret wherever it is referenced.
    """

    schema: frozenset[str] = frozenset()

    def __call__(self, name: str) -> bool:
        folded = name.casefold()
        return folded in self.schema or is_secret_name(name) or is_secret_name(folded)


NO_SCHEMA_SECRETS = SecretNames()


_QUERY_NODES = (exp.Select, exp.SetOperation, exp.Subquery)
# Node kinds refused wherever they appear in the tree.
_NODE_REFUSALS: tuple[tuple[tuple[type[exp.Expr], ...], RefusalReason], ...] = (
    ((exp.DDL, exp.DML, exp.Command), RefusalReason.NOT_SELECT),
    (
        (exp.Parameter, exp.SessionParameter, exp.Placeholder, exp.PropertyEQ),
        RefusalReason.VARIABLE,
    ),
    ((exp.Into,), RefusalReason.INTO_CLAUSE),
    ((exp.Lock,), RefusalReason.LOCKING_READ),
    ((exp.Hint,), RefusalReason.COMMENT_HINT),
    ((exp.Dot,), RefusalReason.UNSUPPORTED_SYNTAX),
    # Literals the conservative lexer would have to understand in other encodings.
    (
        tuple(
            getattr(exp, name)
            for name in ("Introducer", "HexString", "BitString", "ByteString", "National",
                         "RawString", "UnicodeString")
            if hasattr(exp, name)
        ),
        RefusalReason.UNSUPPORTED_SYNTAX,
    ),
    # Pattern matches whose cost is not bounded by their input (or that MySQL does not have).
    (
        tuple(
            getattr(exp, name)
            for name in ("ILike", "SimilarTo", "Glob", "RegexpLike", "RegexpILike")
            if hasattr(exp, name)
        ),
        RefusalReason.EXPENSIVE_PATTERN,
    ),
)  # fmt: skip


class TreeChecker:
    """One walk over the parsed tree; raises :class:`Refusal` at the first violation."""

    def __init__(
        self,
        *,
        database: str,
        allowed_tables: frozenset[str],
        secret: SecretNames = NO_SCHEMA_SECRETS,
    ) -> None:
        self._database = database
        self._secret = secret
        self._allowed = allowed_tables
        self._root: exp.Expr | None = None
        if database.casefold() in SYSTEM_SCHEMAS:
            raise Refusal(RefusalReason.SYSTEM_SCHEMA, "configured database is a system schema")

    def check(self, tree: exp.Query) -> None:
        """Check every node; tables are resolved (and rewritten) last, after the structure."""
        self._root = tree
        for node in list(tree.walk()):
            self._check_node(node)
        for table in list(tree.find_all(exp.Table)):
            self._check_table(table)

    def _check_node(self, node: exp.Expr) -> None:
        for kinds, reason in _NODE_REFUSALS:
            if isinstance(node, kinds):
                raise Refusal(reason, type(node).__name__)
        if isinstance(node, exp.Query) and not isinstance(node, _QUERY_NODES):
            raise Refusal(RefusalReason.NOT_SELECT, type(node).__name__)
        if isinstance(node, exp.CTE) and not isinstance(node.this, _QUERY_NODES):
            raise Refusal(RefusalReason.NOT_SELECT, "CTE body")
        if isinstance(node, exp.Select) and not node.expressions:
            raise Refusal(RefusalReason.PARSE_ERROR, "SELECT without a select list")
        if isinstance(node, exp.Select) and node.args.get("operation_modifiers"):
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "SELECT modifier")
        if isinstance(node, exp.Func):
            _check_function(node)
        _check_expensive(node)
        _check_raw_rendered(node)
        if _is_star_projection(node) and _projecting_select(node) is not self._root:
            raise Refusal(RefusalReason.STAR_NOT_TOP_LEVEL, "* outside the outermost SELECT")
        self._check_names(node)

    def _check_names(self, node: exp.Expr) -> None:
        if isinstance(node, exp.Column):
            self._check_column(node)
        elif isinstance(node, exp.Join):
            self._check_join(node)

    def _check_join(self, join: exp.Join) -> None:
        """``NATURAL`` compares every same-named column unseen; ``USING`` names them bare."""
        if join.args.get("method") or join.args.get("natural"):
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "NATURAL join")
        for name in join.args.get("using") or []:
            if self._secret(name.name if isinstance(name, exp.Expr) else str(name)):
                raise Refusal(RefusalReason.SECRET_COLUMN, "JOIN USING a secret column")

    def _check_column(self, column: exp.Column) -> None:
        if column.args.get("catalog") is not None:
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "four-part column")
        db = column.args.get("db")
        if isinstance(db, exp.Identifier):
            self._check_database(db)
        if self._secret(column.name) and not _bare_secret_projection(
            column, self._root, self._secret
        ):
            raise Refusal(RefusalReason.SECRET_COLUMN, column.name)

    def _check_database(self, db: exp.Identifier) -> None:
        """A qualifier must name the DSN's database; it is rewritten to its exact spelling."""
        name = db.name
        if name.casefold() in SYSTEM_SCHEMAS:
            raise Refusal(RefusalReason.SYSTEM_SCHEMA, name)
        if name.casefold() != self._database.casefold():
            raise Refusal(RefusalReason.OTHER_DATABASE, name)
        db.set("this", self._database)

    def _check_table(self, table: exp.Table) -> None:
        if not isinstance(table.this, exp.Identifier):
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "table function")
        if table.args.get("catalog") is not None:
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "three-part table name")
        db = table.args.get("db")
        if isinstance(db, exp.Identifier):
            self._check_database(db)
        elif table.name in _visible_cte_names(table):
            return
        elif _is_lone_dual(table):
            table.parent.pop()  # type: ignore[union-attr]  # _is_lone_dual checked the parent
            return
        table.this.set("this", self._resolve_table(table.name))

    def _resolve_table(self, name: str) -> str:
        """The allowlisted spelling of ``name``: exact, else the single case-insensitive match."""
        if name in self._allowed:
            return name
        matches = [allowed for allowed in self._allowed if allowed.casefold() == name.casefold()]
        if len(matches) == 1:
            return matches[0]
        raise Refusal(RefusalReason.TABLE_NOT_ALLOWED, name)


def check_secret_positions(tree: exp.Query, secret: SecretNames = NO_SCHEMA_SECRETS) -> None:
    """Where a projected secret could still be compared or sorted without being named.

    ``ORDER BY 2`` / ``GROUP BY 2`` pointing at a secret projection sort or group by it;
    ``SELECT DISTINCT`` over a row holding one compares it (its row count is an equality
    oracle). Both are refused; a ``*`` not yet expanded (no schema) leaves ordinals unknown.
    """
    for select in tree.find_all(exp.Select):
        projections = select.expressions
        marks = [_is_secret_projection(p, secret) for p in projections]
        if any(marks) and select.args.get("distinct"):
            raise Refusal(RefusalReason.SECRET_COLUMN, "DISTINCT over a secret column")
        for clause in ("order", "group"):
            holder = select.args.get(clause)
            if isinstance(holder, exp.Expr):
                _check_ordinals(holder, projections, marks)
    for operation in tree.find_all(exp.SetOperation):
        order = operation.args.get("order")
        if isinstance(order, exp.Order):
            left: exp.Expr = operation
            while isinstance(left, exp.SetOperation):
                left = left.this
            if isinstance(left, exp.Select):
                projections = left.expressions
                marks = [_is_secret_projection(p, secret) for p in projections]
                _check_ordinals(order, projections, marks)


def _is_secret_projection(node: exp.Expr, secret: SecretNames) -> bool:
    inner = node.this if isinstance(node, exp.Alias) else node
    if isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star):
        return False
    return isinstance(inner, exp.Column) and secret(inner.name)


def _check_ordinals(holder: exp.Expr, projections: list[exp.Expr], secret: list[bool]) -> None:
    has_star = any(_is_star_projection(p) or isinstance(p, exp.Star) for p in projections)
    for key in holder.expressions:
        value = key.this if isinstance(key, exp.Ordered) else key
        if not (isinstance(value, exp.Literal) and not value.is_string):
            continue
        if has_star:
            continue  # expanded (and re-checked) when the schema is known
        text = str(value.this)
        position = int(text) if text.isdigit() else 0
        if 1 <= position <= len(secret) and secret[position - 1]:
            raise Refusal(RefusalReason.SECRET_COLUMN, "ordinal of a secret column")


def _check_function(node: exp.Func) -> None:
    if isinstance(node, exp.Anonymous):
        name = node.name.upper()
        if name not in _ALLOWED_ANONYMOUS_FUNCTIONS:
            raise Refusal(RefusalReason.FORBIDDEN_FUNCTION, name)
        # A quoted name (`now`()) resolves to a stored function of that name on the server:
        # the built-in is always rendered as a bare upper-case word.
        node.set("this", name)
        return
    if type(node) not in _ALLOWED_FUNCTION_NODES:
        raise Refusal(RefusalReason.FORBIDDEN_FUNCTION, type(node).__name__)


def _check_raw_rendered(node: exp.Expr) -> None:
    """Nodes sqlglot pastes into its output verbatim may only hold known words and numbers.

    Units (``INTERVAL 1 DAY``, ``TIMESTAMPDIFF(SECOND, …)``, ``EXTRACT(YEAR FROM …)``),
    charsets (``CAST(x AS CHAR CHARACTER SET utf8mb4)``) and type parameters
    (``DECIMAL(10, 2)``) are rendered without quotes, so a back-quoted name there would be
    pasted into the text as SQL.
    """
    if isinstance(node, exp.Var):
        if not isinstance(node.this, str) or node.this.upper() not in RENDERED_VOCABULARY:
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "raw-rendered word")
    elif isinstance(node, exp.DataTypeParam):
        value = node.this
        if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "type parameter")
        if int(value.this) > MAX_TYPE_PARAMETER:
            raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "type parameter too large")
    elif isinstance(node, exp.Literal) and not node.is_string:
        if not isinstance(node.this, str) or not _NUMBER.fullmatch(node.this):
            raise Refusal(RefusalReason.LEXICAL, "numeric literal")


def _check_expensive(node: exp.Expr) -> None:
    """Constructs whose server-side work is not bounded by the statement: refused."""
    if isinstance(node, exp.With) and node.args.get("recursive"):
        raise Refusal(RefusalReason.UNSUPPORTED_SYNTAX, "recursive CTE")
    if isinstance(node, exp.Like):
        _check_like(node)
    if isinstance(node, _STRING_BUILDERS):
        _check_string_builder(node)


# Functions whose output can be larger than any one input. Sizes stay linear only while no
# builder feeds another: nested, or through a CTE / derived table column (each level could
# multiply the size with constant text). REPLACE, REPEAT, LPAD, RPAD, INSERT and SPACE are not
# on the function allowlist at all (their output is not bounded by their input).
_STRING_BUILDERS = (exp.Concat, exp.ConcatWs, exp.GroupConcat)


def _check_string_builder(node: exp.Expr) -> None:
    if isinstance(node, exp.GroupConcat) and node.args.get("separator") is None:
        # The generator writes the default separator as a literal; make it part of the tree so
        # the rendering holds exactly the tree's string literals.
        node.set("separator", exp.Literal.string(","))
    if node.find_ancestor(*_STRING_BUILDERS) is not None:
        raise Refusal(RefusalReason.EXPENSIVE_PATTERN, "string builder nested in another")
    if node.find_ancestor(exp.CTE) is not None or _in_derived_table(node):
        raise Refusal(RefusalReason.EXPENSIVE_PATTERN, "string builder in a CTE or derived table")


def _in_derived_table(node: exp.Expr) -> bool:
    """True when ``node`` sits in a subquery used as a table (``FROM (…) AS d`` / joins)."""
    subquery = node.find_ancestor(exp.Subquery)
    while subquery is not None:
        if isinstance(subquery.parent, exp.From | exp.Join):
            return True
        subquery = subquery.find_ancestor(exp.Subquery)
    return False


def _check_like(node: exp.Like) -> None:
    """``LIKE`` patterns are literals with few ``%``: MariaDB's wildcard matcher backtracks.

    Each ``%`` multiplies the work per row inside one function evaluation, which the server's
    time cap cannot interrupt; a computed pattern could carry any number of them.
    """
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise Refusal(RefusalReason.EXPENSIVE_PATTERN, "LIKE pattern must be a literal")
    if pattern.this.count("%") > MAX_LIKE_WILDCARDS:
        raise Refusal(RefusalReason.EXPENSIVE_PATTERN, "too many % in a LIKE pattern")
    escape = node.args.get("escape")
    if escape is not None and not (isinstance(escape, exp.Literal) and escape.is_string):
        raise Refusal(RefusalReason.EXPENSIVE_PATTERN, "LIKE escape must be a literal")


def _is_star_projection(node: exp.Expr) -> bool:
    """``*`` or ``t.*`` in a select list (not ``COUNT(*)``)."""
    is_star = isinstance(node, exp.Star) or (
        isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
    )
    if not is_star:
        return False
    holder = node.parent if isinstance(node.parent, exp.Column) else node
    return isinstance(holder.parent, exp.Select) and holder.arg_key == "expressions"


def _projecting_select(node: exp.Expr) -> exp.Expr | None:
    """The SELECT whose select list holds ``node`` (a star projection)."""
    holder = node.parent if isinstance(node.parent, exp.Column) else node
    return holder.parent


def _bare_secret_projection(
    column: exp.Column, root: exp.Expr | None, secret: SecretNames
) -> bool:
    """True for ``SELECT api_key`` / ``SELECT t.api_key AS api_key2`` in the OUTERMOST SELECT.

    Anywhere else (a scalar subquery, a CTE, a derived table, a ``UNION`` branch) the value
    could leave the statement under a name the adapter's masking does not recognise.
    """
    holder: exp.Expr = column
    parent = column.parent
    if isinstance(parent, exp.Alias):
        if not secret(parent.alias):
            return False
        holder, parent = parent, parent.parent
    if not isinstance(parent, exp.Select) or holder.arg_key != "expressions":
        return False
    return parent is root


def _is_lone_dual(table: exp.Table) -> bool:
    """``FROM DUAL`` alone (no joins): dropped, since back-quoted `DUAL` would be a table."""
    if table.name.upper() != "DUAL" or table.args.get("alias") is not None:
        return False
    source = table.parent
    return (
        isinstance(source, exp.From)
        and isinstance(source.parent, exp.Select)
        and not source.parent.args.get("joins")
    )


def _visible_cte_names(table: exp.Table) -> frozenset[str]:
    """CTE names in scope at ``table``, as the server resolves them.

    In the main body every CTE of an enclosing ``WITH`` is visible; inside the i-th CTE only the
    earlier ones (and itself under ``RECURSIVE``). Names match exactly, so any doubt falls back to
    treating the reference as a base table, which is then checked against the allowlist.
    """
    names: set[str] = set()
    child: exp.Expr = table
    parent = table.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            names.update(_ctes_visible_from(parent, child))
        elif isinstance(parent, exp.Query):
            with_ = parent.args.get("with_")
            if isinstance(with_, exp.With) and with_ is not child:
                names.update(cte.alias for cte in with_.expressions)
        child, parent = parent, parent.parent
    return frozenset(names)


def _ctes_visible_from(with_: exp.With, child: exp.Expr) -> list[str]:
    """Names visible from inside ``child``, one of ``with_``'s CTEs."""
    ctes: list[exp.CTE] = list(with_.expressions)
    position = next((i for i, cte in enumerate(ctes) if cte is child), len(ctes))
    visible = [cte.alias for cte in ctes[:position]]
    if with_.args.get("recursive") and position < len(ctes):
        visible.append(ctes[position].alias)
    return visible
