"""The run queue on a Redis Stream (consumer group ``workers``): the Slack front enqueues the
frozen request of a run, ``sre-diag worker`` processes consume it.

A job is one stream entry whose one field ``job`` is the JSON of a :class:`Job`: everything a
worker needs to run the diagnosis and answer in its thread without asking the front anything
(query, previous turn, ``asked_at``, channel, thread, the status message, the run's key and id,
the scope, the replay flag).

Delivery: a worker reads only as many entries as it has free slots (``XREADGROUP``), so entries
it cannot start stay in the stream for another worker. While a job runs, its worker touches it
(``XCLAIM … JUSTID`` to itself) every third of ``DIAG_JOB_CLAIM_SECONDS``, which resets its idle
time; an entry idle longer than that belongs to a worker that vanished and is taken over with
``XAUTOCLAIM`` by a live worker, which answers it as lost (never runs it again) and acknowledges
it. A job is acknowledged (``XACK``) only after its thread got its answer.

The stream does not grow without end: :meth:`JobQueue.trim` (each worker's heartbeat) drops the
entries older than the oldest one still pending — every one of those was delivered and
acknowledged — and never an entry that is waiting or running.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from plugin.request import PreviousTurn, format_asked_at, parse_asked_at, parse_previous_turn

__all__ = ["DEFAULT_STREAM", "GROUP", "Job", "JobQueue", "QueueDepth"]

_log = logging.getLogger(__name__)

GROUP = "workers"
DEFAULT_STREAM = "sre-diag:jobs"
"""The stream of the run queue (a deployment sharing a Redis with another uses its own DB)."""
_FIELD = "job"


@dataclass(frozen=True, slots=True)
class Job:
    """The frozen request of one run, as the front accepted it."""

    run_key: str
    """The Cancel button's value (the run's key within its scope)."""
    run_id: str
    """The run's id in the result and the audit record (also of a lost job's answer)."""
    scope: str
    channel: str
    thread_ts: str
    query: str
    previous_turn: str | None
    """The frozen previous turn's JSON (CONTRACTS §7), or None."""
    asked_at: str | None
    requested_by: str | None
    replay: bool
    status_ts: str | None
    """The status message the front posted (None if Slack refused it)."""

    @property
    def thread_key(self) -> str:
        return f"{self.scope}:{self.channel}:{self.thread_ts}"

    @property
    def lease_key(self) -> str:
        return f"{self.scope}:{self.run_key}"

    def turn(self) -> PreviousTurn | None:
        return parse_previous_turn(self.previous_turn) if self.previous_turn is not None else None

    def asked(self) -> datetime | None:
        return parse_asked_at(self.asked_at) if self.asked_at is not None else None

    def dumps(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Job:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a job is a JSON object")
        return cls(**data)

    @classmethod
    def freeze(
        cls,
        *,
        run_key: str,
        run_id: str,
        scope: str,
        channel: str,
        thread_ts: str,
        query: str,
        previous_turn: PreviousTurn | None,
        asked_at: datetime | None,
        requested_by: str | None,
        replay: bool,
        status_ts: str | None,
    ) -> Job:
        return cls(
            run_key=run_key,
            run_id=run_id,
            scope=scope,
            channel=channel,
            thread_ts=thread_ts,
            query=query,
            previous_turn=previous_turn.to_json() if previous_turn is not None else None,
            asked_at=format_asked_at(asked_at) if asked_at is not None else None,
            requested_by=requested_by,
            replay=replay,
            status_ts=status_ts,
        )


@dataclass(frozen=True, slots=True)
class QueueDepth:
    waiting: int
    """Entries no worker has taken yet."""
    taken: int
    """Entries taken by a worker and not yet acknowledged (running, or lost and not claimed)."""
    claimed: int
    """Lost jobs claimed by another worker so far (all time, for this stream)."""


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class JobQueue:
    """One stream and its consumer group on one Redis connection pool."""

    def __init__(self, redis: Redis, stream: str) -> None:
        self.redis = redis
        self.stream = stream
        self._claims_key = f"{stream}:claimed"

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, job: Job) -> str:
        entry = await self.redis.xadd(self.stream, {_FIELD: job.dumps()})
        return _text(entry)

    async def read(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, Job | None]]:
        """Up to ``count`` new entries for ``consumer`` (None for an entry that is not a job)."""
        answer: Any = await self.redis.xreadgroup(
            GROUP, consumer, {self.stream: ">"}, count=count, block=block_ms
        )
        entries: list[tuple[str, Job | None]] = []
        for _stream, items in answer or []:
            entries.extend(_decoded(items))
        return entries

    async def touch(self, consumer: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of this worker's running jobs (its heartbeat)."""
        if entry_ids:
            await self.redis.xclaim(self.stream, GROUP, consumer, 0, list(entry_ids), justid=True)

    async def claim_lost(
        self, consumer: str, min_idle_seconds: float, count: int = 10
    ) -> list[tuple[str, Job | None]]:
        """Entries idle for ``min_idle_seconds`` (their worker vanished), now ``consumer``'s."""
        answer: Any = await self.redis.xautoclaim(
            self.stream, GROUP, consumer, max(1, int(min_idle_seconds * 1000)), "0-0", count=count
        )
        items: list[Any] = list(answer[1]) if isinstance(answer, list | tuple) else []
        entries = _decoded([i for i in items if i is not None and i[1] is not None])
        if entries:
            await self.redis.incrby(self._claims_key, len(entries))
        return entries

    async def ack(self, entry_id: str) -> None:
        await self.redis.xack(self.stream, GROUP, entry_id)

    async def trim(self) -> int:
        """Drop the acknowledged entries: those before the oldest pending entry, or before the
        last delivered one when none is pending. Entries not yet delivered are never touched
        (delivery is in id order, so every id below the group's last delivered id is either
        pending or acknowledged). The number of entries dropped."""
        summary: Any = await self.redis.xpending(self.stream, GROUP)
        oldest = summary.get("min") if isinstance(summary, dict) else None
        if not oldest:
            last = None
            for group in await self.redis.xinfo_groups(self.stream):
                if _text(group.get("name")) == GROUP:
                    last = group.get("last-delivered-id")
            oldest = last
        if not oldest or _text(oldest) == "0-0":
            return 0
        dropped: Any = await self.redis.xtrim(self.stream, minid=_text(oldest), approximate=False)
        return int(dropped or 0)

    async def depth(self) -> QueueDepth:
        waiting = taken = 0
        for group in await self.redis.xinfo_groups(self.stream):
            name = _text(group.get("name"))
            if name != GROUP:
                continue
            taken = int(group.get("pending") or 0)
            lag = group.get("lag")
            waiting = int(lag) if lag is not None else 0
        claimed = await self.redis.get(self._claims_key)
        return QueueDepth(waiting=waiting, taken=taken, claimed=int(claimed or 0))


def _decoded(items: Sequence[Any]) -> list[tuple[str, Job | None]]:
    entries: list[tuple[str, Job | None]] = []
    for entry_id, fields in items:
        raw = (fields or {}).get(_FIELD.encode()) or (fields or {}).get(_FIELD)
        job: Job | None
        try:
            job = Job.loads(_text(raw)) if raw is not None else None
        except (ValueError, TypeError) as exc:
            _log.error("malformed job %s dropped: %s", _text(entry_id), type(exc).__name__)
            job = None
        entries.append((_text(entry_id), job))
    return entries
