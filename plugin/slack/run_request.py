"""One diagnosis asked for in a Slack thread (``RunRequest``), as the listeners build it or as a
worker thaws it from a queued job, and the two names a run gets from it: what started it (its
``Trigger``) and its session id (which marks replays).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.audit.trigger import Trigger
from sre_diag.contract.request import PreviousTurn
from sre_diag.slack.job_entry import Job

__all__ = ["RunRequest", "job_request", "session_id", "trigger"]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One diagnosis asked for in a thread."""

    client: AsyncWebClient
    channel: str
    thread_ts: str
    query: str
    previous_turn: PreviousTurn | None = None
    requested_by: str | None = None
    replay: bool = False
    scope: str = "-:-"
    asked_at: datetime | None = None
    """When the question was asked (the mention's ``ts``, or the recorded one on a replay)."""
    """``app_id:team_id`` of the event: shared-state keys never cross apps or workspaces."""
    run_id: str | None = None
    """The run's id when it was given before the run (a queued job's), else the harness's."""
    trigger: Trigger = Trigger.MENTION
    """What started the run (its audit record and ``diag_runs_total`` say so)."""


def job_request(job: Job, client: AsyncWebClient) -> RunRequest:
    """The request a queued job froze, to be answered through ``client``."""
    return RunRequest(
        client=client,
        channel=job.channel,
        thread_ts=job.thread_ts,
        query=job.query,
        previous_turn=job.turn(),
        requested_by=job.requested_by,
        replay=job.replay,
        scope=job.scope,
        asked_at=job.asked(),
        run_id=job.run_id,
        trigger=job.started_by(),
    )


def trigger(req: RunRequest, replaying: bool) -> Trigger:
    """A replay (the shortcut, or ``python -m sre_diag replay``: ``replaying``) is a replay
    whatever it replays; any other run says what started it."""
    return Trigger.REPLAY if req.replay or replaying else req.trigger


def session_id(req: RunRequest, replaying: bool) -> str:
    """Replays are marked in the session id, which the audit record carries."""
    kind = "replay" if req.replay or replaying else "slack"
    return f"{kind}:{req.channel}:{req.thread_ts}"
