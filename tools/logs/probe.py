"""How each log source probes itself for ``check``: the folder lists its service folders, Loki
answers its service label's values, an unset source says so.

The Loki probe is ONE bounded GET (:data:`~sre_diag.tools.probing.CONNECT_SECONDS` over
connecting, the headers and every byte of the body, at most :data:`LOKI_BODY_BYTES` decoded);
the label values it shows are cleaned and cut like the tool catalogue's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from sre_diag.http_bounds import AnswerTooLarge, bounded_client
from sre_diag.tools.base import MAX_SERVICES, ProbeReport
from sre_diag.tools.errors import LokiAnswerTooLarge
from sre_diag.tools.plain import clean_entry
from sre_diag.tools.probing import CONNECT_SECONDS, failed, hostport, listed, ok, os_reason, unset

__all__ = [
    "LOKI_BODY_BYTES",
    "probe_folder",
    "probe_loki",
    "probe_unconfigured",
]

LOKI_BODY_BYTES = 1024 * 1024  # a label-values answer, at most
_SERVICE_CHARS = 100  # one label value as shown


def probe_unconfigured() -> ProbeReport:
    """``DIAG_LOGS_SOURCE`` unset."""
    return unset("DIAG_LOGS_SOURCE unset: query_logs answers NOT_CONFIGURED")


# --- a folder ----------------------------------------------------------------------------------


async def probe_folder(folder: Path) -> ProbeReport:
    """The folder exists, is readable and holds service folders (listed in a worker thread)."""
    return await asyncio.to_thread(_log_folder, folder)


def _service_folders(folder: Path) -> list[str]:
    return sorted(e.name for e in folder.iterdir() if e.is_dir() and not e.name.startswith("."))


def _log_folder(folder: Path) -> ProbeReport:
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        return failed(f"log folder {folder} {what}", folder=str(folder))
    try:
        services = _service_folders(folder)
    except OSError as exc:
        return failed(f"log folder {folder} unreadable: {os_reason(exc)}")
    if not services:
        return failed(
            f"log folder {folder}: no service folders (<service>/<YYYY-MM-DD>/<HH>.jsonl)",
            folder=str(folder), services=[],
        )  # fmt: skip
    return ok(
        f"log folder {folder}: {len(services)} services ({listed(services)})",
        folder=str(folder), services=services,
    )  # fmt: skip


# --- Loki --------------------------------------------------------------------------------------


async def _get_capped(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Status and the whole decoded body (chunked, gzip, deflate) of one GET, at most
    :data:`LOKI_BODY_BYTES` decoded (inflated with a bounded output: one compressed chunk can
    never expand past the cap first); ONE bound over connecting, the headers and every byte of
    the body (``sre_diag.http_bounds``; httpx's own timeouts are per read, a trickle never ends)."""
    async with bounded_client(
        max_bytes=LOKI_BODY_BYTES, total_seconds=CONNECT_SECONDS, timeout=CONNECT_SECONDS,
        headers=headers,
    ) as client:  # fmt: skip
        try:
            response = await client.get(url)
        except AnswerTooLarge:
            raise LokiAnswerTooLarge from None
        return response.status_code, response.content if response.status_code == 200 else b""


def _label_values(body: bytes) -> list[str] | None:
    """The label values of a Loki answer, cleaned and bounded; ``None``: not Loki's JSON."""
    try:
        data = json.loads(body).get("data") or []
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(data, list):
        return None
    return [clean_entry(str(v), _SERVICE_CHARS) for v in data[:MAX_SERVICES]]


async def probe_loki(base: str, label: str, org_id: str | None) -> ProbeReport:
    """``GET {base}/loki/api/v1/label/<label>/values``: reachable, and the services it knows."""
    where = hostport(base)
    headers = {"X-Scope-OrgID": org_id} if org_id else {}
    url = base.rstrip("/") + f"/loki/api/v1/label/{label}/values"
    try:
        status, body = await _get_capped(url, headers)
    except (TimeoutError, httpx.TimeoutException):
        return failed(f"Loki at {where}: no answer within {CONNECT_SECONDS:g} s")
    except LokiAnswerTooLarge:
        return failed(f"Loki at {where} answered more than {LOKI_BODY_BYTES} bytes")
    except httpx.HTTPError as exc:
        return failed(f"Loki at {where} unreachable ({type(exc).__name__})")
    if status != 200:
        return failed(f"Loki at {where} answered HTTP {status}")
    values = _label_values(body)
    if values is None:
        return failed(f"Loki at {where} answered something that is not Loki's JSON")
    return ok(
        f"Loki at {where} reachable: {len(values)} services ({listed(values)})",
        loki=where, services=values,
    )  # fmt: skip
