"""The typed pass of the SQL guard: what each expression can carry, and how much, before it runs.

The server checks for a kill between rows, not inside one expression, and redaction only sees
the cells that come back. So the guard gives every expression of the checked tree a
:class:`Shape` computed from the schema (column types and lengths, read by the adapter from
``information_schema.COLUMNS``) and from literals:

- ``tainted``: the value is (a whole or a part of) a free-text column, which may hold a token, a
  DSN or a ``password=`` pair. Such a value may reach the output only WHOLE (bare, through
  ``COALESCE``/``IF``/``CASE``/``MIN``/``MAX``, or concatenated with whitespace or ``, ; |``
  around it), so that redaction still sees the context its patterns need. Every function that
  cuts, searches, re-cases or decodes text (``SUBSTRING``, ``SUBSTRING_INDEX``, ``LEFT``,
  ``RIGHT``, ``TRIM(… FROM …)``, ``LOWER``, ``UPPER``, ``LOCATE``/``INSTR``/``POSITION``,
  ``JSON_EXTRACT``, ``->>``, ``JSON_UNQUOTE``, ``CAST(… AS CHAR(n))``, ``STR_TO_DATE`` with its
  format) is refused over a tainted
  value (:data:`TEXT_EXTRACTION`); those not on the guard's allowlist at all (``MID``, ``HEX``,
  ``TO_BASE64``, ``CONV``, ``REVERSE``, ``REPLACE``, ``LPAD`` …) never get here.
- ``size``: an upper bound on the value's bytes. A statement is refused
  (:data:`TOO_LARGE`) when an output row, a string function's argument, a ``DISTINCT`` /
  ``GROUP BY`` key or a ``CAST`` to a fixed-width type can exceed a fixed limit, or when string
  matching (``LIKE``, ``LOCATE``, ``SUBSTRING_INDEX``, ``FIND_IN_SET``) can cost more than
  subject × needle allows. The refusal names the class, never the limit.

The columns' shapes (:class:`ColumnShape`, :func:`column_shape`, the :data:`Schema`) live in
:mod:`sre_diag.tools.sql.columns`, which needs no sqlglot: the adapter reads them with the privilege
verdict, before any statement is checked. They are re-exported here.

The outermost ``*`` / ``t.*`` is expanded into the schema's columns beforehand
(:mod:`sre_diag.tools.sql.stars`), so the adapter masks by the position of each checked projection
and never by the label the server returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

from sre_diag.tools.errors import BoundViolation, RefusalReason
from sre_diag.tools.sql.columns import (
    CAP_BYTES,
    CAP_CHARS,
    NUMBER_BYTES,
    TEMPORAL_BYTES,
    ColumnShape,
    Schema,
    ValueKind,
    column_shape,
)

__all__ = [
    "CAP_BYTES",
    "CAP_CHARS",
    "TEXT_EXTRACTION",
    "TOO_LARGE",
    "UNEXPANDABLE",
    "BoundViolation",
    "ColumnShape",
    "Schema",
    "Shape",
    "ValueKind",
    "check_shapes",
    "column_shape",
]

# Fixed limits (never shown to the model: the refusal names the class only).
MAX_ROW_BYTES = 64 * 1024
MAX_STRING_ARG_BYTES = 8 * 1024
MAX_KEY_BYTES = 8 * 1024
MAX_MATCH_WORK = 2 * 1024 * 1024
MAX_CAST_LENGTH = 1024
_GROUP_CONCAT_MAX_BYTES = 4096
_NUMBER_BYTES = NUMBER_BYTES
_TEMPORAL_BYTES = TEMPORAL_BYTES
# Characters that never occur inside a token redaction recognises: gluing them to column text
# keeps the token's boundaries.
_SAFE_NEIGHBOURS = frozenset(" \t\n,;|@#()[]{}<>!?")

TEXT_EXTRACTION = RefusalReason.TEXT_EXTRACTION
TOO_LARGE = RefusalReason.EXPRESSION_TOO_LARGE
UNEXPANDABLE = RefusalReason.UNSUPPORTED_SYNTAX
EXPENSIVE = RefusalReason.EXPENSIVE_PATTERN
COMPLEX = RefusalReason.TOO_COMPLEX
# Predicates over free text: how many LIKE a statement may hold, and how much each must name.
MAX_TEXT_LIKES = 2
MIN_LIKE_LITERALS = 3
_UNBOUNDED = 2**32


@dataclass(frozen=True, slots=True)
class Shape:
    """What an expression can carry: text from a column (``tainted``) and at most ``size`` B;
    ``mixed``: column text that may also be another value (a literal of the statement), which
    must never be compared with it (MIN/MAX, ORDER BY, GROUP BY, DISTINCT)."""

    tainted: bool
    size: int
    mixed: bool = False


_NUMBER = Shape(False, _NUMBER_BYTES)
_TEMPORAL = Shape(False, _TEMPORAL_BYTES)
UNKNOWN = Shape(True, _UNBOUNDED)
"""A type or a function the pass cannot classify: column text of any size."""
_UNRESOLVED = Shape(True, CAP_BYTES)

# --- function classes ----------------------------------------------------------------------------
# Every function the guard allows belongs to exactly one class; a new one defaults to EXTRACT
# (refused over text), so forgetting to classify it fails closed.
_WHOLE = (
    exp.Coalesce, exp.If, exp.Case, exp.Nullif, exp.Min, exp.Max,
    exp.FirstValue, exp.LastValue, exp.NthValue, exp.Lag, exp.Lead,
)  # fmt: skip
# Their output compares column text with the statement's own values: an ordering oracle.
_ORDERING_FUNCS = (exp.Greatest, exp.Least)
# Their output says how many or how long, never what: they take column text.
_COUNTING = (
    exp.Count, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile, exp.PercentRank,
    exp.CumeDist, exp.Length, exp.Exists, exp.And, exp.Or, exp.Xor,
)  # fmt: skip
# Numbers computed from their argument: over text they parse its digits (``SUM('4921x')``).
_NUMERIC = (
    exp.Sum, exp.Avg, exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance,
    exp.VariancePop, exp.Abs, exp.Ceil, exp.Floor, exp.Round, exp.Trunc, exp.Sign,
    exp.Pow, exp.Sqrt, exp.Ln, exp.Exp,
)  # fmt: skip
_ARITHMETIC = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.BitwiseAnd, exp.BitwiseOr,
    exp.BitwiseXor, exp.BitwiseLeftShift, exp.BitwiseRightShift, exp.Neg, exp.BitwiseNot,
)  # fmt: skip
_ORDERING = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
# The largest output of one DATE_FORMAT directive (``%W`` Wednesday, ``%M`` September).
_DIRECTIVE_BYTES = 10
_TEMPORAL_FUNCS = (
    exp.TsOrDsToDate, exp.TsOrDsToTimestamp, exp.CurrentTimestamp,
    exp.CurrentDate, exp.CurrentTime, exp.UtcTimestamp, exp.DateAdd, exp.DateSub, exp.DateDiff,
    exp.TimestampDiff, exp.TimestampAdd, exp.Extract, exp.Year, exp.Quarter, exp.Month,
    exp.Week, exp.Day, exp.DayOfWeek, exp.DayOfMonth, exp.DayOfYear, exp.Dayname, exp.Hour,
    exp.Minute, exp.Second, exp.LastDay, exp.Time, exp.Timestamp, exp.UnixToTime,
    exp.ConvertTimezone,
)  # fmt: skip
# STR_TO_DATE is here: its format can match literal context and read the digits after it
# (``STR_TO_DATE(note, 'pin: %Y')`` returns a PIN as a year).
_EXTRACT = (
    exp.Substring, exp.SubstringIndex, exp.Left, exp.Right, exp.Lower, exp.Upper,
    exp.StrPosition, exp.JSONExtract, exp.JSONExtractScalar, exp.StrToDate,
)  # fmt: skip
_ANONYMOUS_WHOLE = frozenset({"IFNULL"})
_ANONYMOUS_NUMERIC = frozenset({"CHAR_LENGTH", "FIELD", "FIND_IN_SET"})
_ANONYMOUS_FORMATS = frozenset({"DATE_FORMAT"})
_ANONYMOUS_EXTRACT = frozenset({"JSON_UNQUOTE"})
_ANONYMOUS_TEMPORAL = frozenset({
    "NOW", "CURDATE", "CURTIME", "UTC_TIMESTAMP", "TIMEDIFF", "TIME_TO_SEC", "SEC_TO_TIME",
    "UNIX_TIMESTAMP", "FROM_UNIXTIME", "WEEKDAY", "YEARWEEK", "MICROSECOND", "MONTHNAME",
})  # fmt: skip
# Functions whose cost grows with subject × needle: (subject argument, needle argument).
_MATCHERS: dict[type[exp.Expr], tuple[str, str]] = {
    exp.StrPosition: ("this", "substr"),
    exp.SubstringIndex: ("this", "delimiter"),
}
_BUILDERS = (exp.Concat, exp.ConcatWs, exp.GroupConcat)
_CHAR_TYPES = frozenset({"CHAR", "VARCHAR", "NCHAR", "NVARCHAR", "TEXT"})
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "BLOB"})
_NUMBER_TYPES = frozenset({
    "INT", "UINT", "BIGINT", "UBIGINT", "SMALLINT", "TINYINT", "MEDIUMINT", "DECIMAL", "NUMERIC",
    "DOUBLE", "FLOAT", "BOOLEAN", "BIT",
})  # fmt: skip


# --- guard caps ----------------------------------------------------------------------------------


def _is_guard_cap(node: exp.Expr) -> bool:
    """``LEFT(<bare column>, CAP_CHARS)`` as an outermost aliased projection."""
    alias, select = node.parent, node.parent.parent if node.parent is not None else None
    return (
        isinstance(node, exp.Left)
        and isinstance(node.this, exp.Column)
        and isinstance(node.expression, exp.Literal)
        and str(node.expression.this) == str(CAP_CHARS)
        and isinstance(alias, exp.Alias)
        and isinstance(select, exp.Select)
        and select.parent is None
    )


def _source_name(source: exp.Expr) -> str:
    return source.alias_or_name.casefold() if isinstance(source, exp.Expr) else ""


# --- shapes --------------------------------------------------------------------------------------


class _Shapes:
    """Shape of every expression of one statement, memoised; raises :class:`BoundViolation`.

    Names resolve case-folded over the whole statement: a name's shape is the join of every
    column, output and column alias of that name (over-approximates scoping, never under).
    The caller recomputes until the names stop changing, so a CTE read before the one it
    reads is shaped again (:func:`check_shapes`).
    """

    def __init__(self, root: exp.Query, schema: Schema) -> None:
        self._memo: dict[int, Shape] = {}
        self._names: dict[str, Shape] = {}
        self.text_likes = 0
        tables = {table.name for table in root.find_all(exp.Table)}
        for table in sorted(tables & set(schema)):
            for column in schema[table]:
                tainted = column.kind is ValueKind.TEXT
                self._merge(column.name, Shape(tainted, column.max_bytes))

    def names(self) -> dict[str, Shape]:
        """The names resolved so far (a copy)."""
        return dict(self._names)

    def restart(self) -> None:
        """Forget the computed shapes (the names stay): the next pass uses what was learnt."""
        self._memo.clear()
        self.text_likes = 0

    def _merge(self, name: str, shape: Shape) -> None:
        key = name.casefold()
        old = self._names.get(key)
        if old is not None:
            shape = _join(old, shape)
        self._names[key] = shape

    def register_outputs(self, select: exp.Select) -> None:
        """Make a SELECT's output names resolvable (CTE, derived table and alias references);
        an unaliased computed output is named by its text, as the server names it."""
        for projection in select.expressions:
            name = projection.alias_or_name or projection.sql(dialect="mysql")
            self._merge(name, self.of(projection))

    def register_column_aliases(self, alias: exp.TableAlias) -> None:
        """``WITH c(x, y) AS (…)`` / ``(…) AS d(x, y)``: each name gets its position's shape."""
        holder = alias.parent
        query = holder.this if isinstance(holder, exp.CTE | exp.Subquery) else None
        names = [column.name for column in alias.columns]
        shapes = self._positions(query, len(names))
        for name, shape in zip(names, shapes, strict=True):
            self._merge(name, shape)

    def register_set_outputs(self, operation: exp.SetOperation) -> None:
        """A set operation's outputs carry the first branch's names and every branch's values
        (column text beside a literal row is ``mixed``)."""
        first: exp.Expr = operation
        while isinstance(first, exp.SetOperation):
            first = first.this
        if not isinstance(first, exp.Select):
            return
        names = [p.alias_or_name for p in first.expressions]
        widths = {len(b.expressions) if isinstance(b, exp.Select) else -1
                  for b in _branches(operation)}  # fmt: skip
        if widths != {len(names)}:
            return  # branches of different widths: the server refuses the statement
        for name, shape in zip(names, self._positions(operation, len(names)), strict=True):
            if name:
                self._merge(name, shape)

    def _positions(self, query: exp.Expr | None, count: int) -> list[Shape]:
        if isinstance(query, exp.Select) and len(query.expressions) == count:
            return [self.of(projection) for projection in query.expressions]
        if isinstance(query, exp.SetOperation):
            left = self._positions(query.this, count)
            right = self._positions(query.expression, count)
            return [_union(a, b) for a, b in zip(left, right, strict=True)]
        return [UNKNOWN] * count

    def of(self, node: exp.Expr) -> Shape:
        key = id(node)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._compute(node)
            self._memo[key] = cached
        return cached

    def _compute(self, node: exp.Expr) -> Shape:
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                return _NUMBER
            # Unresolved: a typo the server refuses, or an unnamed output of a derived table
            # (only a bare column is capped at CAP_BYTES; computed outputs are all named).
            return self._names.get(node.name.casefold(), _UNRESOLVED)
        if isinstance(node, exp.Literal):
            return Shape(False, len(str(node.this).encode()) + 2)
        if isinstance(node, exp.Alias | exp.Paren | exp.Ordered | exp.Window):
            return self.of(node.this)
        if isinstance(node, exp.Subquery | exp.Select | exp.SetOperation):
            return self._query(node.this if isinstance(node, exp.Subquery) else node)
        return self._computed(node)

    def _computed(self, node: exp.Expr) -> Shape:
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, _BUILDERS):
            return self._builder(node)
        if isinstance(node, exp.Func):
            return self._function(node)
        if isinstance(node, exp.Like):
            return self._like(node)
        if isinstance(node, exp.Distinct):
            shapes = [self.of(e) for e in node.expressions]
            _bounded_key(sum(shape.size for shape in shapes), "DISTINCT key")
            return _NUMBER
        if isinstance(node, (*_ARITHMETIC, *_ORDERING)):
            if any(self.of(child).tainted for child in node.iter_expressions()):
                raise BoundViolation(TEXT_EXTRACTION, f"{type(node).__name__} over column text")
        return _NUMBER  # predicates, NULL, booleans, intervals: numbers or dates

    def _query(self, query: exp.Expr) -> Shape:
        if isinstance(query, exp.SetOperation):
            return _union(self._query(query.this), self._query(query.expression))
        if isinstance(query, exp.Select) and query.expressions:
            return self.of(query.expressions[0])
        return _NUMBER

    def _args(self, node: exp.Expr) -> list[Shape]:
        return [self.of(child) for child in node.iter_expressions()]

    def _function(self, node: exp.Func) -> Shape:
        if _is_guard_cap(node):
            column = self.of(node.this)
            return Shape(column.tainted, min(column.size, CAP_BYTES))
        if isinstance(node, exp.TimeToStr | exp.UnixToTime):
            return self._formatted(node, node.args.get("format"))
        args = self._args(node)
        if isinstance(node, exp.Trim) and node.args.get("expression") is None:
            return _whole(args)
        if isinstance(node, exp.Anonymous):
            return self._anonymous(node, node.name.upper(), args)
        if isinstance(node, exp.Min | exp.Max):
            _compared(args, type(node).__name__)
        if isinstance(node, _WHOLE):
            return _whole(args)
        if isinstance(node, _COUNTING):
            return _NUMBER
        if isinstance(node, (*_ORDERING_FUNCS, *_NUMERIC, *_TEMPORAL_FUNCS)):
            _untainted(args, type(node).__name__)
            return _TEMPORAL if isinstance(node, _TEMPORAL_FUNCS) else _NUMBER
        # EXTRACT class (and anything unclassified): never over text from a column.
        _untainted(args, type(node).__name__)
        _bounded_args(args)
        self._matching_work(node)
        if not isinstance(node, _EXTRACT):
            return UNKNOWN
        return Shape(False, max((arg.size for arg in args), default=_NUMBER_BYTES))

    def _formatted(self, node: exp.Func, format_: exp.Expr | None) -> Shape:
        """A format-taking function: its value must not be column text, its format must be a
        literal, and its output is sized by that format."""
        _untainted([self.of(node.this)], type(node).__name__)
        if format_ is None:
            return _TEMPORAL
        return Shape(False, _format_size(format_))

    def _anonymous(self, node: exp.Anonymous, name: str, args: list[Shape]) -> Shape:
        if name in _ANONYMOUS_WHOLE:
            return _whole(args)
        if name in _ANONYMOUS_NUMERIC:
            if name == "FIND_IN_SET" and len(args) == 2:
                _untainted(args[1:], name)  # an item of the text, found by position
                _bounded_work(args[1].size * args[0].size, "FIND_IN_SET")
            return _NUMBER
        if name in _ANONYMOUS_FORMATS and len(node.expressions) == 2:
            _untainted(args[:1], name)
            return Shape(False, _format_size(node.expressions[1]))
        if name in _ANONYMOUS_TEMPORAL:
            _untainted(args, name)
            if name == "FROM_UNIXTIME" and len(node.expressions) == 2:
                return Shape(False, _format_size(node.expressions[1]))
            return _TEMPORAL
        _untainted(args, name)
        if name in _ANONYMOUS_EXTRACT:
            _bounded_args(args)
            return Shape(False, max((arg.size for arg in args), default=_NUMBER_BYTES))
        return UNKNOWN

    def _matching_work(self, node: exp.Func) -> None:
        roles = _MATCHERS.get(type(node))
        if roles is None:
            return
        subject, needle = (node.args.get(role) for role in roles)
        if isinstance(subject, exp.Expr) and isinstance(needle, exp.Expr):
            _bounded_work(self.of(subject).size * self.of(needle).size, type(node).__name__)

    def _like(self, node: exp.Like) -> Shape:
        subject_node = node.this
        if isinstance(subject_node, exp.Lower | exp.Upper):
            # Re-casing a whole value for a match shows nothing: the subject is the column.
            self._memo[id(subject_node)] = _whole([self.of(subject_node.this)])
        subject, pattern = self.of(subject_node), self.of(node.expression)
        if subject.tainted:
            self._text_like(node)
        # A leading % is one scan; each further % can restart the match from every position.
        wildcards = max(1, str(node.expression.this).count("%") - 1)
        _bounded_work(subject.size * pattern.size * wildcards, "LIKE")
        return _NUMBER

    def _text_like(self, node: exp.Like) -> None:
        """A LIKE over column text is a predicate oracle: bounded per statement, literal-heavy,
        and ``_`` is a literal underscore there (rewritten as ``\\_``)."""
        self.text_likes += 1
        if self.text_likes > MAX_TEXT_LIKES:
            raise BoundViolation(EXPENSIVE, "too many LIKE over column text")
        if isinstance(node.parent, exp.Escape):
            raise BoundViolation(EXPENSIVE, "LIKE ESCAPE over column text")
        pattern = node.expression
        text = str(pattern.this)
        literals = len(text.replace("\\\\", "x").replace("\\", "").replace("%", ""))
        if literals < MIN_LIKE_LITERALS:
            raise BoundViolation(EXPENSIVE, "LIKE over column text names too little")
        pattern.set("this", _literal_underscores(text))

    def _cast(self, node: exp.Cast) -> Shape:
        inner = self.of(node.this)
        to = node.to
        type_name = to.this.value if isinstance(to, exp.DataType) else ""
        params = [p for p in to.expressions] if isinstance(to, exp.DataType) else []
        length = _first_int(params)
        if type_name in _CHAR_TYPES | _BINARY_TYPES | {"CHARACTER_SET"}:
            if length is None:
                _bounded_arg(inner.size)
                return inner
            if length > MAX_CAST_LENGTH:
                raise BoundViolation(TOO_LARGE, "CAST to a large fixed type")
            if inner.tainted:
                raise BoundViolation(TEXT_EXTRACTION, "CAST to a shorter text")
            return Shape(False, length * 4)
        if type_name == "JSON":
            return inner
        _untainted([inner], f"CAST to {type_name or 'an unknown type'}")
        if type_name in {"DECIMAL", "NUMERIC"} and length is not None:
            return Shape(False, length + 2)
        if type_name in {"DATE", "DATETIME", "TIME", "TIMESTAMP"}:
            return _TEMPORAL
        return _NUMBER if type_name in _NUMBER_TYPES else UNKNOWN

    def _builder(self, node: exp.Expr) -> Shape:
        if isinstance(node, exp.GroupConcat):
            order = node.this if isinstance(node.this, exp.Order) else None
            if order is not None:  # the values' order would compare text with a literal row
                _compared([self.of(key) for key in order.expressions], "GROUP_CONCAT ORDER BY")
            inner = _concatenated(self._builder_parts(node.this, node.args.get("separator")))
            return Shape(inner.tainted, min(inner.size, _GROUP_CONCAT_MAX_BYTES))
        if isinstance(node, exp.ConcatWs):
            separator, *values = node.expressions
            pieces = self._builder_parts_ws(separator, values)
        else:
            pieces = list(node.expressions)
        return _concatenated([(piece, self.of(piece)) for piece in pieces])

    def _builder_parts(
        self, this: exp.Expr, separator: exp.Expr | None
    ) -> list[tuple[exp.Expr, Shape]]:
        if isinstance(this, exp.Order):
            this = this.this
        values = list(this.expressions) if isinstance(this, exp.Concat) else [this]
        if isinstance(this, exp.Concat):
            self._memo[id(this)] = _concatenated([(v, self.of(v)) for v in values])
        shapes = [(value, self.of(value)) for value in values]
        if separator is not None and any(shape.tainted for _, shape in shapes):
            _require_safe_separator(separator)
        return [*shapes, *(((separator, self.of(separator)),) if separator is not None else ())]

    def _builder_parts_ws(self, separator: exp.Expr, values: list[exp.Expr]) -> list[exp.Expr]:
        if any(self.of(value).tainted for value in values):
            _require_safe_separator(separator)
        parts: list[exp.Expr] = []
        for value in values:
            parts.extend((value, separator))
        return parts[:-1] if parts else []


