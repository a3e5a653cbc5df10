"""Prometheus metrics of one Slack app (CONTRACTS §8), in a registry of its own.

Every ``register(app)`` gets its own ``Metrics`` (never prometheus_client's global registry), so
several apps in one process, and tests, never share a series. Counted from:

- the harness's step hooks (``MetricsHook``): one ``diag_runs_total{outcome,reason,trigger}``
  (``trigger``: ``mention``, ``shortcut``, ``alert``, ``replay``, see ``sre_diag.audit.trigger``;
  ``none`` for a run started outside Slack) and one
  ``diag_run_duration_seconds`` observation per run, its model calls and tokens (from the run's
  usage, as the Execution Result reports them), ``diag_token_overruns_total`` when its final
  round went over the token budget, and each canonical tool invocation by tool and status;
- the Slack listeners (``slack_event``): every event accepted, ignored or declined, with why;
  and every feedback vote cast or changed on an answer (``feedback_vote``: ``up`` / ``down``);
- live gauges read at scrape time: runs in flight and queued, audit records lost.

Every label value comes from a closed set (outcomes, stop reasons, failure codes, tool names,
invocation statuses, the gate's reasons): the cardinality is bounded whatever Slack or the
model sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from sre_diag.audit.trigger import Trigger, current_trigger
from sre_diag.contract.result import FailureCode, Outcome
from sre_diag.errors import StopReason
from sre_diag.harness.hooks import StepHook
from sre_diag.harness.ledger import InvocationStatus
from sre_diag.tools.base import ToolName

if TYPE_CHECKING:
    from sre_diag.contract.result import ExecutionResult
    from sre_diag.harness.ledger import Invocation
    from sre_diag.harness.state import RunState

__all__ = ["CONTENT_TYPE", "FEEDBACK_VOTES", "EventResult", "Metrics", "MetricsHook", "run_reason"]

FEEDBACK_VOTES = ("up", "down")

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The text exposition format every Prometheus version scrapes."""

# Runs last from well under a second (a scripted model) to the deadline (120 s by default).
_DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0, 180.0, 300.0)


class EventResult(StrEnum):
    """What the listeners did with a Slack event (the ``result`` label)."""

    ACCEPTED = "accepted"
    """A run was started (``reason``: the kind of event: MENTION, REPLAY, SHORTCUT, ALERT) or
    a Cancel passed on (CANCEL)."""
    IGNORED = "ignored"
    """Acknowledged and dropped on purpose (``reason``: the gate's reason)."""
    DECLINED = "declined"
    """Meant for us but not started (``reason``: STATE_UNAVAILABLE, NOT_STARTED — a busy
    thread, a draining process — or the replay shortcut's refusal)."""


def run_reason(result: ExecutionResult) -> str:
    """The ``reason`` label of a run: the stop reason, the failure code, or for a Draft whether
    it concluded."""
    if result.outcome is Outcome.STOPPED and result.stop_reason is not None:
        return result.stop_reason.value
    if result.outcome is Outcome.FAILED and result.failure is not None:
        return result.failure.code.value
    if result.draft is not None and result.draft.conclusion is not None:
        return "CONCLUDED"
    return "NO_CONCLUSION"


class _Live(Collector):
    """Values owned elsewhere (the run manager, the audit writer), read at scrape time."""

    def __init__(self) -> None:
        self.in_flight: Callable[[], int] = lambda: 0
        self.queued: Callable[[], int] = lambda: 0
        self.audit_lost: Callable[[], int] = lambda: 0
        self.jobs: Callable[[], tuple[int, int, int] | None] = lambda: None

    def collect(self) -> Iterable[Metric]:
        jobs = self.jobs()
        if jobs is not None:
            waiting, taken, claimed = jobs
            queued = GaugeMetricFamily(
                "diag_jobs_queued",
                "Jobs on the run queue: waiting for a worker, or taken and not acknowledged.",
                labels=["state"],
            )
            queued.add_metric(["waiting"], waiting)
            queued.add_metric(["taken"], taken)
            yield queued
            yield CounterMetricFamily(
                "diag_jobs_claimed",
                "Jobs whose worker vanished, claimed by another worker and answered WORKER_LOST.",
                value=claimed,
            )
        yield GaugeMetricFamily(
            "diag_runs_in_flight",
            "Runs started and not finished (including those queued for a slot).",
            value=self.in_flight(),
        )
        yield GaugeMetricFamily(
            "diag_runs_queued", "Runs waiting for a concurrency slot.", value=self.queued()
        )
        yield CounterMetricFamily(
            "diag_audit_records_lost",
            "Audit records not written (sink failed or too slow, queue full, closed).",
            value=self.audit_lost(),
        )


