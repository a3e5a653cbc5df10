"""What every adapter's probe shares: building a :class:`~sre_diag.tools.base.ProbeReport` and the
few texts its reasons are made of (a bounded list of names, an OS error, a URL's host).

A reason never carries a credential, a raw backend response or an exception's text: it is
built from error codes, kinds and what the probe itself counted.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Any

import httpx

from sre_diag.log import failure_reason
from sre_diag.tools.base import ProbeReport, ProbeStatus

__all__ = ["CONNECT_SECONDS", "LISTED", "failed", "hostport", "listed", "ok", "os_reason", "unset"]

CONNECT_SECONDS = 5.0  # one probe's connect (and, for Loki, whole answer) bound
LISTED = 8  # names shown on one line (services, tables, channels)


def ok(detail: str, **facts: Any) -> ProbeReport:
    """The backend works."""
    return ProbeReport(ProbeStatus.OK, detail, facts)


def failed(detail: str, **facts: Any) -> ProbeReport:
    """The backend is configured and does not work."""
    return ProbeReport(ProbeStatus.FAILED, detail, facts)


def unset(detail: str) -> ProbeReport:
    """The backend's setting is unset."""
    return ProbeReport(ProbeStatus.NOT_CONFIGURED, detail)


def listed(names: Sequence[str]) -> str:
    """At most :data:`LISTED` names, then how many more."""
    shown = ", ".join(names[:LISTED])
    return shown + (f", … (+{len(names) - LISTED})" if len(names) > LISTED else "")


def os_reason(exc: OSError) -> str:
    """``ENOENT (No such file or directory)``: the code's name and the OS's own words."""
    return f"{errno.errorcode.get(exc.errno or 0, failure_reason(exc))} ({exc.strerror or 'error'})"


def hostport(url: str) -> str:
    """``host[:port]`` of a URL: never its user, password, path or query."""
    parts = httpx.URL(url)
    return f"{parts.host}:{parts.port}" if parts.port else parts.host
