"""The Bolt listeners: ``app_mention`` (the gate, then a background run), the Cancel button,
the ``replay_diagnosis`` message shortcut, and an answer's Evidence and 👍 / 👎 buttons (with
the 👎 reason modal's submission).

Everything this plugin chooses to ignore is acknowledged (Bolt would answer 404 otherwise and
Slack would retry) and logged with a reason, malformed payloads included: a listener never
raises on what Slack (or anyone holding the signing secret) sends. The channel is re-checked on
every interaction (a Cancel too, on a replica that does not own the run: by the shared state;
Evidence and feedback only in an admin channel, and evidence only into the answer's own
channel).

Shared-state keys carry the request's app and workspace (``app_id:team_id``); shared state out
of reach gets a polite reply in the thread instead of silence.

Without a bot id from the host app's authorization, nothing in a thread can be told to be ours:
mentions run without a previous turn and the replay shortcut refuses (see ``turns``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.contract.request import slack_ts_moment
from sre_diag.log import log_failure
from sre_diag.settings import Settings
from sre_diag.slack.blocks import (
    CANCEL_ACTION_ID,
    EVIDENCE_ACTION_ID,
    FEEDBACK_DOWN_ACTION_ID,
    FEEDBACK_UP_ACTION_ID,
    render_evidence,
)
from sre_diag.slack.feedback import (
    FEEDBACK_VIEW_ID,
    FeedbackDesk,
    ReasonRequest,
    reason_modal,
    submitted_reason,
)
from sre_diag.slack.gate import (
    IgnoreReason,
    gate_mention,
    malformed_detail,
    own_mention_removed,
    slack_ts,
)
from sre_diag.slack.lane import LIMITED_TRIES, Priority, lanes
from sre_diag.slack.metrics import EventResult
from sre_diag.slack.run_request import RunRequest
from sre_diag.slack.runs import RunManager
from sre_diag.slack.turns import find_recorded_input, latest_turn

__all__ = ["REPLAY_CALLBACK_ID", "Listeners", "request_scope"]

_log = logging.getLogger(__name__)

REPLAY_CALLBACK_ID = "replay_diagnosis"
_EVENT_TTL_SECONDS = 3600.0
_MAX_LOGGED_ID = 64
_SCOPE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")

REFUSE_NO_BOT_ID = (
    "I cannot replay here: this app's authorization does not tell me my own bot id, so I "
    "cannot tell my answers from anyone else's. Ask the app's operator to return bot_id "
    "from authorize."
)
REFUSE_NOT_REPLAYABLE = (
    "I cannot replay this message: only my own answers and questions asked to me can be replayed."
)
REFUSE_UNREADABLE = "I cannot replay this message right now: I could not read this thread."
EVIDENCE_UNAVAILABLE = (
    "I cannot show this answer's evidence right now: my shared state is unreachable. "
    "Please try again in a few minutes."
)
FEEDBACK_UNAVAILABLE = (
    "I could not record your feedback: my shared state is unreachable. Please try again later."
)
_VOTES = {FEEDBACK_UP_ACTION_ID: "up", FEEDBACK_DOWN_ACTION_ID: "down"}
_VOTE_WORDS = {"up": ":+1: helpful", "down": ":-1: not helpful"}


def evidence_expired(ttl_seconds: float) -> str:
    hours = ttl_seconds / 3600
    kept = f"{hours:g} hours" if hours >= 1 else f"{ttl_seconds:g} seconds"
    return (
        f"This answer's evidence is no longer kept (it is kept for {kept} after the answer). "
        "Ask me again to re-run the checks."
    )


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _bot_user_id(body: Mapping[str, Any], context: AsyncBoltContext) -> str | None:
    """The bot's own user id, whose mentions are removed from a Query: the authorization's, else
    the event's ``authorizations`` entry for a bot; None (nothing removed) when neither says."""
    known = _str_or_none(context.bot_user_id)
    if known:
        return known
    authorizations = body.get("authorizations")
    for entry in authorizations if isinstance(authorizations, list) else ():
        entry = _mapping(entry)
        if entry.get("is_bot") is True and (user := _str_or_none(entry.get("user_id"))):
            return user
    _log.warning("the bot's user id is unknown (authorize returned none): the Query keeps it")
    return None


def _scope_part(value: object) -> str:
    return value if isinstance(value, str) and _SCOPE_ID.fullmatch(value) else "-"


def _scope(body: dict[str, Any], context: AsyncBoltContext) -> str:
    """``app_id:team_id`` of a request: shared-state keys never cross apps or workspaces."""
    team = context.team_id or context.enterprise_id or _mapping(body.get("team")).get("id")
    return f"{_scope_part(body.get('api_app_id'))}:{_scope_part(team or body.get('team_id'))}"


