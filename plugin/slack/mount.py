"""Mounting the plugin on a host app: ``register`` builds the run manager and the listeners on an
existing ``AsyncApp`` and returns the :class:`PluginHandle`; the Slack client's retry handlers
and the admin-channel requirement that ``serve`` shares. ``sre_diag.slack`` re-exports these
names lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.errors import ConfigError
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings
from sre_diag.slack.jobs import JobQueue
from sre_diag.slack.listeners import Listeners, request_scope
from sre_diag.slack.messages import MessageDiagnosis
from sre_diag.slack.metrics import Metrics
from sre_diag.slack.progress import StatusBudget
from sre_diag.slack.retries import guard_retry_handlers
from sre_diag.slack.runs import DEFAULT_LOCK_TTL_SECONDS, RunManager
from sre_diag.slack.state import build_state

__all__ = ["PluginHandle", "add_retry_handlers", "register", "require_admin_channels"]


@dataclass(frozen=True, slots=True)
class PluginHandle:
    """What ``register`` returns: the run manager, to drain and close on shutdown, and the
    app's metrics (``metrics.render()`` is the Prometheus text ``GET /metrics`` serves)."""

    manager: RunManager
    listeners: Listeners
    metrics: Metrics
    messages: MessageDiagnosis
    """The "Diagnose this" shortcut and the alert listener."""

    async def drain(self, timeout_seconds: float | None = None) -> None:
        await self.manager.drain(timeout_seconds)

    async def close(self) -> None:
        await self.messages.aclose()
        await self.manager.close()


def add_retry_handlers(client: AsyncWebClient) -> None:
    """429 retries (honouring Retry-After) for every call; 5xx and connection retries only
    for calls that are safe to repeat (never ``chat.postMessage``: see
    :mod:`sre_diag.slack.retries`). Replaces the client's handlers in place."""
    guard_retry_handlers(client)


def require_admin_channels(settings: Settings) -> None:
    """``ConfigError`` when ``DIAG_ADMIN_CHANNELS`` is empty: the bot would act nowhere (``serve``
    and ``register`` refuse it alike, CONTRACTS §8)."""
    if not settings.admin_channels:
        raise ConfigError(
            "DIAG_ADMIN_CHANNELS is empty: the bot would act nowhere; set comma-separated "
            "channel IDs such as C0123ABC,G0123ABC"
        )


def register(
    app: AsyncApp,
    settings: Settings | None = None,
    *,
    harness: Harness | None = None,
    status_interval_seconds: float = 1.0,
    lock_ttl_seconds: float = DEFAULT_LOCK_TTL_SECONDS,
    status_budget: StatusBudget | None = None,
    replay: bool = False,
    metrics: Metrics | None = None,
    queue: JobQueue | None = None,
) -> PluginHandle:
    """Add this product's listeners to ``app``; the caller keeps running the app: mentions,
    Cancel (confirmed), the replay shortcut, the "Diagnose this" shortcut, alerts from
    ``DIAG_ALERT_SOURCES``, and each answer's Evidence and 👍 / 👎 buttons.

    ``status_budget`` is this process's share of Slack's ``chat.update`` tier per workspace
    (default 40 a minute plus a burst of 5): with several replicas, give each its share.
    ``replay=True`` marks every run this handle starts as a replay (``python -m sre_diag replay``).
    ``metrics``: where runs and Slack events are counted (default: a registry of this
    handle's own, never prometheus_client's global one).

    Raises ``ConfigError`` when ``DIAG_ADMIN_CHANNELS`` is empty, as ``serve`` does: a plugin
    mounted where it may act nowhere is a setting mistake, not a silent no-op.
    """
    from sre_diag.wiring import build_harness

    settings = settings or Settings()
    require_admin_channels(settings)
    harness = harness or build_harness(settings)
    redis_url = settings.redis_url.get_secret_value() if settings.redis_url else None
    metrics = metrics or Metrics()
    manager = RunManager(
        harness,
        settings,
        build_state(redis_url),
        status_interval_seconds=status_interval_seconds,
        lock_ttl_seconds=lock_ttl_seconds,
        status_budget=status_budget,
        replay=replay,
        hooks=[metrics.hook()],
        queue=queue,
    )
    metrics.watch(
        in_flight=lambda: manager.in_flight,
        queued=lambda: manager.queued,
        audit_lost=lambda: manager.harness.audit_records_lost,
    )
    add_retry_handlers(app.client)
    listeners = Listeners(
        manager, settings, on_event=metrics.slack_event, on_vote=metrics.feedback_vote
    )
    listeners.register(app)
    messages = MessageDiagnosis(
        manager, settings, scope_of=request_scope, on_event=metrics.slack_event
    )
    messages.register(app)
    return PluginHandle(manager=manager, listeners=listeners, metrics=metrics, messages=messages)
