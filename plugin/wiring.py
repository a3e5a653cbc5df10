"""Builds the real adapters and the harness from settings (the composition root)."""

from __future__ import annotations

import asyncio
import gc
import importlib
from typing import Any

from sre_diag.audit import AuditTrail, build_audit_sink
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.tools import redact as redaction
from sre_diag.tools.base import EvidenceAdapter, ToolName
from sre_diag.tools.knowledge import KnowledgeAdapter
from sre_diag.tools.logs import LogsAdapter, build_log_source
from sre_diag.tools.mysql import MysqlAdapter

__all__ = [
    "build_adapters",
    "build_audit_trail",
    "build_harness",
    "import_framework",
    "prime_framework",
    "warm_up",
]

# Imported lazily by the framework at a run's start (see prime_framework).
_FIRST_RUN_IMPORTS = (
    "openai.resources.chat",
    "workflows.plugins",
    "workflows.representation.validate",
    "workflows.runtime.verbose",
)


def build_adapters(settings: Settings) -> dict[ToolName, EvidenceAdapter[Any]]:
    """The three evidence adapters. An unset ``DIAG_MYSQL_DSN``, ``DIAG_KNOWLEDGE_DIR`` or
    ``DIAG_LOGS_SOURCE`` yields ``NOT_CONFIGURED`` answers from that tool: nothing falls back to
    the bundled demo data (only ``demo`` and ``eval`` point at it, explicitly)."""
    dsn = settings.mysql_dsn.get_secret_value() if settings.mysql_dsn is not None else None
    redaction.configure(emails=settings.redact_emails)
    return {
        ToolName.LOOKUP_KNOWLEDGE: KnowledgeAdapter(
            settings.knowledge_dir,
            settings.cache_dir,
            rescan_interval_seconds=settings.knowledge_rescan_seconds,
        ),
        ToolName.QUERY_LOGS: LogsAdapter(
            build_log_source(
                settings.logs_source,
                loki_service_label=settings.loki_service_label,
                loki_line_format=settings.loki_line_format,
                loki_org_id=settings.loki_org_id,
            )
        ),
        ToolName.QUERY_MYSQL: MysqlAdapter(
            dsn,
            settings.mysql_allowed_tables,
            max_rows=settings.mysql_max_rows,
            statement_timeout_seconds=settings.mysql_statement_timeout_seconds,
            require_read_only=settings.mysql_require_read_only,
            require_column_grants=settings.mysql_require_column_grants,
            secret_columns=settings.mysql_secret_columns,
            # 0 ("re-read every run") still re-reads the grants at most once a second
            verdict_refresh_seconds=max(settings.catalog_refresh_seconds, 1.0),
        ),
    }


def build_audit_trail(settings: Settings) -> AuditTrail:
    """The audit port the harness hands its runs to: ``DIAG_AUDIT_SINK`` behind the writer."""
    sink = build_audit_sink(settings.audit_sink, timeout_seconds=settings.audit_timeout_seconds)
    return AuditTrail.for_settings(sink, settings)


def build_harness(settings: Settings, *, model_connections: int = 100) -> Harness:
    """``model_connections``: the model HTTP pool's size (a worker: its concurrent runs)."""
    return Harness(
        settings=settings,
        adapters=build_adapters(settings),
        audit=build_audit_trail(settings),
        model_connections=model_connections,
    )


def import_framework() -> None:
    """Import what the framework would otherwise import inline during the first run
    (``openai.resources`` alone is ~0.2-0.4 s): ``diagnose`` does it with its other imports,
    while the collector is paused (``sre_diag.commands.startup``)."""
    for name in _FIRST_RUN_IMPORTS:
        importlib.import_module(name)


def prime_framework() -> None:
    """Load, once per process, what the first run would otherwise load ON the event loop:
    ``AsyncOpenAI.chat`` imports ``openai.resources`` on first use, ``Workflow.__init__`` imports
    ``workflows.plugins`` (and its runtime) inline, and a run whose history does not fit its
    memory's limit in bytes loads the tiktoken encoding (``sre_diag.harness.memory``;
    ``llama_index.core.utils.get_tokenizer``, cached process-wide). Measured
    with py-spy on ``serve``: seconds of loop stall at the first run under load, none after."""
    from llama_index.core.utils import get_tokenizer

    import_framework()
    get_tokenizer()


async def warm_up(harness: Harness) -> None:
    """Before the first question: load the framework's lazy parts in a thread (never on the
    loop, :func:`prime_framework`), build what adapters build lazily (the runbook index), then
    freeze what the start built (``gc.freeze``: the ~400,000 objects of the modules are never
    walked by a collection again). Without the freeze, the first full collection walked them
    all DURING a run, whenever the allocation counts happened to trigger it: 180 ms of loop
    stall in the first run measured in ``bench.runstart`` (issue 23). A full collection comes
    first, so what is garbage by then is freed, never frozen for good."""
    await asyncio.to_thread(prime_framework)
    for adapter in harness.adapters.values():
        warm = getattr(adapter, "warm", None)
        if warm is not None:
            await warm()
    gc.collect()
    gc.freeze()
