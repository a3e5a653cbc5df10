"""Decide whether a model-written statement may run as read-only evidence, before it is sent.

The model writes the SQL of ``query_mysql`` and can be talked into anything, so the guard treats
the text as hostile. It parses with sqlglot's MySQL dialect and accepts only one plain query
(``SELECT``, ``WITH`` … ``SELECT``, set operations, subqueries, joins) whose every part is on an
allowlist; everything else is refused with a stable :class:`RefusalReason`.

Why a parser and allowlists, not regular expressions or denylists: the dangerous surface of a
MySQL ``SELECT`` is its functions (``SLEEP``, ``LOAD_FILE``, ``GET_LOCK``, UDFs, stored
functions), its clauses (``INTO OUTFILE``, ``FOR UPDATE``), variables (``@x``, ``@@x``,
``:=``) and the tables it reads. A denylist forgets the next UDF; an allowlist of functions known
to be pure scalar/aggregate/window computations does not.

Parser differentials (sqlglot reading a statement one way, the server another) are closed by
never sending the model's text: the adapter executes :func:`limit_rows`' rendering of the
*checked* tree, without comments and with every identifier back-quoted, so what runs is exactly
what was checked. Two textual checks remain on the raw text, on purpose: MySQL and MariaDB
*execute* ``/*! … */`` and ``/*M! … */`` comments and honour ``/*+ … */`` optimizer hints, while
sqlglot drops or keeps them as comments; such text is refused outright (``COMMENT_HINT``).

Tables: only unqualified names, or names qualified with the DSN's own database, that match the
allowlist; the matched allowlisted spelling is written back into the tree. The system schemas
``mysql``, ``performance_schema``, ``sys`` and ``information_schema`` are refused entirely —
including ``information_schema``, although the server filters it by privilege: it still discloses
the names of other schemas, routines, users' grants and server internals, and the model does not
need it (the adapter itself reads the table list once, not the model).

Secret-looking columns (:func:`sre_diag.tools.redact.is_secret_name`) may only be projected as bare
columns of the outermost SELECT under a secret-looking output name; using them in predicates,
functions, aliases, set operations, ``JOIN … USING``, ordinals of ``ORDER BY``/``GROUP BY`` or a
``DISTINCT`` row is refused, and ``NATURAL`` joins are refused outright, which blocks laundering
and equality/ordering oracles. :class:`Prepared` tells the adapter which output positions hold
such a column; it masks by position, never by the label the server returns.

With the schema (the adapter always passes it), :mod:`sre_diag.tools.sql.stars` expands the
outermost ``*`` and :mod:`sre_diag.tools.sql.bounds` bounds every expression's size and cost and
refuses extraction from text columns. The walk itself and its allowlists are
:mod:`sre_diag.tools.sql.walk`; the verdicts are :mod:`sre_diag.tools.sql.refusal`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from sre_diag.tools.errors import LexRefusal
from sre_diag.tools.sql.bounds import BoundViolation, Schema, check_shapes
from sre_diag.tools.sql.lexer import LexKind, scan_raw, scan_rendered
from sre_diag.tools.sql.lift import lift_text_functions
from sre_diag.tools.sql.post import PostOp
from sre_diag.tools.sql.refusal import Allowed, GuardDecision, Refusal, RefusalReason, Refused
from sre_diag.tools.sql.stars import cap_wide_projections, expand_stars, projection_masks
from sre_diag.tools.sql.walk import (
    MAX_LIKE_WILDCARDS,
    MAX_TYPE_PARAMETER,
    SYSTEM_SCHEMAS,
    SecretNames,
    TreeChecker,
    check_secret_positions,
    is_secret_column,
)

__all__ = [
    "DIALECT",
    "MAX_LIKE_WILDCARDS",
    "MAX_SQL_CHARS",
    "MAX_TREE_DEPTH",
    "MAX_TREE_NODES",
    "MAX_TYPE_PARAMETER",
    "SYSTEM_SCHEMAS",
    "Allowed",
    "GuardDecision",
    "Prepared",
    "RefusalReason",
    "Refused",
    "check_sql",
    "is_secret_column",
    "limit_rows",
    "prepare_sql",
]

DIALECT = "mysql"

# Bounds that keep the parser and the checker small (the walk's own are in sre_diag.tools.sql.walk).
MAX_SQL_CHARS = 4000
MAX_TREE_DEPTH = 48
MAX_TREE_NODES = 1500

# Raw-text markers the server executes although they look like comments.
_EXECUTABLE_COMMENT_MARKERS = ("/*!", "/*+", "/*m!")


# --- the check ---------------------------------------------------------------------------------


def check_sql(
    sql: str,
    *,
    database: str,
    allowed_tables: frozenset[str],
    schema: Schema | None = None,
) -> GuardDecision:
    """Parse ``sql`` and decide; never raises for any input text.

    With ``schema`` (the adapter always passes one) the outermost ``*`` is expanded into the
    schema's columns and the typed pass (:mod:`sre_diag.tools.sql.bounds`) bounds every
    expression and refuses extraction from text columns; without it only the untyped checks run.
    """
    try:
        tree, _ = _checked(sql, database, allowed_tables, schema)
    except Refusal as refusal:
        return Refused(refusal.reason, refusal.detail)
    except BoundViolation as violation:
        return Refused(violation.reason, violation.detail)
    except RecursionError:
        return Refused(RefusalReason.TOO_COMPLEX, "recursion")
    except Exception as error:  # a parser/generator surprise is a refusal, never a crash
        return Refused(RefusalReason.UNSUPPORTED_SYNTAX, type(error).__name__)
    return Allowed(tree)


def _checked(
    sql: str, database: str, allowed_tables: frozenset[str], schema: Schema | None
) -> tuple[exp.Query, tuple[PostOp | None, ...]]:
    """The one guard pass: parse, allowlists, star expansion, lifted text functions, typed
    pass, secret positions; raises :class:`Refusal` or :class:`BoundViolation`."""
    secret = secret_names(schema)
    tree = _parse_single_query(sql)
    TreeChecker(database=database, allowed_tables=allowed_tables, secret=secret).check(tree)
    post: tuple[PostOp | None, ...] = ()
    if schema is not None:
        expand_stars(tree, schema, secret)
        post = lift_text_functions(tree, schema)
        cap_wide_projections(tree, schema, secret)
        check_shapes(tree, schema)
    check_secret_positions(tree, secret)
    return tree, post


def secret_names(schema: Schema | None) -> SecretNames:
    """The secret column names of ``schema`` (case-folded) beside the name classifier."""
    if schema is None:
        return SecretNames()
    return SecretNames(frozenset(
        column.name.casefold()
        for columns in schema.values()
        for column in columns
        if column.secret or is_secret_column(column.name)
    ))  # fmt: skip



@dataclass(frozen=True, slots=True)
class Prepared:
    """The exact text to send, which output positions the adapter must mask, and the text
    functions it applies after redaction (:mod:`sre_diag.tools.sql.post`).

    ``masked[i]`` is true when the i-th column of the result is a secret-looking column (the
    guard proved it can only be there, bare, in the outermost SELECT); the adapter masks by this
    position, never by the label the server returns (the server may shorten labels).
    """

    text: str
    masked: tuple[bool, ...]
    post: tuple[PostOp | None, ...] = ()


def prepare_sql(
    sql: str,
    *,
    database: str,
    allowed_tables: frozenset[str],
    max_rows: int,
    schema: Schema,
) -> Prepared | Refused:
    """Everything between the model's text and the bytes the server receives; never raises.

    1. ONE guard pass over the model's text (lexical pre-scan, parse, allowlists, typed pass);
    2. render the checked tree with the row cap (:func:`limit_rows`);
    3. verify the rendering with the conservative lexer (:mod:`sre_diag.tools.sql.lexer`): it
       holds exactly as many quoted names and string literals as the tree — so nothing was
       pasted raw into the text;
    4. parse the rendering again: it must render to the same text (a fixed point), so the
       text the server parses is the one the checked tree stands for; the masks and the
       post-redaction functions come from the checked tree.
    """
    try:
        tree, post = _checked(sql, database, allowed_tables, schema)
        limited = _with_limit(tree, max_rows, copy=False)  # the checked tree is ours alone
        text = _render(limited)
        _verify_rendering(limited, text)
        _check_fixed_point(text)
        masked = projection_masks(limited, secret_names(schema))
    except Refusal as refusal:
        return Refused(refusal.reason, refusal.detail)
    except BoundViolation as violation:
        return Refused(violation.reason, violation.detail)
    except RecursionError:
        return Refused(RefusalReason.TOO_COMPLEX, "recursion")
    except Exception as error:
        return Refused(RefusalReason.UNSUPPORTED_SYNTAX, type(error).__name__)
    return Prepared(text, masked, post or tuple(None for _ in masked))


def _check_fixed_point(text: str) -> None:
    """The rendering parses back to a tree that renders to the very same text."""
    try:
        again = sqlglot.parse(text, read=DIALECT)
    except SqlglotError:
        raise Refusal(RefusalReason.RENDER_MISMATCH, "rendering does not parse") from None
    if len(again) != 1 or again[0] is None or _render_any(again[0]) != text:
        raise Refusal(RefusalReason.RENDER_MISMATCH, "rendering is not a fixed point")


def _render_any(tree: exp.Expr) -> str:
    return tree.sql(dialect=DIALECT, comments=False, identify=True)


def limit_rows(expression: exp.Query, max_rows: int) -> str:
    """Render the checked tree so the server returns at most ``max_rows + 1`` rows.

    The outermost ``LIMIT`` is set, or clamped when the model gave a larger one; the extra row
    tells the caller the result was truncated. Rendering drops comments and back-quotes every
    identifier; :func:`prepare_sql` verifies the result before anything is sent.
    """
    return _render(_with_limit(expression, max_rows))


def _with_limit(expression: exp.Query, max_rows: int, *, copy: bool = True) -> exp.Query:
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    cap = max_rows + 1
    limited = expression.copy() if copy else expression
    current = limited.args.get("limit")
    if not (isinstance(current, exp.Limit) and _literal_int(current.expression, cap)):
        limited = limited.limit(cap, copy=False)
    return limited


def _render(tree: exp.Query) -> str:
    return tree.sql(dialect=DIALECT, comments=False, identify=True)


def _verify_rendering(tree: exp.Query, text: str) -> None:
    """The rendering must lex cleanly and hold exactly the quoted names/strings of ``tree``."""
    try:
        tokens = scan_rendered(text)
    except LexRefusal as refusal:
        raise Refusal(RefusalReason.LEXICAL, f"rendering: {refusal.what}") from None
    quoted = sum(1 for token in tokens if token.kind is LexKind.QUOTED_IDENT)
    strings = sum(1 for token in tokens if token.kind is LexKind.STRING)
    nodes = list(tree.walk())
    want_quoted = sum(1 for node in nodes if isinstance(node, exp.Identifier))
    want_strings = sum(1 for node in nodes if _renders_as_string(node))
    if quoted != want_quoted or strings != want_strings:
        raise Refusal(
            RefusalReason.RENDER_MISMATCH,
            f"quoted names {quoted}/{want_quoted}, strings {strings}/{want_strings}",
        )


def _renders_as_string(node: exp.Expr) -> bool:
    return (isinstance(node, exp.Literal) and node.is_string) or isinstance(node, exp.JSONPath)


def _literal_int(node: exp.Expr | None, cap: int) -> bool:
    """True when ``node`` is a non-negative integer literal no larger than ``cap``."""
    if not isinstance(node, exp.Literal) or node.is_string:
        return False
    return node.this.isdigit() and int(node.this) <= cap


def _parse_single_query(sql: str) -> exp.Query:
    """Lexical pre-scan, token scan, then parse exactly one statement and unwrap parentheses."""
    if len(sql) > MAX_SQL_CHARS:
        raise Refusal(RefusalReason.TOO_COMPLEX, "statement too long")
    lowered = sql.lower()
    if any(marker in lowered for marker in _EXECUTABLE_COMMENT_MARKERS):
        raise Refusal(RefusalReason.COMMENT_HINT, "executable comment or optimizer hint")
    try:
        scan_raw(sql)
    except LexRefusal as refusal:
        raise Refusal(_lexical_reason(refusal.what), refusal.what) from None
    try:
        tokens = sqlglot.tokenize(sql, read=DIALECT)
    except SqlglotError as error:
        raise Refusal(RefusalReason.PARSE_ERROR, type(error).__name__) from None
    _scan_tokens(tokens)
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except SqlglotError as error:
        raise Refusal(RefusalReason.PARSE_ERROR, type(error).__name__) from None
    if not statements:
        raise Refusal(RefusalReason.EMPTY)
    if len(statements) > 1:
        raise Refusal(RefusalReason.MULTIPLE_STATEMENTS)
    tree = statements[0]
    _check_shape(tree)
    while isinstance(tree, exp.Subquery) and set(_set_args(tree)) == {"this"}:
        tree = tree.this
    tree.parent = None  # the statement itself, unwrapped: the outermost query
    if not isinstance(tree, exp.Select | exp.SetOperation):
        raise Refusal(RefusalReason.NOT_SELECT, type(tree).__name__)
    return tree


def _lexical_reason(what: str) -> RefusalReason:
    if what.startswith("comment"):
        return RefusalReason.COMMENT_HINT
    if what == "character ';'":
        return RefusalReason.MULTIPLE_STATEMENTS
    if what in {"character '@'", "character '?'", "character ':'"}:
        return RefusalReason.VARIABLE
    if what == "nesting too deep":
        return RefusalReason.TOO_COMPLEX
    if what == "unterminated string" or what.startswith("unterminated"):
        return RefusalReason.PARSE_ERROR
    return RefusalReason.LEXICAL


def _check_shape(tree: exp.Expr) -> None:
    """Bound depth and size without recursion, before any recursive walk or rendering."""
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_TREE_DEPTH or count > MAX_TREE_NODES:
            raise Refusal(RefusalReason.TOO_COMPLEX, "expression too deep or too large")
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _set_args(node: exp.Expr) -> Iterator[str]:
    """Names of the arguments of ``node`` that carry a value."""
    return (key for key, value in node.args.items() if value not in (None, False, []))


_TOKEN_REFUSALS: dict[TokenType, RefusalReason] = {
    TokenType.INTO: RefusalReason.INTO_CLAUSE,
    TokenType.PARAMETER: RefusalReason.VARIABLE,
    TokenType.SESSION_PARAMETER: RefusalReason.VARIABLE,
    TokenType.COLON_EQ: RefusalReason.VARIABLE,
    TokenType.PLACEHOLDER: RefusalReason.VARIABLE,
}


def _scan_tokens(tokens: list[Token]) -> None:
    """Refuse by token before parsing: clauses sqlglot may not model (``INTO DUMPFILE``),
    variables, and statement separators followed by anything but more separators."""
    seen_separator = False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            seen_separator = True
            continue
        if seen_separator:
            raise Refusal(RefusalReason.MULTIPLE_STATEMENTS)
        reason = _TOKEN_REFUSALS.get(token.token_type)
        if reason is not None:
            raise Refusal(reason, token.text)
