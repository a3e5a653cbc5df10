"""The SQL guard of ``query_mysql``: lexer, parse and allowlist walk, typed bounds, canonical text.

:mod:`~plugin.tools.sql.guard` is the entry point (:func:`~plugin.tools.sql.guard.prepare_sql`);
:mod:`~plugin.tools.sql.lexer` is the conservative MariaDB lexer, :mod:`~plugin.tools.sql.walk`
the allowlist walk, :mod:`~plugin.tools.sql.bounds` and :mod:`~plugin.tools.sql.stars` the typed
pass over the column shapes of :mod:`~plugin.tools.sql.columns` (the one module here without
sqlglot: ``query_mysql`` reads the shapes before any statement, and imports the guard at its first
statement), :mod:`~plugin.tools.sql.canonical` the canonical text used to compare statements.
"""

__all__: list[str] = []
