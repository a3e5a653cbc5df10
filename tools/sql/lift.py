"""The guard's side of the post-redaction functions: which projections are sent as the bare
column, with the function the adapter applies after redaction (:mod:`sre_diag.tools.sql.post`)."""

from __future__ import annotations

from sqlglot import exp

from sre_diag.tools.sql.columns import Schema, ValueKind
from sre_diag.tools.sql.post import PostKind, PostOp

__all__ = ["lift_text_functions"]

_MAX_COUNT = 64


def lift_text_functions(root: exp.Query, schema: Schema) -> tuple[PostOp | None, ...]:
    """Rewrite each liftable outermost projection to its bare column; the ops, by position.

    Only a plain outermost SELECT (no DISTINCT, no GROUP BY: those would group the whole value)
    is rewritten; elsewhere the typed pass judges the function as written.
    """
    if not isinstance(root, exp.Select) or root.args.get("distinct") or root.args.get("group"):
        return tuple(None for _ in getattr(root, "expressions", ()))
    text_names = _text_columns(root, schema)
    ops: list[PostOp | None] = []
    for index, projection in enumerate(root.expressions):
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        op = _liftable(inner, text_names)
        ops.append(op)
        if op is None:
            continue
        label = projection.alias if isinstance(projection, exp.Alias) else inner.sql("mysql")
        column = inner.this.copy()
        root.expressions[index] = exp.Alias(
            this=column, alias=exp.Identifier(this=label, quoted=True)
        )
        root.expressions[index].parent = root
    return tuple(ops)


def _text_columns(root: exp.Select, schema: Schema) -> frozenset[str]:
    tables = {table.name for table in root.find_all(exp.Table)} & set(schema)
    return frozenset(
        column.name.casefold()
        for table in tables
        for column in schema[table]
        if column.kind is ValueKind.TEXT
    )


def _liftable(node: exp.Expr, text_names: frozenset[str]) -> PostOp | None:
    column = node.this if isinstance(node, exp.Func) else None
    if not (isinstance(column, exp.Column) and column.name.casefold() in text_names):
        return None
    if isinstance(node, exp.Lower | exp.Upper) and set(node.args) <= {"this"}:
        return PostOp(PostKind.LOWER if isinstance(node, exp.Lower) else PostKind.UPPER)
    if isinstance(node, exp.Left | exp.Right):
        count = _small_int(node.expression)
        kind = PostKind.LEFT if isinstance(node, exp.Left) else PostKind.RIGHT
        return None if count is None else PostOp(kind, count)
    if isinstance(node, exp.SubstringIndex):
        delimiter, count = node.args.get("delimiter"), _small_int(node.args.get("count"))
        if isinstance(delimiter, exp.Literal) and delimiter.is_string and delimiter.this:
            return None if count is None else PostOp(
                PostKind.SUBSTRING_INDEX, count, str(delimiter.this)
            )
    return None


def _small_int(node: exp.Expr | None) -> int | None:
    negative = isinstance(node, exp.Neg)
    value = node.this if negative and node is not None else node
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
        return None
    number = int(value.this)
    if number > 4096 or (number > _MAX_COUNT and isinstance(node, exp.Neg)):
        return None
    return -number if negative else number
