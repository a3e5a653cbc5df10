"""``query_logs``: one service's log lines in a bounded window, from files or from Loki.

The adapter (:mod:`~sre_diag.tools.logs.adapter`) only projects; a source
(:mod:`~sre_diag.tools.logs.source`) does the searching: the folder of JSON-lines files
(:mod:`~sre_diag.tools.logs.jsonl`, with :mod:`~sre_diag.tools.logs.files` for opening and
:mod:`~sre_diag.tools.logs.prefilter` for matching) or Loki (:mod:`~sre_diag.tools.logs.loki`, with
:mod:`~sre_diag.tools.logs.logql` for the query text). :func:`build_log_source`
(:mod:`~sre_diag.tools.logs.build`) picks the source from ``DIAG_LOGS_SOURCE``. The summary of
every match is :mod:`sre_diag.tools.logs.summary`. The names callers use are re-exported here;
the Loki ones load :mod:`~sre_diag.tools.logs.loki` (and aiohttp, ~0.1-0.2 s to import) when first
asked for, so a process without a Loki source never imports it.
"""

from typing import TYPE_CHECKING, Any

from sre_diag.tools.errors import BodyTooLarge
from sre_diag.tools.logs.adapter import (
    LABEL_CHARS,
    MESSAGE_CHARS,
    TRUNCATION_MARK,
    LogsAdapter,
    bound_message,
)
from sre_diag.tools.logs.build import UnconfiguredLogSource, build_log_source
from sre_diag.tools.logs.files import open_inside
from sre_diag.tools.logs.folder import JsonlLogSource
from sre_diag.tools.logs.jsonl import CHUNK_BYTES, SCAN_SECONDS, ReadStats, parse_line
from sre_diag.tools.logs.logql import (
    LABEL_NAME,
    LINE_FORMATS,
    build_count_logql,
    build_logql,
    contains_regex,
    logql_string,
    re2_escape,
)
from sre_diag.tools.logs.prefilter import Prefilter, line_matches
from sre_diag.tools.logs.source import (
    MASK_SECONDS,
    MAX_LINE_BYTES,
    LogPage,
    LogRecord,
    LogSource,
    LogSourceError,
)

if TYPE_CHECKING:
    from sre_diag.tools.logs.loki import (
        LABELS_MAX_BYTES,
        READ_CHUNK_BYTES,
        SAMPLE_LINES,
        LokiLogSource,
        parse_loki_counts,
        parse_loki_response,
        read_body,
    )

_LOKI_NAMES = frozenset({
    "LABELS_MAX_BYTES",
    "READ_CHUNK_BYTES",
    "SAMPLE_LINES",
    "LokiLogSource",
    "parse_loki_counts",
    "parse_loki_response",
    "read_body",
})  # fmt: skip

__all__ = [
    "CHUNK_BYTES",
    "LABELS_MAX_BYTES",
    "LABEL_CHARS",
    "LABEL_NAME",
    "LINE_FORMATS",
    "MASK_SECONDS",
    "MAX_LINE_BYTES",
    "MESSAGE_CHARS",
    "READ_CHUNK_BYTES",
    "SAMPLE_LINES",
    "SCAN_SECONDS",
    "TRUNCATION_MARK",
    "BodyTooLarge",
    "JsonlLogSource",
    "LogPage",
    "LogRecord",
    "LogSource",
    "LogSourceError",
    "LogsAdapter",
    "LokiLogSource",
    "Prefilter",
    "ReadStats",
    "UnconfiguredLogSource",
    "bound_message",
    "build_count_logql",
    "build_log_source",
    "build_logql",
    "contains_regex",
    "line_matches",
    "logql_string",
    "open_inside",
    "parse_line",
    "parse_loki_counts",
    "parse_loki_response",
    "re2_escape",
    "read_body",
]


def __getattr__(name: str) -> Any:
    """The Loki names, importing :mod:`~sre_diag.tools.logs.loki` on first use."""
    if name in _LOKI_NAMES:
        from sre_diag.tools.logs import loki

        return getattr(loki, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