request_scope = _scope
"""``app_id:team_id`` of a request (for the other listeners of this package)."""

EventCounter = Callable[[EventResult, str], None]
"""Told of every event handled: what was done with it and why (``Metrics.slack_event``)."""


def _not_counted(result: EventResult, reason: str) -> None:
    return None


def _loggable(value: object) -> str:
    """An id from a payload, safe to log: a bounded representation."""
    return repr(value)[:_MAX_LOGGED_ID]


class Listeners:
    """The plugin's listeners, bound to one RunManager."""

    def __init__(
        self,
        manager: RunManager,
        settings: Settings,
        *,
        on_event: EventCounter | None = None,
        on_vote: Callable[[str], None] | None = None,
    ) -> None:
        self.manager = manager
        self.count = on_event or _not_counted
        self.admin_channels = frozenset(settings.admin_channels)
        self.evidence_ttl_seconds = settings.evidence_ttl_seconds
        self.feedback = FeedbackDesk(
            manager.state, manager.harness.audit, on_vote or (lambda vote: None)
        )
        self.ignored: list[IgnoreReason] = []

    def register(self, app: AsyncApp) -> None:
        app.event("app_mention")(self.on_mention)
        app.action(CANCEL_ACTION_ID)(self.on_cancel)
        app.shortcut(REPLAY_CALLBACK_ID)(self.on_replay)
        app.action(EVIDENCE_ACTION_ID)(self.on_evidence)
        app.action(FEEDBACK_UP_ACTION_ID)(self.on_vote)
        app.action(FEEDBACK_DOWN_ACTION_ID)(self.on_vote)
        app.view(FEEDBACK_VIEW_ID)(self.on_reason)

    def _ignore(self, reason: IgnoreReason, event_id: object, detail: str | None = None) -> None:
        self.ignored.append(reason)
        self.count(EventResult.IGNORED, reason.value)
        del self.ignored[:-1000]
        suffix = f" ({detail})" if detail else ""
        level = logging.WARNING if reason is IgnoreReason.MALFORMED else logging.INFO
        _log.log(level, "ignored app_mention %s: %s%s", _loggable(event_id), reason.value, suffix)

    async def on_mention(
        self,
        ack: AsyncAck,
        body: dict[str, Any],
        event: dict[str, Any],
        request: AsyncBoltRequest,
        client: AsyncWebClient,
        context: AsyncBoltContext,
    ) -> None:
        await ack()
        headers: Mapping[str, Sequence[str]] = request.headers
        event = _mapping(event)
        event_id = body.get("event_id")
        reason = gate_mention(
            event, headers, self.admin_channels, event_id_known=isinstance(event_id, str)
        )
        if reason is not None:
            detail = malformed_detail(event) if reason is IgnoreReason.MALFORMED else None
            self._ignore(reason, event_id, detail)
            return
        # The gate checked these: channel and text are strings, ts (and thread_ts if given)
        # well-formed Slack timestamps.
        channel: str = event["channel"]
        thread_ts = _str_or_none(event.get("thread_ts"))
        scope = _scope(body, context)
        if isinstance(event_id, str) and not await self._first_delivery(
            client, scope, event_id, channel, thread_ts or event["ts"]
        ):
            return
        previous = None
        if thread_ts is not None:
            previous = await latest_turn(client, channel, thread_ts, context.bot_id)
        started = await self.manager.submit(
            RunRequest(
                client=client,
                channel=channel,
                thread_ts=thread_ts or event["ts"],
                query=own_mention_removed(event["text"], _bot_user_id(body, context)),
                previous_turn=previous,
                requested_by=_str_or_none(event.get("user")),
                scope=scope,
                asked_at=slack_ts_moment(event["ts"]),
            )
        )
        self._started(started, "MENTION")

    def _started(self, key: str | None, kind: str) -> None:
        if key is None:  # a busy thread, a draining process, shared state out of reach
            self.count(EventResult.DECLINED, "NOT_STARTED")
        else:
            self.count(EventResult.ACCEPTED, kind)

    async def _first_delivery(
        self, client: AsyncWebClient, scope: str, event_id: str, channel: str, thread_ts: str
    ) -> bool:
        """Dedupe the event; shared state out of reach gets a polite reply, never silence."""
        try:
            fresh = await self.manager.state.claim_event(f"{scope}:{event_id}", _EVENT_TTL_SECONDS)
        except Exception as exc:
            log_failure(
                _log, logging.ERROR, "shared state unreachable, mention declined: %s", exc=exc
            )
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self.manager.say_unavailable(client, channel, thread_ts)
            return False
        if not fresh:
            self._ignore(IgnoreReason.DUPLICATE_EVENT, event_id)
        return fresh

    async def on_cancel(
        self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        actions = body.get("actions")
        first = _mapping(actions[0]) if isinstance(actions, list) and actions else {}
        run_key = first.get("value")
        if channel is None or channel not in self.admin_channels:
            _log.info("ignored cancel outside the admin channels")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return
        if not isinstance(run_key, str):
            _log.warning("ignored cancel: malformed (no run key)")
            self.count(EventResult.IGNORED, IgnoreReason.MALFORMED.value)
            return
        try:
            accepted = await self.manager.request_cancel(run_key, channel, _scope(body, context))
        except Exception as exc:  # shared state out of reach: logged, never raised into Bolt
            log_failure(_log, logging.ERROR, "cancel not delivered: %s", exc=exc)
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            return
        result = EventResult.ACCEPTED if accepted else EventResult.IGNORED
        self.count(result, "CANCEL" if accepted else "NO_LIVE_RUN")
        if not accepted:
            _log.info("ignored cancel: no live run %s in this channel", _loggable(run_key))

    async def on_replay(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        await ack()
        channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        if channel is None or channel not in self.admin_channels:
            _log.info("ignored replay shortcut outside the admin channels")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return
        message = _mapping(body.get("message"))
        message_ts = slack_ts(message.get("ts"))
        thread_ts = slack_ts(message.get("thread_ts") or message_ts)
        if message_ts is None or thread_ts is None:
            _log.warning("ignored replay shortcut: malformed (no well-formed message ts)")
            return
        user = _str_or_none(_mapping(body.get("user")).get("id"))
        if not context.bot_id:
            _log.warning(
                "refused replay shortcut in %s: no bot id from the app's authorization", channel
            )
            await self._refuse(client, channel, thread_ts, user, REFUSE_NO_BOT_ID)
            return
        try:
            request = await self._replay_request(
                client, context.bot_id, _bot_user_id(body, context), channel, thread_ts,
                message_ts, message,
            )  # fmt: skip
        except Exception as exc:  # Slack could not be read: say so, never a 500
            log_failure(
                _log, logging.WARNING, "refused replay shortcut: thread unreadable (%s)", exc=exc
            )
            await self._refuse(client, channel, thread_ts, user, REFUSE_UNREADABLE)
            return
        if request is None:
            _log.info("refused replay shortcut in %s: not a replayable message", channel)
            await self._refuse(client, channel, thread_ts, user, REFUSE_NOT_REPLAYABLE)
            return
        started = await self.manager.submit(replace(request, scope=_scope(body, context)))
        self._started(started, "REPLAY")

    async def _refuse(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        user: str | None,
        text: str,
    ) -> None:
        """Tell the person who clicked why nothing happens (only them: an ephemeral message)."""
        if user is None:
            return
        try:
            await client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=thread_ts, text=text
            )
        except Exception as exc:  # Slack failures are logged, never raised into Bolt
            log_failure(_log, logging.WARNING, "could not post the replay refusal: %s", exc=exc)

    async def _replay_request(
        self,
        client: AsyncWebClient,
        bot_id: str,
        bot_user_id: str | None,
        channel: str,
        thread_ts: str,
        message_ts: str,
        message: dict[str, Any],
    ) -> RunRequest | None:
        """An answer of ours replays its recorded input; a user's mention replays its text."""
        recorded = await find_recorded_input(client, channel, thread_ts, message_ts, bot_id)
        if recorded is not None:
            query, previous = recorded.query, recorded.previous_turn
            asked_at = recorded.asked_at
        elif not message.get("bot_id") and isinstance(message.get("text"), str):
            query = own_mention_removed(message["text"], bot_user_id)
            previous = await latest_turn(client, channel, thread_ts, bot_id, before=message_ts)
            asked_at = slack_ts_moment(message_ts)
        else:
            return None
        return RunRequest(
            client=client,
            channel=channel,
            thread_ts=thread_ts,
            query=query,
            previous_turn=previous,
            replay=True,
            asked_at=asked_at,
        )

    # -- answer buttons ----------------------------------------------------------------------

    def _answer_click(self, body: dict[str, Any], kind: str) -> _Click | None:
        """The click on an answer's button, if it may be served (else counted and logged)."""
        click = _Click.of(body)
        if click.channel is None or click.channel not in self.admin_channels:
            _log.info("ignored %s outside the admin channels", kind)
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return None
        if click.run_id is None or click.user is None or click.thread_ts is None:
            _log.warning("ignored %s: malformed (no run id, user or message)", kind)
            self.count(EventResult.IGNORED, IgnoreReason.MALFORMED.value)
            return None
        return click

    async def on_evidence(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        """Post, in the answer's thread, the observations of the checks it cites."""
        await ack()
        click = self._answer_click(body, "evidence")
        if click is None:
            return
        try:
            record = await self.manager.answers.load_evidence(
                _scope(body, context), click.run_id or ""
            )
        except Exception as exc:
            log_failure(_log, logging.ERROR, "evidence not read: %s", exc=exc)
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self._tell(client, click, EVIDENCE_UNAVAILABLE)
            return
        if record is None or record.channel != click.channel:
            self.count(EventResult.IGNORED, "EVIDENCE_EXPIRED")
            await self._tell(client, click, evidence_expired(self.evidence_ttl_seconds))
            return
        message = render_evidence(record.run_id, record.checks, record.links, record.windows)
        try:
            await lanes().call(
                client,
                record.channel,
                Priority.STATUS,
                "chat.postMessage",
                lambda: client.chat_postMessage(
                    channel=record.channel,
                    thread_ts=record.thread_ts,
                    text=message.text,
                    blocks=list(message.blocks),
                    unfurl_links=False,
                    unfurl_media=False,
                ),
                tries=LIMITED_TRIES,
            )
        except Exception as exc:  # Slack failures are logged, never raised into Bolt
            log_failure(_log, logging.WARNING, "could not post the evidence: %s", exc=exc)
            return
        self.count(EventResult.ACCEPTED, "EVIDENCE")

    async def on_vote(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        """👍 / 👎: one vote per user and answer, changeable; a 👎 offers the reason modal."""
        await ack()
        click = self._answer_click(body, "feedback")
        vote = _VOTES.get(str(click.action_id)) if click is not None else None
        if click is None or vote is None:
            return
        request = ReasonRequest(click.run_id or "", click.channel or "", click.thread_ts or "")
        try:
            previous = await self.feedback.vote(
                _scope(body, context), request, click.user or "", vote
            )
        except Exception as exc:
            log_failure(_log, logging.ERROR, "feedback not recorded: %s", exc=exc)
            self.count(EventResult.DECLINED, "STATE_UNAVAILABLE")
            await self._tell(client, click, FEEDBACK_UNAVAILABLE)
            return
        self.count(EventResult.ACCEPTED, "FEEDBACK")
        modal = reason_modal(request) if vote == "down" else None
        if modal is not None and click.trigger_id is not None:
            try:
                await client.views_open(trigger_id=click.trigger_id, view=modal)
                return
            except Exception as exc:  # no modal: the vote stands, say so below
                log_failure(_log, logging.WARNING, "could not open the feedback modal: %s", exc=exc)
        await self._tell(client, click, _vote_note(vote, previous))

    async def on_reason(
        self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """The 👎 modal was submitted: its reason, if any, becomes a feedback record."""
        await ack()
        view = _mapping(body.get("view"))
        request = ReasonRequest.loads(view.get("private_metadata"))
        user = _str_or_none(_mapping(body.get("user")).get("id"))
        if request is None or user is None or request.channel not in self.admin_channels:
            _log.info("ignored a feedback reason: not from an answer in an admin channel")
            self.count(EventResult.IGNORED, IgnoreReason.NOT_ADMIN_CHANNEL.value)
            return
        reason = submitted_reason(view)
        if reason is not None:
            self.feedback.reason(request, user, reason)
            self.count(EventResult.ACCEPTED, "FEEDBACK_REASON")

    async def _tell(self, client: AsyncWebClient, click: _Click, text: str) -> None:
        """An ephemeral note to the person who clicked, in the answer's thread."""
        try:
            await client.chat_postEphemeral(
                channel=click.channel or "",
                user=click.user or "",
                thread_ts=click.thread_ts,
                text=text,
            )
        except Exception as exc:  # Slack failures are logged, never raised into Bolt
            log_failure(_log, logging.WARNING, "could not post an ephemeral note: %s", exc=exc)


def _vote_note(vote: str, previous: str | None) -> str:
    if previous == vote:
        return f"Your vote ({_VOTE_WORDS[vote]}) was already recorded."
    if previous is None:
        return f"Thanks: your vote ({_VOTE_WORDS[vote]}) is recorded."
    return f"Thanks: your vote is changed to {_VOTE_WORDS[vote]}."


class _Click:
    """The fields of a ``block_actions`` click on an answer's button."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.channel = _str_or_none(_mapping(body.get("channel")).get("id"))
        self.user = _str_or_none(_mapping(body.get("user")).get("id"))
        self.trigger_id = _str_or_none(body.get("trigger_id"))
        actions = body.get("actions")
        first = _mapping(actions[0]) if isinstance(actions, list) and actions else {}
        self.action_id = _str_or_none(first.get("action_id"))
        self.run_id = _str_or_none(first.get("value"))
        message = _mapping(body.get("message"))
        container = _mapping(body.get("container"))
        self.thread_ts = slack_ts(
            message.get("thread_ts")
            or message.get("ts")
            or container.get("thread_ts")
            or container.get("message_ts")
        )

    @classmethod
    def of(cls, body: dict[str, Any]) -> _Click:
        return cls(body)