def _branches(node: exp.Expr) -> list[exp.Expr]:
    """The queries a set operation combines, in order (parentheses unwrapped)."""
    while isinstance(node, exp.Subquery):
        node = node.this
    if isinstance(node, exp.SetOperation):
        return [*_branches(node.this), *_branches(node.expression)]
    return [node]


def _whole(args: list[Shape]) -> Shape:
    """One of the arguments, whole: column text stays column text, and is ``mixed`` when another
    argument is not column text (``IF(c, note, 'guess')``)."""
    tainted = any(a.tainted for a in args)
    mixed = any(a.mixed for a in args) or (tainted and not all(a.tainted for a in args))
    return Shape(tainted, max((a.size for a in args), default=0), mixed)


def _join(a: Shape, b: Shape) -> Shape:
    """Two candidates for one name (the pass does not scope names): what either can carry."""
    return Shape(a.tainted or b.tainted, max(a.size, b.size), a.mixed or b.mixed)


def _union(a: Shape, b: Shape) -> Shape:
    """One position of a set operation: column text beside another value is ``mixed``."""
    mixed = a.mixed or b.mixed or a.tainted != b.tainted
    return Shape(a.tainted or b.tainted, max(a.size, b.size), mixed)


def _untainted(args: list[Shape], what: str) -> None:
    if any(arg.tainted for arg in args):
        raise BoundViolation(TEXT_EXTRACTION, f"{what} over column text")


