"""Evidence on demand: the observations an answer rests on, kept for its Evidence button.

A run's :class:`EvidenceCollector` (a step hook) keeps each READY observation exactly as the
model was given it (bounded and redacted by the harness, CONTRACTS §4) and each log check's
window. When the answer is posted, :func:`evidence_record` keeps the observations of the checks
the answer cites (for a stop or a failure: its READY checks) in the shared state for
``DIAG_EVIDENCE_TTL_SECONDS``, under the request's scope, so any replica can answer the button.
They never enter the audit record.

With ``DIAG_GRAFANA_URL`` / ``DIAG_RUNBOOK_URL`` set, the record also keeps each check's links
to its source (``sre_diag.slack.links``), built from the check's typed input and our adapter's
output when the answer is posted.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sre_diag.contract.result import ExecutionResult
from sre_diag.contract.text import EvidenceCheck
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import InvocationStatus
from sre_diag.log import log_failure
from sre_diag.slack.links import Link, LinkMaker, dump_links, load_links

if TYPE_CHECKING:
    from sre_diag.harness.ledger import Invocation
    from sre_diag.harness.state import RunState

__all__ = [
    "EvidenceCollector",
    "EvidenceRecord",
    "Window",
    "evidence_ids",
    "evidence_key",
    "evidence_record",
]

_log = logging.getLogger(__name__)

Window = tuple[datetime, datetime]
"""A log check's window (start, end), aware datetimes."""

_MAX_KEPT = 50
"""Observations one run keeps at most (the tool budget keeps real runs far below)."""


class EvidenceCollector(StepHook):
    """One run's READY observations (parsed) and log windows, by tool call id."""

    def __init__(self) -> None:
        self.observations: dict[str, dict[str, Any]] = {}
        self.windows: dict[str, Window] = {}
        self.inputs: dict[str, dict[str, Any]] = {}
        """Each READY check's validated business input (what its links are built from)."""

    def on_observation(self, ctx: RunState, invocation: Invocation, observation: str) -> None:
        if invocation.status is not InvocationStatus.READY or len(self.observations) >= _MAX_KEPT:
            return
        parsed = json.loads(observation)
        if isinstance(parsed, dict) and parsed.get("evidence_status") == "READY":
            self.observations.setdefault(invocation.tool_call_id, parsed)
            if invocation.business_input is not None:
                self.inputs.setdefault(invocation.tool_call_id, dict(invocation.business_input))
        window = _window(invocation.business_input)
        if window is not None:
            self.windows.setdefault(invocation.tool_call_id, window)


def _window(business: dict[str, Any] | None) -> Window | None:
    if not business or not isinstance(business.get("start"), str):
        return None
    try:
        start = datetime.fromisoformat(business["start"])
        end = datetime.fromisoformat(str(business.get("end")))
    except ValueError:
        return None
    if start.tzinfo is None or end.tzinfo is None:
        return None
    return start, end


def evidence_ids(result: ExecutionResult) -> list[str]:
    """The checks an answer's evidence view shows, in the order they ran: those it cites (a
    Draft), or its READY checks (a stop or a failure)."""
    checks = result.progress.checks if result.progress else ()
    ready = {c.tool_call_id for c in checks if c.status == InvocationStatus.READY.value}
    draft = result.draft
    if draft is None:
        ids = [c.tool_call_id for c in checks]
    else:
        ids = list(draft.conclusion.evidence_tool_call_ids) if draft.conclusion else []
        for item in draft.analysis:
            ids += getattr(item.evidence, "tool_call_ids", ())
    cited = set(ids)
    return [i for i in dict.fromkeys(c.tool_call_id for c in checks) if i in cited & ready]


def evidence_key(scope: str, run_id: str) -> str:
    return f"{scope}:{run_id}"


