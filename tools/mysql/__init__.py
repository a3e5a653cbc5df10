"""``query_mysql``: the MySQL/MariaDB evidence adapter, its DSN and its read-only verdict.

:mod:`~sre_diag.tools.mysql.adapter` runs one guarded, bounded, read-only SELECT
(:class:`MysqlAdapter`); :mod:`~sre_diag.tools.mysql.dsn` parses the DSN,
:mod:`~sre_diag.tools.mysql.privileges` decides from the account's grants whether it is read-only,
:mod:`~sre_diag.tools.mysql.session` sets up each connection, :mod:`~sre_diag.tools.mysql.rows`
projects result rows (:mod:`~sre_diag.tools.mysql.values`: driver values as JSON scalars),
:mod:`~sre_diag.tools.mysql.codes` maps failures to stable codes and
:mod:`~sre_diag.tools.mysql.probe` is what ``check`` asks. The names callers use are re-exported
here.
"""

from sre_diag.tools.mysql.adapter import (
    MAX_RESULT_BYTES,
    MIN_STATEMENT_TIMEOUT_SECONDS,
    ColumnInfo,
    MysqlAdapter,
    TableColumns,
)
from sre_diag.tools.mysql.dsn import MysqlDsn, parse_dsn
from sre_diag.tools.mysql.privileges import GrantVerdict
from sre_diag.tools.mysql.rows import MASK, TRUNCATION_MARK
from sre_diag.tools.mysql.values import to_json_scalar

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