def _compared(args: list[Shape], what: str) -> None:
    """Column text that may be one of the statement's own values must not be ordered against
    them: the order (or the MIN/MAX) would say how the text compares with a guess."""
    if any(arg.mixed for arg in args):
        raise BoundViolation(TEXT_EXTRACTION, f"{what} compares column text with other values")


def _format_size(node: exp.Expr) -> int:
    """Bytes a date format can produce; the format must be a string literal."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise BoundViolation(TEXT_EXTRACTION, "a format must be a string literal")
    text, size, index = str(node.this), 0, 0
    while index < len(text):
        if text[index] == "%" and index + 1 < len(text):
            size, index = size + _DIRECTIVE_BYTES, index + 2
            continue
        size, index = size + len(text[index].encode()), index + 1
    return size + 2


def _literal_underscores(text: str) -> str:
    """``DB_POOL%`` → ``DB\\_POOL%``: an underscore matches itself, never any character."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index : index + 2])
            index += 2
            continue
        out.append("\\_" if char == "_" else char)
        index += 1
    return "".join(out)


def _first_int(params: Iterable[exp.Expr]) -> int | None:
    for param in params:
        value = param.this if isinstance(param, exp.DataTypeParam) else param
        if isinstance(value, exp.Literal) and str(value.this).isdigit():
            return int(value.this)
    return None


