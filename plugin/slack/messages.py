"""Diagnosing a message (CONTRACTS §10): the "Diagnose this" message shortcut
(``diagnose_message``) and automatic runs on the new top-level messages of alert bots
(``DIAG_ALERT_SOURCES``, events ``message.channels`` / ``message.groups``).

Both start the same run as a mention (``RunManager.submit``: the concurrency limit, the queue
and its position, progress and Cancel, Evidence, 👍 / 👎, the worker queue, fencing, audit),
answering in the message's thread; their audit records and ``diag_runs_total`` say
``shortcut`` or ``alert``. A mention in that thread afterwards is a follow-up with the frozen
previous turn, as in any thread. The Query is the message's visible text as posted
(``alerts.message_query``); over ``DIAG_MAX_QUERY_BYTES`` it is refused with one visible line in
the thread, never cut. ``asked_at`` is the message's ``ts``.

The shortcut outside an admin channel, or on one of this bot's own messages (its answers are
replayed with *Replay diagnosis*), is refused with an ephemeral note to whoever clicked it.

An alert is acknowledged like every message event (Slack retries what is not), and runs only
when :func:`alerts.gate_alert` lets it; an alert storm does not become a run storm: an alert
whose pattern already started a run in the channel within ``DIAG_ALERT_COOLDOWN_SECONDS``, or
that comes after ``DIAG_ALERT_MAX_RUNS_PER_HOUR`` automatic runs in its channel within the last
hour, is counted on its pattern's ONE pointer message (:mod:`sre_diag.slack.pointers`: posted
once, then edited with the count), never one post per alert. A resolved / OK notification
never starts a run: it is counted on its pattern's pointer when there is one. The cooldown, the
runs of the hour and the pointers live in the shared state, so every replica agrees with
``DIAG_REDIS_URL``.

Slack's retry of an event is processed when its first delivery never was (a front restarting):
events are deduplicated by ``event_id``, not by the retry header. A shortcut request is
processed once per ``trigger_id`` (a replayed request starts nothing).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.audit.trigger import Trigger
from sre_diag.contract.request import slack_ts_moment
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.alerts import (
    AlertIgnore,
    cooldown_key,
    gate_alert,
    is_resolved,
    message_query,
)
from sre_diag.slack.gate import IgnoreReason, retry_number, slack_ts
from sre_diag.slack.metrics import EventResult
from sre_diag.slack.mrkdwn import slack_date
from sre_diag.slack.pointers import Pointer, PointerBoard
from sre_diag.slack.posting import say
from sre_diag.slack.run_request import RunRequest
from sre_diag.slack.runs import RunManager
from sre_diag.slack.state import PointerNote
from sre_diag.slack.turns import latest_turn

__all__ = [
    "DIAGNOSE_CALLBACK_ID",
    "REFUSE_NOT_ADMIN",
    "REFUSE_OWN_MESSAGE",
    "MessageDiagnosis",
    "cap_pointer",
    "cooldown_pointer",
    "more_alerts",
    "too_large",
]

_log = logging.getLogger(__name__)

DIAGNOSE_CALLBACK_ID = "diagnose_message"
_EVENT_TTL_SECONDS = 3600.0
_HOUR = 3600.0
_PERMALINKS_KEPT = 1000
_PERMALINK = re.compile(r"https://[!#-;=?-\[\]_a-z~]{1,500}")

REFUSE_NOT_ADMIN = (
    "I cannot diagnose messages in this channel: I act only in the channels my operators listed."
)
REFUSE_OWN_MESSAGE = (
    "That is one of my own messages: use the *Replay diagnosis* shortcut to run its question again."
)
NO_TEXT = "I cannot diagnose this message: it shows no text I could read."

EventCounter = Callable[[EventResult, str], None]
ScopeOf = Callable[[dict[str, Any], AsyncBoltContext], str]


def too_large(size: int, limit: int) -> str:
    """The one-line refusal of a message whose text is over ``DIAG_MAX_QUERY_BYTES``."""
    return (
        f"I cannot diagnose this message: its text is {size:,} bytes, over the {limit:,} I "
        "accept (DIAG_MAX_QUERY_BYTES); nothing was cut and nothing was run."
    )


def cooldown_pointer(holder_ts: str, permalink: str | None, cooldown_seconds: float) -> str:
    """The one-line pointer an alert within the cooldown gets: where its diagnosis is."""
    minutes = cooldown_seconds / 60
    window = f"{minutes:g} minutes" if minutes >= 1 else f"{cooldown_seconds:g} seconds"
    moment = slack_ts_moment(holder_ts)
    when = f"the alert of {slack_date(moment)}" if moment is not None else "an earlier alert"
    where = f"<{permalink}|in its thread>" if permalink else f"in the thread of {when}"
    return (
        f"An alert like this one was diagnosed {where} ({when}, ts {holder_ts}); no new "
        f"diagnosis within the {window} cooldown."
    )


def cap_pointer(limit: int) -> str:
    """The pointer of the alerts of one pattern that came past the channel's hourly cap."""
    return (
        f"Not diagnosed automatically: {limit} automatic diagnoses were started in this "
        "channel within the last hour (DIAG_ALERT_MAX_RUNS_PER_HOUR). Use *Diagnose this* on "
        "an alert to start one."
    )


