"""``query_logs``: one service's log lines in a bounded window, from files or from Loki.

The adapter (:mod:`~plugin.tools.logs.adapter`) only projects; a source
(:mod:`~plugin.tools.logs.source`) does the searching: the folder of JSON-lines files
(:mod:`~plugin.tools.logs.jsonl`, with :mod:`~plugin.tools.logs.files` for opening and
:mod:`~plugin.tools.logs.prefilter` for matching) or Loki (:mod:`~plugin.tools.logs.loki`, with
:mod:`~plugin.tools.logs.logql` for the query text). :func:`build_log_source`
(:mod:`~plugin.tools.logs.build`) picks the source from ``DIAG_LOGS_SOURCE``. The summary of
every match is :mod:`plugin.tools.logs.summary`. The names callers use are re-exported here;
the Loki ones load :mod:`~plugin.tools.logs.loki` (and aiohttp, ~0.1-0.2 s to import) when first
asked for, so a process without a Loki source never imports it.
"""

from typing import TYPE_CHECKING, Any

from plugin.tools.errors import BodyTooLarge
from plugin.tools.logs.adapter import (
    LABEL_CHARS,
    MESSAGE_CHARS,
    TRUNCATION_MARK,
    LogsAdapter,
    bound_message,
)
from plugin.tools.logs.build import UnconfiguredLogSource, build_log_source
from plugin.tools.logs.files import open_inside
from plugin.tools.logs.folder import JsonlLogSource
from plugin.tools.logs.jsonl import CHUNK_BYTES, SCAN_SECONDS, ReadStats, parse_line
from plugin.tools.logs.logql import (
    LABEL_NAME,
    LINE_FORMATS,
    build_count_logql,
    build_logql,
    contains_regex,
    logql_string,
    re2_escape,
)
from plugin.tools.logs.prefilter import Prefilter, line_matches
from plugin.tools.logs.source import (
    MASK_SECONDS,
    MAX_LINE_BYTES,
    LogPage,
    LogRecord,
    LogSource,
    LogSourceError,
)

if TYPE_CHECKING:
    from plugin.tools.logs.loki import (
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
    """The Loki names, importing :mod:`~plugin.tools.logs.loki` on first use."""
    if name in _LOKI_NAMES:
        from plugin.tools.logs import loki

        return getattr(loki, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