def _bounded_arg(size: int) -> None:
    if size > MAX_STRING_ARG_BYTES:
        raise BoundViolation(TOO_LARGE, "string argument too large")


def _bounded_args(args: list[Shape]) -> None:
    for arg in args:
        _bounded_arg(arg.size)


def _bounded_work(work: int, what: str) -> None:
    if work > MAX_MATCH_WORK:
        raise BoundViolation(TOO_LARGE, f"{what}: string matching too expensive")


def _bounded_key(size: int, what: str) -> None:
    if size > MAX_KEY_BYTES:
        raise BoundViolation(TOO_LARGE, f"{what} too large")


def _require_safe_separator(separator: exp.Expr) -> None:
    if not _safe_literal(separator, first=True) or not _safe_literal(separator, first=False):
        raise BoundViolation(TEXT_EXTRACTION, "separator next to column text")


def _safe_literal(node: exp.Expr | None, *, first: bool) -> bool:
    """A string literal whose character next to the column text keeps redaction's context."""
    if not (isinstance(node, exp.Literal) and node.is_string and node.this):
        return False
    return (node.this[0] if first else node.this[-1]) in _SAFE_NEIGHBOURS


def _concatenated(parts: list[tuple[exp.Expr, Shape]]) -> Shape:
    """Column text may only be glued to literals that begin/end with a safe separator."""
    for index, (_, shape) in enumerate(parts):
        _bounded_arg(shape.size)
        if not shape.tainted:
            continue
        before = parts[index - 1][0] if index > 0 else None
        after = parts[index + 1][0] if index + 1 < len(parts) else None
        if before is not None and not _safe_literal(before, first=False):
            raise BoundViolation(TEXT_EXTRACTION, "column text glued to another value")
        if after is not None and not _safe_literal(after, first=True):
            raise BoundViolation(TEXT_EXTRACTION, "column text glued to another value")
    return Shape(any(s.tainted for _, s in parts), sum(s.size for _, s in parts))


