"""The ``query_logs`` adapter: delegates to a :class:`~sre_diag.tools.logs.source.LogSource` and
projects its records into bounded, redacted :class:`~sre_diag.tools.schemas.LogItem` values."""

from __future__ import annotations

import asyncio

from sre_diag.tools.base import AdapterCall, AdapterResult, Failed, ProbeReport, Ready, ToolName
from sre_diag.tools.logs.source import LogPage, LogRecord, LogSource, LogSourceError
from sre_diag.tools.logs.summary import format_ts
from sre_diag.tools.redact import HEADROOM, redact_prefix
from sre_diag.tools.schemas import LogItem, LogsInput

__all__ = [
    "LABEL_CHARS",
    "MESSAGE_CHARS",
    "TRUNCATION_MARK",
    "LogsAdapter",
    "bound_message",
]

MESSAGE_CHARS = 500
LABEL_CHARS = 100  # service and level as shown
TRUNCATION_MARK = "…[truncated]"


def bound_message(message: str, limit: int = MESSAGE_CHARS) -> str:
    """Bound, redact, then cut to ``limit`` characters with a visible mark.

    Only ``limit + HEADROOM`` characters are ever redacted (a 64 KB line costs what a 2 KB one
    does), and the final cut falls on redacted text, so a secret cut in half cannot leak its
    prefix (:func:`sre_diag.tools.redact.redact_prefix`).
    """
    text, cut = redact_prefix(message, limit + HEADROOM)
    if len(text) <= limit and not cut:
        return text
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def _project(record: LogRecord) -> LogItem:
    return LogItem(
        ts=format_ts(record.ts),
        service=bound_message(record.service, LABEL_CHARS),
        level=bound_message(record.level, LABEL_CHARS),
        message=bound_message(record.message),
    )


def _project_page(page: LogPage) -> Ready:
    return Ready(
        items=[_project(r) for r in page.items],
        truncated=page.truncated,
        summary=page.summary,
        first_items=[_project(r) for r in page.first_items],
    )


class LogsAdapter:
    """The ``query_logs`` adapter: delegates to a source and projects its records."""

    def __init__(self, source: LogSource) -> None:
        self.source = source

    @property
    def tool(self) -> ToolName:
        return ToolName.QUERY_LOGS

    async def invoke(self, call: AdapterCall[LogsInput]) -> AdapterResult:
        """Search and project; source failures become their stable code."""
        try:
            page = await self.source.search(call.input)
        except LogSourceError as exc:
            return Failed(exc.code)
        # Redaction is CPU work on up to 50 bounded texts: a worker thread, so the loop only
        # ever waits for one short, linear regex call (each holds the GIL while it runs).
        return await asyncio.to_thread(_project_page, page)

    async def catalogue(self, limit: int) -> list[str] | None:
        """Up to ``limit + 1`` known service names for the tool description (folder names, or
        the Loki service label's values over the last 24 h); ``None`` when the source cannot
        list services (not configured). Raises ``LogSourceError`` when the listing fails."""
        services = getattr(self.source, "services", None)
        if services is None:
            return None
        found: list[str] = await services(limit + 1)
        return found

    async def probe(self) -> ProbeReport:
        """For ``check``: the source probes itself (a folder, Loki, or not configured)."""
        return await self.source.probe()

    async def aclose(self) -> None:
        await self.source.aclose()