def more_alerts(note: PointerNote) -> str:
    """The count line a pointer gains when later alerts of its pattern come ("" at first)."""
    if note.count <= 1:
        return ""
    moment = slack_ts_moment(note.since_ts)
    since = f" since {slack_date(moment)}" if moment is not None else ""
    return f"\n+{note.count - 1} more alerts of this pattern{since}."


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class MessageDiagnosis:
    """The shortcut and the alert listener, bound to one RunManager."""

    def __init__(
        self,
        manager: RunManager,
        settings: Settings,
        *,
        scope_of: ScopeOf,
        on_event: EventCounter,
    ) -> None:
        self.manager = manager
        self.scope_of = scope_of
        self.count = on_event
        self.admin_channels = frozenset(settings.admin_channels)
        self.sources = frozenset(settings.alert_sources)
        self.cooldown_seconds = settings.alert_cooldown_seconds
        self.max_runs_per_hour = settings.alert_max_runs_per_hour
        self.max_query_bytes = settings.max_query_bytes
        self.ignored: list[AlertIgnore] = []
        self.pointers = PointerBoard(manager.state)
        self._permalinks: dict[str, str | None] = {}

    async def aclose(self) -> None:
        await self.pointers.aclose()

    def register(self, app: AsyncApp) -> None:
        app.shortcut(DIAGNOSE_CALLBACK_ID)(self.on_shortcut)
        app.event("message")(self.on_message)

    # -- the shortcut ----------------------------------------------------------------------

    async def on_shortcut(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        user = _str_or_none(_mapping(body.get("user")).get("id"))
        message = _mapping(body.get("message"))
        ts = slack_ts(message.get("ts"))
        thread_ts = slack_ts(message.get("thread_ts") or ts)
        if channel is None or ts is None or thread_ts is None:
            _log.warning("ignored diagnose shortcut: malformed (no channel or message ts)")
            self.count(EventResult.IGNORED, IgnoreReason.MALFORMED.value)
            return
        if channel not in self.admin_channels:
            _log.info("refused diagnose shortcut outside the admin channels")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            await self._ephemeral(client, channel, user, thread_ts, REFUSE_NOT_ADMIN)
            return
        if context.bot_id and message.get("bot_id") == context.bot_id:
            self.count(EventResult.DECLINED, "OWN_MESSAGE")
            await self._ephemeral(client, channel, user, thread_ts, REFUSE_OWN_MESSAGE)
            return
        trigger = _str_or_none(body.get("trigger_id"))
        scope = self.scope_of(body, context)
        if trigger is not None and not await self._first_delivery(
            client, scope, f"shortcut:{trigger}", channel, thread_ts
        ):
            return
        previous = None
        if thread_ts != ts:  # a reply in a thread: the thread's latest answer, as for a mention
            previous = await latest_turn(client, channel, thread_ts, context.bot_id, before=ts)
        request = RunRequest(
            client=client,
            channel=channel,
            thread_ts=thread_ts,
            query=message_query(message),
            previous_turn=previous,
            requested_by=user,
            scope=scope,
            asked_at=slack_ts_moment(ts),
            trigger=Trigger.SHORTCUT,
        )
        await self._submit(request, "SHORTCUT")

    async def _submit(self, request: RunRequest, kind: str) -> bool:
        """Start the run unless its Query is empty or too large (said in one line)."""
        size = len(request.query.encode("utf-8", "surrogatepass"))
        if not request.query.strip():
            self.count(EventResult.DECLINED, "NO_TEXT")
            await say(request, NO_TEXT)
            return False
        if size > self.max_query_bytes:
            _log.info("refused a %s: its text is %d bytes", kind.lower(), size)
            self.count(EventResult.DECLINED, "QUERY_TOO_LARGE")
            await say(request, too_large(size, self.max_query_bytes))
            return False
        started = await self.manager.submit(request)
        if started is None:
            self.count(EventResult.DECLINED, "NOT_STARTED")
            return False
        self.count(EventResult.ACCEPTED, kind)
        return True

    async def _ephemeral(
        self, client: AsyncWebClient, channel: str, user: str | None, thread_ts: str, text: str
    ) -> None:
        if user is None:
            return
        try:
            await client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=thread_ts, text=text
            )
        except Exception as exc:  # Slack failures are logged, never raised into Bolt
            log_failure(_log, logging.WARNING, "could not post the shortcut refusal: %s", exc=exc)

    # -- alerts ----------------------------------------------------------------------------

    def _ignore(self, reason: AlertIgnore | IgnoreReason) -> None:
        if isinstance(reason, AlertIgnore):
            self.ignored.append(reason)
            del self.ignored[:-1000]
        self.count(EventResult.IGNORED, reason.value)
        # Every message of the channels the bot is in arrives here (its own status updates
        # and answers too): only a malformed one is worth more than a debug line.
        loud = reason in {AlertIgnore.MALFORMED, IgnoreReason.SLACK_RETRY}
        _log.log(logging.INFO if loud else logging.DEBUG, "ignored message: %s", reason.value)

    async def on_message(
        self,
        ack: AsyncAck,
        body: dict[str, Any],
        event: dict[str, Any],
        request: AsyncBoltRequest,
        client: AsyncWebClient,
        context: AsyncBoltContext,
    ) -> None:
        await ack()
        event = _mapping(event)
        event_id = body.get("event_id")
        if not isinstance(event_id, str) and retry_number(request.headers) > 0:
            self._ignore(IgnoreReason.SLACK_RETRY)  # no id to tell whether it was seen
            return
        reason = gate_alert(event, self.sources, self.admin_channels, context.bot_id)
        if reason is not None:
            self._ignore(reason)
            return
        channel: str = event["channel"]
        ts: str = event["ts"]  # the gate checked both
        scope = self.scope_of(body, context)
        # Slack retries an event whose delivery failed (a front restarting): the event id,
        # not the retry header, says whether it was processed.
        if isinstance(event_id, str) and not await self._first_delivery(
            client, scope, event_id, channel, ts
        ):
            return
        request_ = RunRequest(
            client=client,
            channel=channel,
            thread_ts=ts,
            query=message_query(event),
            scope=scope,
            asked_at=slack_ts_moment(ts),
            trigger=Trigger.ALERT,
        )
        await self._alert(request_)

    async def _first_delivery(
        self, client: AsyncWebClient, scope: str, event_id: str, channel: str, ts: str
    ) -> bool:
        try:
            fresh = await self.manager.state.claim_event(f"{scope}:{event_id}", _EVENT_TTL_SECONDS)
        except Exception as exc:
            log_failure(
                _log, logging.ERROR, "shared state unreachable, alert declined: %s", exc=exc
            )
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self.manager.say_unavailable(client, channel, ts)
            return False
        if not fresh:
            self._ignore(IgnoreReason.DUPLICATE_EVENT)
        return fresh

    async def _alert(self, request: RunRequest) -> None:
        """Resolved: counted on the pointer. Else the cooldown by pattern, the channel's hourly
        cap, then the run (the cooldown is given back if it did not start: a refused or
        declined alert must not silence the next one)."""
        if not request.query.strip():
            await self._submit(request, "ALERT")
            return
        key = cooldown_key(request.scope, request.channel, request.query)
        if is_resolved(request.query):
            await self._resolved(request, key)
            return
        holder = await self._claim(request, key)
        if holder is None:
            return
        if holder:
            self._ignore_cooldown()
            await self._point(request, key, holder)
            return
        if not await self._admit(request):
            await self._forget(key, request.thread_ts)
            self.count(EventResult.DECLINED, "ALERT_RUN_CAP")
            await self.pointers.point(self._pointer(request, f"{key}:cap", _HOUR), self._cap_text())
            return
        if not await self._submit(request, "ALERT"):
            await self._forget(key, request.thread_ts)

    async def _resolved(self, request: RunRequest, key: str) -> None:
        """A resolved notification starts nothing; it counts on its pattern's pointer."""
        self.count(EventResult.IGNORED, "ALERT_RESOLVED")
        try:
            holder = slack_ts(await self.manager.state.alert_holder(key))
        except Exception as exc:
            log_failure(_log, logging.WARNING, "alert cooldown not read: %s", exc=exc)
            return
        if holder is not None:
            await self.pointers.recount(
                self._pointer(request, f"{key}:{holder}"), self._cooldown_text(request, holder)
            )

    async def _claim(self, request: RunRequest, key: str) -> str | None:
        """The cooldown's holder ("" when this alert took it); None when declined here."""
        if self.cooldown_seconds <= 0:
            return ""
        try:
            holder = await self.manager.state.claim_alert(
                key, request.thread_ts, self.cooldown_seconds
            )
        except Exception as exc:
            log_failure(
                _log, logging.ERROR, "shared state unreachable, alert declined: %s", exc=exc
            )
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self.manager.say_unavailable(request.client, request.channel, request.thread_ts)
            return None
        if holder is None:
            return ""
        # The earlier run's mark expired a moment ago: point at this alert's own thread.
        return slack_ts(holder) or request.thread_ts

    async def _admit(self, request: RunRequest) -> bool:
        """Whether the channel's hourly cap of automatic runs lets this one start."""
        try:
            return await self.manager.state.admit_alert_run(
                f"{request.scope}:{request.channel}",
                request.thread_ts,
                self.max_runs_per_hour,
                _HOUR,
            )
        except Exception as exc:  # the cap is a guard: without the state, the run decides
            log_failure(_log, logging.WARNING, "alert run cap not read: %s", exc=exc)
            return True

    async def _forget(self, key: str, thread_ts: str) -> None:
        if self.cooldown_seconds <= 0:
            return
        try:
            await self.manager.state.forget_alert(key, thread_ts)
        except Exception as exc:  # it expires with its TTL
            log_failure(_log, logging.WARNING, "alert cooldown not given back: %s", exc=exc)

    def _ignore_cooldown(self) -> None:
        self.count(EventResult.IGNORED, "ALERT_COOLDOWN")
        _log.info("alert within its pattern's cooldown: counted on its pointer")

    def _pointer(self, request: RunRequest, key: str, ttl: float | None = None) -> Pointer:
        ttl = ttl if ttl is not None else max(self.cooldown_seconds, 60.0)
        return Pointer(key, request.client, request.channel, request.thread_ts, ttl)

    async def _point(self, request: RunRequest, key: str, holder_ts: str) -> None:
        await self.pointers.point(
            self._pointer(request, f"{key}:{holder_ts}"), self._cooldown_text(request, holder_ts)
        )

    def _cooldown_text(
        self, request: RunRequest, holder_ts: str | None = None
    ) -> Callable[[PointerNote], Awaitable[str]]:
        async def text(note: PointerNote) -> str:
            ts = holder_ts or note.since_ts
            permalink = await self._permalink(request.client, request.channel, ts)
            return cooldown_pointer(ts, permalink, self.cooldown_seconds) + more_alerts(note)

        return text

    def _cap_text(self) -> Callable[[PointerNote], Awaitable[str]]:
        async def text(note: PointerNote) -> str:
            return cap_pointer(self.max_runs_per_hour) + more_alerts(note)

        return text

    async def _permalink(self, client: AsyncWebClient, channel: str, ts: str) -> str | None:
        """Slack's permalink of the earlier alert, if Slack gives one in a safe shape (looked
        up once per alert and process)."""
        key = f"{channel}:{ts}"
        if key in self._permalinks:
            return self._permalinks[key]
        try:
            response = await client.chat_getPermalink(channel=channel, message_ts=ts)
        except Exception as exc:
            log_failure(_log, logging.INFO, "no permalink for the earlier alert: %s", exc=exc)
            return None
        link = response.get("permalink")
        found = link if isinstance(link, str) and _PERMALINK.fullmatch(link) else None
        if len(self._permalinks) >= _PERMALINKS_KEPT:
            self._permalinks.clear()
        self._permalinks[key] = found
        return found
