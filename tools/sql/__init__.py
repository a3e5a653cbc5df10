"""The SQL guard of ``query_mysql``: lexer, parse and allowlist walk, typed bounds, canonical text.

:mod:`~sre_diag.tools.sql.guard` is the entry point (:func:`~sre_diag.tools.sql.guard.prepare_sql`);
:mod:`~sre_diag.tools.sql.lexer` is the conservative MariaDB lexer, :mod:`~sre_diag.tools.sql.walk`
the allowlist walk, :mod:`~sre_diag.tools.sql.bounds` and :mod:`~sre_diag.tools.sql.stars` the typed
pass over the column shapes of :mod:`~sre_diag.tools.sql.columns` (the one module here without
sqlglot: ``query_mysql`` reads the shapes before any statement, and imports the guard at its first
statement), :mod:`~sre_diag.tools.sql.canonical` the canonical text used to compare statements.
"""

__all__: list[str] = []
