"""Star expansion and output masks: the outermost ``*`` becomes the schema's named columns.

Part of the typed pass of the SQL guard (:mod:`sre_diag.tools.sql.bounds` holds the shapes): the
outermost ``*`` / ``t.*`` is expanded into the schema's columns, a wide text column projected
bare is capped at :data:`~sre_diag.tools.sql.bounds.CAP_CHARS` characters, and every output
position is told whether it holds a secret-looking column, so the adapter masks by the position
of each checked projection and never by the label the server returns.
"""

from __future__ import annotations

from sqlglot import exp

from sre_diag.tools.sql.bounds import (
    CAP_BYTES,
    CAP_CHARS,
    UNEXPANDABLE,
    BoundViolation,
    Schema,
    ValueKind,
)
from sre_diag.tools.sql.walk import NO_SCHEMA_SECRETS, SecretNames

__all__ = ["cap_wide_projections", "expand_stars", "projection_masks"]


def expand_stars(root: exp.Query, schema: Schema, secret: SecretNames = NO_SCHEMA_SECRETS) -> None:
    """Replace ``*`` / ``t.*`` in the outermost SELECT by the schema's readable columns (those
    not classified secret), in table order.

    Only base tables can be expanded (a CTE or derived table has no schema here), and not over
    ``JOIN … USING`` (the server merges those columns): anything else is :data:`UNEXPANDABLE`.
    """
    if not isinstance(root, exp.Select):
        return
    projections: list[exp.Expr] = []
    for projection in root.expressions:
        if isinstance(projection, exp.Star):
            projections.extend(_expand(root, schema, None, secret))
        elif isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
            projections.extend(_expand(root, schema, projection.table, secret))
        else:
            projections.append(projection)
    root.set("expressions", projections)


def cap_wide_projections(
    root: exp.Query, schema: Schema, secret: SecretNames = NO_SCHEMA_SECRETS
) -> None:
    """Send a bare outermost projection of a wide, non-secret text column as
    ``LEFT(col, CAP_CHARS) AS <its name>`` (a ``MEDIUMTEXT`` note stays selectable)."""
    if not isinstance(root, exp.Select):
        return
    wide = _wide_text_names(root, schema)
    for index, projection in enumerate(root.expressions):
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(inner, exp.Column) or isinstance(inner.this, exp.Star):
            continue
        if inner.name.casefold() not in wide or secret(inner.name):
            continue
        capped = exp.Left(this=inner.copy(), expression=exp.Literal.number(CAP_CHARS))
        alias = projection.alias if isinstance(projection, exp.Alias) else inner.name
        root.expressions[index] = exp.Alias(
            this=capped, alias=exp.Identifier(this=alias, quoted=True)
        )
        root.expressions[index].parent = root


def _wide_text_names(root: exp.Query, schema: Schema) -> frozenset[str]:
    tables = {table.name for table in root.find_all(exp.Table)} & set(schema)
    return frozenset(
        column.name.casefold()
        for table in tables
        for column in schema[table]
        if column.kind is ValueKind.TEXT and column.max_bytes > CAP_BYTES
    )


def _sources(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_")
    sources = [from_.this] if isinstance(from_, exp.From) else []
    for join in select.args.get("joins") or []:
        if join.args.get("using"):
            raise BoundViolation(UNEXPANDABLE, "* over JOIN USING")
        sources.append(join.this)
    return sources


def _expand(
    select: exp.Select, schema: Schema, qualifier: str | None, secret: SecretNames
) -> list[exp.Expr]:
    columns: list[exp.Expr] = []
    for source in _sources(select):
        name = source.alias_or_name
        if qualifier is not None and name.casefold() != qualifier.casefold():
            continue
        columns.extend(
            exp.Column(
                this=exp.Identifier(this=column, quoted=True),
                table=exp.Identifier(this=name, quoted=True),
            )
            for column in _source_columns(select, source, schema)
            if not secret(column)
        )
    if not columns:
        raise BoundViolation(UNEXPANDABLE, "* names no table")
    return columns


def _source_columns(select: exp.Select, source: exp.Expr, schema: Schema) -> list[str]:
    """Output names of a FROM/JOIN source: a CTE or derived table of the statement, or a base
    table of the schema; a source whose names are not all known cannot be expanded."""
    query: exp.Expr | None = None
    if isinstance(source, exp.Subquery):
        query = source.this
    elif isinstance(source, exp.Table) and not source.args.get("db"):
        query = _cte_query(select, source.name)
    if query is not None:
        return _output_names(query)
    if isinstance(source, exp.Table) and source.name in schema:
        return [column.name for column in schema[source.name]]
    raise BoundViolation(UNEXPANDABLE, "* over a table without a schema")


def _cte_query(select: exp.Select, name: str) -> exp.Expr | None:
    with_ = select.args.get("with_")
    if isinstance(with_, exp.With):
        for cte in with_.expressions:
            if cte.alias == name and isinstance(cte.this, exp.Expr):
                return cte.this
    return None


def _output_names(query: exp.Expr) -> list[str]:
    while isinstance(query, exp.SetOperation | exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select):
        raise BoundViolation(UNEXPANDABLE, "* over an unnamed source")
    names: list[str] = []
    for projection in query.expressions:
        if not isinstance(projection, exp.Alias | exp.Column) or not projection.alias_or_name:
            raise BoundViolation(UNEXPANDABLE, "* over an unnamed column")
        names.append(projection.alias_or_name)
    return names


def projection_masks(
    root: exp.Query, secret: SecretNames = NO_SCHEMA_SECRETS
) -> tuple[bool, ...]:
    """Per output position: is it a (possibly aliased) secret-looking column?

    The guard has proved that a secret column can only appear there, bare, in the outermost
    SELECT; a set operation's branches never carry one.
    """
    select: exp.Expr = root
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return ()
    masks: list[bool] = []
    for projection in select.expressions:
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        masked = isinstance(inner, exp.Column) and secret(inner.name)
        masks.append(masked and root is select)
    return tuple(masks)
