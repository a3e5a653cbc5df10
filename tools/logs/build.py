"""Which log source ``DIAG_LOGS_SOURCE`` names: Loki, a folder, or none (``NOT_CONFIGURED``)."""

from __future__ import annotations

import re
from pathlib import Path

from sre_diag.tools.base import AdapterErrorCode, ProbeReport
from sre_diag.tools.logs.folder import JsonlLogSource
from sre_diag.tools.logs.probe import probe_unconfigured
from sre_diag.tools.logs.source import LogPage, LogSource, LogSourceError
from sre_diag.tools.schemas import LogsInput

__all__ = [
    "UnconfiguredLogSource",
    "build_log_source",
]


class UnconfiguredLogSource:
    """``DIAG_LOGS_SOURCE`` unset: every query answers ``NOT_CONFIGURED`` (never demo data)."""

    async def search(self, q: LogsInput) -> LogPage:
        raise LogSourceError(AdapterErrorCode.NOT_CONFIGURED)

    async def aclose(self) -> None:
        """Nothing to release."""

    async def probe(self) -> ProbeReport:
        """Not configured, and says which setting."""
        return probe_unconfigured()


def build_log_source(
    logs_source: str | None,
    *,
    loki_service_label: str = "service",
    loki_line_format: str = "json",
    loki_org_id: str | None = None,
) -> LogSource:
    """``http(s)://…`` is a Loki base URL (the ``loki_*`` settings apply to it); anything else
    is a folder in the layout above; unset (``None`` or blank) is
    :class:`UnconfiguredLogSource`."""
    if logs_source is None or not logs_source.strip():
        return UnconfiguredLogSource()
    if re.match(r"(?i)https?://", logs_source):
        from sre_diag.tools.logs.loki import LokiLogSource  # aiohttp: only for a Loki source

        return LokiLogSource(
            logs_source,
            service_label=loki_service_label,
            line_format=loki_line_format,
            org_id=loki_org_id,
        )
    return JsonlLogSource(Path(logs_source))
