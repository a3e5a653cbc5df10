"""The guard's verdicts: allowed (with the checked tree) or refused (with a stable reason).

:class:`RefusalReason` is short, stable and safe to log and to test against; :class:`Refusal` is
the internal short-circuit the checks raise at the first violation, turned into :class:`Refused`
by :func:`sre_diag.tools.sql.guard.check_sql`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sre_diag.tools.errors import Refusal, RefusalReason

__all__ = ["Allowed", "GuardDecision", "Refusal", "RefusalReason", "Refused"]


@dataclass(frozen=True, slots=True)
class Allowed:
    """The statement may run; ``expression`` is the checked (and normalised) tree."""

    expression: exp.Query


@dataclass(frozen=True, slots=True)
class Refused:
    """The statement must not reach the server; ``detail`` is for logs only."""

    reason: RefusalReason
    detail: str = ""


GuardDecision = Allowed | Refused


