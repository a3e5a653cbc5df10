"""One pointer message per alert pattern and channel, updated in place.

In a storm, the alerts of one pattern that start no run (within its cooldown, beyond
``DIAG_ALERT_MAX_RUNS_PER_HOUR``, or resolved) must not cost one post each: Slack takes about one
message a second per channel, and the run's own answer needs that budget. The first such alert
gets the pointer message in its thread (the one post, and the one permalink lookup); every later
one only counts in the shared state, and the pointer is edited to show the count ("+57 more
alerts of this pattern since 10:05"), at most once every :data:`UPDATE_EVERY_SECONDS` per
pointer and process: only the latest count matters, so the edits coalesce, and an edit is made
again until the message shows the count the shared state holds.

Pointer posts and edits take the lowest place in their channel's lane
(:mod:`sre_diag.slack.lane`): they wait behind any answer being delivered into the channel and
behind its status messages, and never spend the budget those need.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.log import log_failure
from sre_diag.slack.lane import LIMITED_TRIES, Priority, lanes
from sre_diag.slack.posting import failure_name
from sre_diag.slack.state import PointerNote, SharedState

__all__ = ["UPDATE_EVERY_SECONDS", "Pointer", "PointerBoard"]

_log = logging.getLogger(__name__)

UPDATE_EVERY_SECONDS = 5.0
"""The least time between two edits of one pointer by one process."""

_EDIT_TRIES = 3
"""Edits of one pointer in a row that may fail before the board stops (a rate limit is waited
out in the lane and counts as one)."""

Text = Callable[[PointerNote], Awaitable[str]]
"""The pointer's text for its current count (the first post looks up a permalink)."""


@dataclass(frozen=True, slots=True)
class Pointer:
    """Where one alert points: the pattern's pointer ``key``, the alert's channel and ts."""

    key: str
    client: AsyncWebClient
    channel: str
    alert_ts: str
    ttl_seconds: float


class PointerBoard:
    """Posts each pattern's pointer once and keeps its count up to date."""

    def __init__(self, state: SharedState, update_every: float = UPDATE_EVERY_SECONDS) -> None:
        self._state = state
        self._every = update_every
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        """Pointers counted again while their edit was under way: look once more."""

    async def point(self, pointer: Pointer, text: Text) -> None:
        """Count one more alert on ``pointer.key``: post the pointer if it is the first, else
        have its message edited soon (never raises)."""
        try:
            note = await self._state.note_pointer(
                pointer.key, pointer.alert_ts, pointer.ttl_seconds
            )
        except Exception as exc:
            log_failure(_log, logging.WARNING, "alert pointer not counted: %s", exc=exc)
            return
        if note is None:
            return
        if note.count == 1:
            await self._post(pointer, note, text)
        elif note.pointer_ts:
            self._schedule(pointer, note.pointer_ts, text)

    async def recount(self, pointer: Pointer, text: Text) -> None:
        """Count a resolved notification on an existing pointer (none is created)."""
        try:
            note = await self._state.note_pointer(
                pointer.key, pointer.alert_ts, pointer.ttl_seconds, create=False
            )
        except Exception as exc:
            log_failure(_log, logging.WARNING, "alert pointer not counted: %s", exc=exc)
            return
        if note is not None and note.pointer_ts:
            self._schedule(pointer, note.pointer_ts, text)

    async def _post(self, pointer: Pointer, note: PointerNote, text: Text) -> None:
        try:
            body = await text(note)
            response = await lanes().call(
                pointer.client,
                pointer.channel,
                Priority.POINTER,
                "chat.postMessage",
                lambda: pointer.client.chat_postMessage(
                    channel=pointer.channel,
                    thread_ts=pointer.alert_ts,
                    text=body,
                    unfurl_links=False,
                    unfurl_media=False,
                ),
                tries=LIMITED_TRIES,
            )
            ts = response.get("ts")
            if not isinstance(ts, str):
                return
            await self._state.set_pointer(pointer.key, ts, pointer.ttl_seconds)
        except Exception as exc:
            _log.warning("alert pointer not posted: %s", failure_name(exc))
            return
        self._schedule(pointer, ts, text)  # alerts counted while it was being posted

    def _schedule(self, pointer: Pointer, pointer_ts: str, text: Text) -> None:
        if pointer.key in self._pending:
            self._again.add(pointer.key)  # the edit under way looks once more before it ends
            return
        task = asyncio.create_task(self._edit_later(pointer, pointer_ts, text))
        self._pending[pointer.key] = task
        task.add_done_callback(lambda done: self._forget(pointer.key, done))

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]

    async def _edit_later(self, pointer: Pointer, pointer_ts: str, text: Text) -> None:
        """Edit the pointer until it shows the latest count (each edit in its turn of the
        channel's lane, at most one every ``update_every`` seconds)."""
        shown, failures = 1, 0
        while failures < _EDIT_TRIES:
            await asyncio.sleep(self._every)
            self._again.discard(pointer.key)
            try:
                count = await self._edit(pointer, pointer_ts, text, shown)
            except Exception as exc:
                failures += 1
                _log.warning("alert pointer not updated: %s", failure_name(exc))
                continue
            if count is None and pointer.key not in self._again:
                self._pending.pop(pointer.key, None)  # no await since the count was read
                return
            shown, failures = count or shown, 0

    async def _edit(self, pointer: Pointer, pointer_ts: str, text: Text, shown: int) -> int | None:
        """Edit the pointer if its count moved past ``shown``: the count now shown, or None
        when there is nothing (more) to show."""

        async def send() -> int | None:
            note = await self._state.note_pointer(
                pointer.key, pointer.alert_ts, pointer.ttl_seconds, add=0, create=False
            )
            if note is None or note.count <= shown:
                return None
            await pointer.client.chat_update(
                channel=pointer.channel, ts=pointer_ts, text=await text(note)
            )
            return note.count

        return await lanes().call(
            pointer.client,
            pointer.channel,
            Priority.POINTER,
            "chat.update",
            send,
            tries=LIMITED_TRIES,
        )

    async def aclose(self) -> None:
        """Stop the edits still waiting (their counts are in the shared state)."""
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