def check_shapes(root: exp.Query, schema: Schema) -> None:
    """Compute every expression's shape and enforce the limits; raises :class:`BoundViolation`.

    Names are learnt until they stop changing (a CTE may be read by an earlier one's reader
    before its own outputs are known); a statement that does not settle within one pass per
    SELECT is refused.
    """
    shapes = _Shapes(root, schema)
    selects = list(root.find_all(exp.Select))
    _settle_names(root, shapes, selects)
    shapes.restart()
    for node in root.walk():
        shapes.of(node)
    for select in selects:
        _check_select(select, shapes)
    _check_orderings(root, shapes)


def _settle_names(root: exp.Query, shapes: _Shapes, selects: list[exp.Select]) -> None:
    """Learn the outputs' names until they stop changing; refused if they never settle."""
    aliases = [a for a in root.find_all(exp.TableAlias) if a.columns]
    operations = list(root.find_all(exp.SetOperation))
    for _ in range(len(selects) + 2):
        before = shapes.names()
        shapes.restart()
        for select in reversed(selects):  # inner queries first, so outer references resolve
            shapes.register_outputs(select)
        for alias in aliases:
            shapes.register_column_aliases(alias)
        for operation in operations:
            shapes.register_set_outputs(operation)
        if shapes.names() == before:
            return
    raise BoundViolation(COMPLEX, "names do not settle")


