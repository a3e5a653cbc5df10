"""``query_mysql``: the MySQL/MariaDB evidence adapter, its DSN and its read-only verdict.

:mod:`~plugin.tools.mysql.adapter` runs one guarded, bounded, read-only SELECT
(:class:`MysqlAdapter`); :mod:`~plugin.tools.mysql.dsn` parses the DSN,
:mod:`~plugin.tools.mysql.privileges` decides from the account's grants whether it is read-only,
:mod:`~plugin.tools.mysql.session` sets up each connection, :mod:`~plugin.tools.mysql.rows`
projects result rows (:mod:`~plugin.tools.mysql.values`: driver values as JSON scalars),
:mod:`~plugin.tools.mysql.codes` maps failures to stable codes and
:mod:`~plugin.tools.mysql.probe` is what ``check`` asks. The names callers use are re-exported
here.
"""

from plugin.tools.mysql.adapter import (
    MAX_RESULT_BYTES,
    MIN_STATEMENT_TIMEOUT_SECONDS,
    ColumnInfo,
    MysqlAdapter,
    TableColumns,
)
from plugin.tools.mysql.dsn import MysqlDsn, parse_dsn
from plugin.tools.mysql.privileges import GrantVerdict
from plugin.tools.mysql.rows import MASK, TRUNCATION_MARK
from plugin.tools.mysql.values import to_json_scalar

__all__ = [
    "MASK",
    "MAX_RESULT_BYTES",
    "MIN_STATEMENT_TIMEOUT_SECONDS",
    "TRUNCATION_MARK",
    "ColumnInfo",
    "GrantVerdict",
    "MysqlAdapter",
    "MysqlDsn",
    "TableColumns",
    "parse_dsn",
    "to_json_scalar",
]