class Metrics:
    """The metrics of one app; ``render()`` is what ``GET /metrics`` answers."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Counter(
            "diag_runs",
            "Runs ended, by outcome, reason and trigger (mention, shortcut, alert, replay).",
            ["outcome", "reason", "trigger"],
            registry=r,
        )
        self.run_duration = Histogram(
            "diag_run_duration_seconds",
            "Wall clock of a run, start to result.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter("diag_model_calls", "Model requests made by runs.", registry=r)
        self.tokens = Counter(
            "diag_tokens", "Model tokens used by runs (prompt, completion).", ["kind"], registry=r
        )
        self.token_overruns = Counter(
            "diag_token_overruns",
            "Runs whose final round's reported usage went over DIAG_MAX_TOTAL_TOKENS (the Draft"
            " of that authorized round is kept).",
            registry=r,
        )
        self.tool_calls = Counter(
            "diag_tool_calls",
            "Canonical tool invocations, by tool and status (READY, ERROR, REJECTED).",
            ["tool", "status"],
            registry=r,
        )
        self.slack_events = Counter(
            "diag_slack_events",
            "Slack events handled, by result (accepted, ignored, declined) and reason.",
            ["result", "reason"],
            registry=r,
        )
        self.feedback = Counter(
            "diag_feedback",
            "Feedback votes on answers (a first vote or a changed one), by vote (up, down).",
            ["vote"],
            registry=r,
        )
        self._live = _Live()
        r.register(self._live)
        self._initialise()

    def _initialise(self) -> None:
        """Known series start at 0, so a rate() has a baseline before the first event."""
        for kind in ("prompt", "completion"):
            self.tokens.labels(kind=kind)
        for tool in ToolName:
            for status in InvocationStatus:
                self.tool_calls.labels(tool=tool.value, status=status.value)
        ended = [(Outcome.DRAFT.value, r) for r in ("CONCLUDED", "NO_CONCLUSION")]
        ended += [(Outcome.STOPPED.value, stop.value) for stop in StopReason]
        ended += [(Outcome.FAILED.value, code.value) for code in FailureCode]
        for trigger in Trigger:
            for outcome, reason in ended:
                self.runs.labels(outcome=outcome, reason=reason, trigger=trigger.value)
        for kind in ("MENTION", "CANCEL", "REPLAY", "SHORTCUT", "ALERT"):
            self.slack_events.labels(result=EventResult.ACCEPTED.value, reason=kind)
        for vote in FEEDBACK_VOTES:
            self.feedback.labels(vote=vote)

    def watch(
        self,
        *,
        in_flight: Callable[[], int],
        queued: Callable[[], int],
        audit_lost: Callable[[], int],
    ) -> None:
        """Where the live values are read (``register`` points them at its run manager)."""
        self._live.in_flight, self._live.queued, self._live.audit_lost = (
            in_flight,
            queued,
            audit_lost,
        )

    def watch_jobs(self, depth: Callable[[], tuple[int, int, int] | None]) -> None:
        """Where the run queue's depth is read: (waiting, taken, claimed so far), or None
        before it was first read (``serve --workers``)."""
        self._live.jobs = depth

    def hook(self) -> MetricsHook:
        return MetricsHook(self)

    def slack_event(self, result: EventResult, reason: str) -> None:
        """One Slack event handled (the listeners' counting callback)."""
        self.slack_events.labels(result=result.value, reason=reason).inc()

    def feedback_vote(self, vote: str) -> None:
        """One vote cast or changed (``up`` or ``down``; anything else is not counted)."""
        if vote in FEEDBACK_VOTES:
            self.feedback.labels(vote=vote).inc()

    def run_ended(self, result: ExecutionResult) -> None:
        trigger = current_trigger()
        self.runs.labels(
            outcome=result.outcome.value,
            reason=run_reason(result),
            trigger=trigger.value if trigger is not None else "none",
        ).inc()
        usage = result.usage
        self.run_duration.observe(max(usage.elapsed_ms, 0) / 1000.0)
        self.model_calls.inc(max(usage.model_calls, 0))
        self.tokens.labels(kind="prompt").inc(max(usage.prompt_tokens, 0))
        self.tokens.labels(kind="completion").inc(max(usage.completion_tokens, 0))

    def tool_invoked(self, invocation: Invocation) -> None:
        self.tool_calls.labels(
            tool=ToolName(invocation.tool).value, status=invocation.status.value
        ).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of this app's registry."""
        return generate_latest(self.registry)


class MetricsHook(StepHook):
    """Counts a run's end and its tool invocations into ``Metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def on_tool_invocation(self, ctx: RunState, invocation: Invocation) -> None:
        self._metrics.tool_invoked(invocation)

    def on_result(self, ctx: RunState, result: ExecutionResult) -> None:
        self._metrics.run_ended(result)
        if ctx.usage.overrun_tokens > 0:
            self._metrics.token_overruns.inc()
