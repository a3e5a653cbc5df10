"""A queued job on the wire: the frozen request of one run (:class:`Job`), as one Redis Stream
entry whose field ``job`` is its JSON, and how an entry is read back.

A job is one stream entry whose field ``job`` is the JSON of a :class:`Job` (format
``version`` :data:`JOB_VERSION`): everything a worker needs to run the diagnosis and answer in
its thread without asking the front anything. Entries are parsed strictly (:func:`parse_entry`):
one that does not parse is a :class:`Poison` — acknowledged, moved to the dead-letter stream
``<stream>:dead`` with its reason, and answered in its thread when the thread can be identified;
never a crash, never harm to the other entries of its batch. Fields a newer front added are
tolerated and logged; a newer major ``version`` is refused visibly (dead-lettered, answered).

Optional fields added within a version keep a default, so both directions work while a
deployment rolls: ``run_trigger`` (what started the run, ``sre_diag.audit.trigger``) was added in
version 1 — a worker that predates it logs it as unknown and runs the job (its audit record
then has no trigger), and a job from a front that predates it is read as ``mention`` (or
``replay`` when ``replay`` is set). Only a change an older worker would get wrong bumps
:data:`JOB_VERSION`.

The queue itself (delivery, ownership, heartbeat, recovery, trimming) is ``sre_diag.slack.jobs``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from sre_diag.audit.trigger import Trigger
from sre_diag.contract.request import (
    PreviousTurn,
    format_asked_at,
    parse_asked_at,
    parse_previous_turn,
)
from sre_diag.slack.fence import text

__all__ = ["JOB_VERSION", "Job", "Poison", "parse_entry"]

_log = logging.getLogger(__name__)

JOB_VERSION = 1
"""The job format this code writes and reads; a higher one comes from a newer front."""
_FIELD = "job"
_MAX_JOB_BYTES = 256 * 1024
_RAW_KEEP = 4096
_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,20}")
_TS = re.compile(r"\d{1,12}\.\d{1,8}")
_KEY = re.compile(r"[A-Za-z0-9:_-]{1,200}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
"""Characters of an unknown field's name that are not logged as they are."""


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
    version: int = JOB_VERSION
    run_trigger: str | None = None
    """What started the run (a ``Trigger`` value); None from a front that predates it."""

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

    def started_by(self) -> Trigger:
        """The run's trigger; a job without one is a mention (or a replay, when marked so)."""
        if self.run_trigger is not None:
            return Trigger(self.run_trigger)
        return Trigger.REPLAY if self.replay else Trigger.MENTION

    def dumps(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

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
        trigger: Trigger = Trigger.MENTION,
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
            run_trigger=trigger.value,
        )


_JOB = TypeAdapter(Job)
_KNOWN = frozenset(Job.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Poison:
    """A stream entry that is not a job this worker can run, with what could be read of it."""

    reason: str
    """A stable code: ``MISSING_JOB``, ``OVERSIZED``, ``NOT_JSON``, ``NOT_AN_OBJECT``,
    ``NEWER_VERSION``, ``INVALID_FIELDS``."""
    raw: str
    """The entry's job text, cut to a few KB (for the dead-letter stream)."""
    channel: str | None = None
    thread_ts: str | None = None
    status_ts: str | None = None
    run_id: str | None = None
    run_key: str | None = None
    scope: str | None = None
    """The thread and run, where the entry names them in the expected shapes."""


def parse_entry(fields: dict[Any, Any] | None) -> Job | Poison:
    """One stream entry's fields, strictly: a :class:`Job`, or a :class:`Poison` saying why."""
    raw_value = (fields or {}).get(_FIELD.encode(), (fields or {}).get(_FIELD))
    if raw_value is None:
        return Poison("MISSING_JOB", "")
    raw = text(raw_value)
    if len(raw.encode("utf-8", "replace")) > _MAX_JOB_BYTES:
        return Poison("OVERSIZED", raw[:_RAW_KEEP])
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return Poison("NOT_JSON", raw[:_RAW_KEEP])
    if not isinstance(data, dict):
        return Poison("NOT_AN_OBJECT", raw[:_RAW_KEEP])
    version = data.get("version", JOB_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > JOB_VERSION:
        return _poison("NEWER_VERSION", raw, data)
    extra = sorted(_UNSAFE.sub("?", str(k))[:40] for k in data if k not in _KNOWN)
    if extra:
        _log.warning("job has fields this worker does not know, ignored: %s", ", ".join(extra[:10]))
    try:
        job = _JOB.validate_json(raw, strict=True)
        _check_shapes(job)
    except Exception:  # ValidationError, ValueError, InputRejected, OverflowError (dates), …
        return _poison("INVALID_FIELDS", raw, data)
    return job


def _check_shapes(job: Job) -> None:
    """What the worker posts with and keys on must have Slack's and our own shapes."""
    if not _CHANNEL.fullmatch(job.channel) or not _TS.fullmatch(job.thread_ts):
        raise ValueError("thread")
    if job.status_ts is not None and not _TS.fullmatch(job.status_ts):
        raise ValueError("status_ts")
    for key in (job.run_key, job.run_id, job.scope):
        if not _KEY.fullmatch(key):
            raise ValueError("key")
    job.turn()
    job.asked()
    job.started_by()  # ValueError for a trigger this code does not know


def _poison(reason: str, raw: str, data: dict[Any, Any]) -> Poison:
    def shaped(name: str, pattern: re.Pattern[str]) -> str | None:
        value = data.get(name)
        return value if isinstance(value, str) and pattern.fullmatch(value) else None

    return Poison(
        reason,
        raw[:_RAW_KEEP],
        channel=shaped("channel", _CHANNEL),
        thread_ts=shaped("thread_ts", _TS),
        status_ts=shaped("status_ts", _TS),
        run_id=shaped("run_id", _KEY),
        run_key=shaped("run_key", _KEY),
        scope=shaped("scope", _KEY),
    )