def _check_orderings(root: exp.Query, shapes: _Shapes) -> None:
    """A set operation's or a window's ORDER BY never sorts mixed column text."""
    for operation in root.find_all(exp.SetOperation):
        order = operation.args.get("order")
        if isinstance(order, exp.Order):
            _compared([shapes.of(operation)], "ORDER BY of a set operation")
    for window in root.find_all(exp.Window):
        order = window.args.get("order")
        if isinstance(order, exp.Order):
            _compared([shapes.of(key) for key in order.expressions], "a window's ORDER BY")


def _check_select(select: exp.Select, shapes: _Shapes) -> None:
    row = 0
    for projection in select.expressions:
        size = shapes.of(projection).size
        if size > MAX_ROW_BYTES:
            raise BoundViolation(TOO_LARGE, "expression too large")
        row += size
    if row > MAX_ROW_BYTES:
        raise BoundViolation(TOO_LARGE, "row too wide")
    if select.args.get("distinct"):
        _bounded_key(row, "DISTINCT row")
    group = select.args.get("group")
    if isinstance(group, exp.Group):
        keys = [shapes.of(key) for key in group.expressions]
        _bounded_key(sum(key.size for key in keys), "GROUP BY key")
    order = select.args.get("order")
    if isinstance(order, exp.Order):
        _compared([shapes.of(key) for key in order.expressions], "ORDER BY")
