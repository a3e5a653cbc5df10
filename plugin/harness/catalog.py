"""The catalogues in the tool descriptions (CONTRACTS §3 "What the model is told").

The adapters read them — never the model: ``query_logs`` the known services, ``query_mysql``
the allowed tables with their columns and types (masked columns marked), ``lookup_knowledge``
the runbook titles. :class:`Catalogues` keeps the three rendered descriptions, re-reads a
catalogue once it is ``DIAG_CATALOG_REFRESH_SECONDS`` old (a failed read is retried sooner) and
hands each run ONE tuple of descriptions, taken at its start: a run sees one consistent set.

Catalogue text is data from the environment (a service, table or runbook name can be hostile;
whoever can push a Loki stream label writes service names): a service is listed only if
``query_logs`` accepts it as a name (other values could not be queried and are left out before
the list is cut, so they cannot push real services out); every other entry is cleaned of control
and format characters and cut to a length; each list is written as a JSON array (quotes
escaped), bounded in count and bytes (:data:`MAX_SERVICES_BYTES`, :data:`MAX_TITLES_BYTES`,
:data:`MAX_TABLES_BYTES`: every description stays well under 8 KB), cut with a marker. A
catalogue that cannot be read leaves the tool usable; its description says the list is
unavailable. All wording comes from ``prompts/tools.<lang>.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sre_diag.contract.prompts import ENTRIES_SLOT, PromptSet
from sre_diag.log import log_failure
from sre_diag.tools.base import MAX_SERVICES, ToolName
from sre_diag.tools.plain import clean_entry
from sre_diag.tools.schemas import SERVICE_NAME

__all__ = [
    "MAX_RUNBOOKS",
    "MAX_SERVICES",
    "MAX_SERVICES_BYTES",
    "MAX_TABLES_BYTES",
    "MAX_TITLES_BYTES",
    "Catalogues",
    "clean_entry",
    "render_catalogue",
]

_log = logging.getLogger(__name__)

MAX_RUNBOOKS = 50
MAX_TABLES_BYTES = 4096
# The service and runbook title lists, in bytes of JSON: with the tool's own text, every
# description stays well under 8 KB (CJK titles are 3 bytes a character).
MAX_SERVICES_BYTES = 3072
MAX_TITLES_BYTES = 3072
# The most columns read from information_schema for one catalogue (far more than 4 KB shows).
MAX_COLUMNS_READ = 2000
_TITLE_CHARS = 120
_NAME_CHARS = 64
_TYPE_CHARS = 64
_TABLE_ENTRY_CHARS = 1024
# One catalogue read (listing, HTTP request, information_schema query) at most this long.
READ_TIMEOUT_SECONDS = 5.0
# A failed read is retried after at most this long, whatever the refresh interval.
_RETRY_FAILED_SECONDS = 30.0


def _json_list(entries: Sequence[str], max_count: int, max_bytes: int) -> tuple[str, bool]:
    """Entries as a JSON array of at most ``max_count`` items and ``max_bytes`` bytes; whether
    some were left out."""
    kept: list[str] = []
    size = 2
    for entry in entries[:max_count]:
        piece = len(json.dumps(entry, ensure_ascii=False).encode("utf-8")) + (1 if kept else 0)
        if size + piece > max_bytes:
            return json.dumps(kept, ensure_ascii=False), True
        kept.append(entry)
        size += piece
    return json.dumps(kept, ensure_ascii=False), len(entries) > max_count


def _table_entry(table: Any, masked_word: str) -> str:
    columns = ", ".join(
        f"{clean_entry(c.name, _NAME_CHARS)} {clean_entry(c.type, _TYPE_CHARS)}"
        + (f" {masked_word}" if c.masked else "")
        for c in table.columns
    )
    return clean_entry(f"{clean_entry(table.table, _NAME_CHARS)}({columns})", _TABLE_ENTRY_CHARS)


def _services(found: Sequence[Any]) -> list[str]:
    """The names ``query_logs`` accepts as a service, each once, in the order found: anything
    else (prose, markup, control characters, over 100 characters) could not be queried
    and is attacker text, so it is left out, never shown cleaned."""
    names = (str(name) for name in found)
    return list(dict.fromkeys(name for name in names if SERVICE_NAME.fullmatch(name)))


def render_catalogue(prompts: PromptSet, tool: ToolName, found: Sequence[Any] | None) -> str:
    """The catalogue text of ``tool`` for its description slot; ``None``: unavailable."""
    if found is None:
        return prompts.tools[f"{tool.value}.unavailable"]
    if tool is ToolName.QUERY_MYSQL:
        masked = prompts.tools["masked"]
        entries = [_table_entry(table, masked) for table in found]
        text, cut = _json_list(entries, len(entries), MAX_TABLES_BYTES)
    elif tool is ToolName.QUERY_LOGS:
        entries = _services(found)
        text, cut = _json_list(entries, MAX_SERVICES, MAX_SERVICES_BYTES)
    else:
        entries = [clean_entry(str(title), _TITLE_CHARS) for title in found]
        text, cut = _json_list(entries, MAX_RUNBOOKS, MAX_TITLES_BYTES)
    if cut:
        text = f"{text} {prompts.tools['cut']}"
    return prompts.tools[f"{tool.value}.catalogue"].replace(ENTRIES_SLOT, text)


_READ_LIMITS = {
    ToolName.QUERY_LOGS: MAX_SERVICES,
    ToolName.LOOKUP_KNOWLEDGE: MAX_RUNBOOKS,
    ToolName.QUERY_MYSQL: MAX_COLUMNS_READ,
}


@dataclass(slots=True)
class _Entry:
    description: str
    read_at: float | None = None
    ok: bool = True


class Catalogues:
    """The current tool descriptions with their catalogues, refreshed every ``refresh_seconds``.

    ``descriptions()`` is called once per run; it re-reads only stale catalogues (concurrent
    runs share one refresh) and otherwise costs a clock read and a tuple.
    """

    def __init__(
        self,
        adapters: Mapping[ToolName, Any],
        prompts: PromptSet,
        refresh_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        read_timeout_seconds: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self._prompts = prompts
        self._refresh = refresh_seconds
        self._clock = clock
        self._timeout = read_timeout_seconds
        self._readers: dict[ToolName, Callable[[int], Any]] = {}
        self._entries: dict[ToolName, _Entry] = {}
        for tool in ToolName:
            reader = getattr(adapters.get(tool), "catalogue", None)
            if reader is not None:
                self._readers[tool] = reader
            self._entries[tool] = _Entry(prompts.description(tool.value))
        self._lock = asyncio.Lock()
        self._current = self._snapshot()

    @property
    def prompts(self) -> PromptSet:
        return self._prompts

    async def descriptions(self) -> tuple[str, ...]:
        """The three descriptions (``ToolName`` order) for one run, re-reading stale ones."""
        if not self._stale():
            return self._current
        async with self._lock:
            stale = self._stale()
            if stale:
                await asyncio.gather(*(self._read(tool) for tool in stale))
                self._current = self._snapshot()
            return self._current

    def _snapshot(self) -> tuple[str, ...]:
        return tuple(self._entries[tool].description for tool in ToolName)

    def _stale(self) -> list[ToolName]:
        now = self._clock()
        stale = []
        for tool in self._readers:
            entry = self._entries[tool]
            age = self._refresh if entry.ok else min(self._refresh, _RETRY_FAILED_SECONDS)
            if entry.read_at is None or now - entry.read_at >= age:
                stale.append(tool)
        return stale

    async def _read(self, tool: ToolName) -> None:
        found: Sequence[Any] | None = None
        try:
            async with asyncio.timeout(self._timeout):
                found = await self._readers[tool](_READ_LIMITS[tool])
        except Exception as exc:  # the tool stays usable; the description says so
            log_failure(_log, logging.WARNING, "%s catalogue unavailable (%s)", tool.value, exc=exc)
        entry = self._entries[tool]
        entry.ok = found is not None
        entry.read_at = self._clock()
        catalogue = render_catalogue(self._prompts, tool, found)
        entry.description = self._prompts.description(tool.value, catalogue)