class EvidenceRecord:
    """What one answer's Evidence button shows, and where it may be shown."""

    def __init__(
        self,
        run_id: str,
        channel: str,
        thread_ts: str,
        checks: list[EvidenceCheck],
        links: dict[str, list[Link]] | None = None,
        windows: dict[str, Window] | None = None,
    ) -> None:
        self.run_id = run_id
        self.channel = channel
        self.thread_ts = thread_ts
        self.checks = checks
        self.links = links or {}
        """Each check's links to its source, by tool call id (see ``sre_diag.slack.links``)."""
        self.windows = windows or {}
        """Each log check's window, by tool call id (shown as Slack dates)."""

    def dumps(self) -> str:
        return json.dumps(
            {
                "run_id": self.run_id,
                "channel": self.channel,
                "thread_ts": self.thread_ts,
                "checks": [
                    {
                        "number": c.number,
                        "tool_call_id": c.tool_call_id,
                        "tool": c.tool,
                        "scope": c.scope,
                        "observation": c.observation,
                    }
                    for c in self.checks
                ],
                "links": dump_links(self.links),
                "windows": {
                    key: [int(start.timestamp()), int(end.timestamp())]
                    for key, (start, end) in self.windows.items()
                },
            },
            ensure_ascii=False,
        )

    @classmethod
    def loads(cls, text: str) -> EvidenceRecord | None:
        """The record kept as ``text``; None if it is not one (never raises)."""
        try:
            data = json.loads(text)
            checks = [
                EvidenceCheck(
                    number=int(c["number"]),
                    tool_call_id=str(c["tool_call_id"]),
                    tool=str(c["tool"]),
                    scope=c["scope"] if isinstance(c.get("scope"), str) else None,
                    observation=dict(c["observation"]),
                )
                for c in data["checks"]
            ]
            links = load_links(data.get("links"))
            return cls(
                str(data["run_id"]),
                str(data["channel"]),
                str(data["thread_ts"]),
                checks,
                links,
                _load_windows(data.get("windows")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log_failure(_log, logging.WARNING, "kept evidence unreadable: %s", exc=exc)
            return None


def _load_windows(data: object) -> dict[str, Window]:
    """Windows kept with an answer's evidence (epoch seconds); anything else is dropped."""
    if not isinstance(data, dict):
        return {}
    loaded: dict[str, Window] = {}
    for key, pair in data.items():
        if isinstance(key, str) and isinstance(pair, list) and len(pair) == 2:
            start, end = pair
            if all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**34
                   for v in (start, end)) and start < end:  # fmt: skip
                loaded[key] = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    return loaded


def evidence_record(
    result: ExecutionResult,
    collector: EvidenceCollector,
    channel: str,
    thread_ts: str,
    links: LinkMaker | None = None,
) -> EvidenceRecord | None:
    """The record to keep for ``result``'s answer (with each check's links when ``links``
    makes any); None when it cites nothing kept."""
    checks = result.progress.checks if result.progress else ()
    numbers: dict[str, int] = {}
    for n, check in enumerate(checks, 1):
        numbers.setdefault(check.tool_call_id, n)
    kept = []
    for tool_call_id in evidence_ids(result):
        observation = collector.observations.get(tool_call_id)
        if observation is None:
            continue
        check = checks[numbers[tool_call_id] - 1]
        kept.append(
            EvidenceCheck(
                number=numbers[tool_call_id],
                tool_call_id=tool_call_id,
                tool=check.tool,
                scope=check.scope,
                observation=observation,
            )
        )
    if not kept:
        return None
    made: dict[str, list[Link]] = {}
    if links is not None and links.enabled:
        for shown in kept:
            business = collector.inputs.get(shown.tool_call_id)
            made[shown.tool_call_id] = links.of(shown.tool, business, shown.observation)
    windows = {c.tool_call_id: w for c in kept if (w := collector.windows.get(c.tool_call_id))}
    return EvidenceRecord(result.run_id, channel, thread_ts, kept, made, windows)
