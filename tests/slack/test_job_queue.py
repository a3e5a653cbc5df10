"""The run queue (``sre_diag.slack.jobs.JobQueue``) against the machine's Redis: delivery, depth,
lost-job claims and trimming — the stream keeps every entry that is waiting or running and drops
the acknowledged ones.

Each test uses a stream name of its own in a Redis database no other test writes (``_DB``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from sre_diag.slack.fence import RunFence, TakeoverVerdict
from sre_diag.slack.job_entry import Job, Poison, parse_entry
from sre_diag.slack.jobs import GROUP, JobQueue, Taken
from sre_diag.slack.state import connect_redis
from tests.slack.support import closed_port, require_redis

_DB = 12


@pytest.fixture
async def queue() -> AsyncIterator[JobQueue]:
    client = await require_redis(_DB)
    queue = JobQueue(client, f"test-jobs:{uuid.uuid4().hex}")
    await queue.ensure_group()
    await queue.ensure_group()  # a second front or worker finds the group there
    yield queue
    await client.delete(queue.stream, f"{queue.stream}:claimed", queue.dead_stream)
    async for key in client.scan_iter(match=f"{queue.stream}:fence:*"):
        await client.delete(key)
    await client.aclose()


def _job(n: int) -> Job:
    return Job.freeze(
        run_key=f"k{n}",
        run_id=f"run-{n}",
        scope="T1:A1",
        channel="CADMIN",
        thread_ts=f"1764300000.{n:06d}",
        query=f"payment-api 5xx ({n}) 连接池",
        previous_turn=None,
        asked_at=datetime(2026, 11, 28, 10, 30, tzinfo=UTC),
        requested_by="U1",
        replay=False,
        status_ts=None,
    )


async def _ids(queue: JobQueue) -> list[str]:
    entries = await queue.redis.xrange(queue.stream)
    return [i.decode() if isinstance(i, bytes) else i for i, _ in entries]


async def test_a_job_round_trips_and_each_entry_goes_to_one_consumer(queue: JobQueue) -> None:
    for n in range(4):
        await queue.enqueue(_job(n))
    first = await queue.read("a", 3, 10)
    second = await queue.read("b", 3, 10)
    assert [job for _, job in first] == [_job(0), _job(1), _job(2)]
    assert [job for _, job in second] == [_job(3)]
    assert await queue.read("c", 3, 10) == []
    job = first[0][1]
    assert job is not None and job.asked() == datetime(2026, 11, 28, 10, 30, tzinfo=UTC)


async def test_malformed_entries_are_read_as_poison_with_their_reason(queue: JobQueue) -> None:
    await queue.redis.xadd(queue.stream, {"job": "[1, 2"})
    await queue.redis.xadd(queue.stream, {"job": '{"run_key": "k"}'})
    await queue.redis.xadd(queue.stream, {"other": "x"})
    await queue.enqueue(_job(9))
    entries = await queue.read("a", 10, 10)
    reasons = [p.reason if isinstance(p, Poison) else "JOB" for _, p in entries]
    assert reasons == ["NOT_JSON", "INVALID_FIELDS", "MISSING_JOB", "JOB"]


async def test_depth_counts_waiting_and_taken(queue: JobQueue) -> None:
    for n in range(5):
        await queue.enqueue(_job(n))
    taken = await queue.read("a", 2, 10)
    depth = await queue.depth()
    assert (depth.waiting, depth.taken, depth.claimed) == (3, 2, 0)
    await queue.ack(taken[0][0])
    depth = await queue.depth()
    assert (depth.waiting, depth.taken) == (3, 1)


async def test_trim_drops_only_acknowledged_entries(queue: JobQueue) -> None:
    assert await queue.trim() == 0  # nothing delivered yet
    for n in range(6):
        await queue.enqueue(_job(n))
    assert await queue.trim() == 0
    every = await _ids(queue)
    assert len(every) == 6
    taken = await queue.read("a", 3, 10)
    # 0 and 2 acknowledged, 1 still running: only 0 may go.
    await queue.ack(taken[0][0])
    await queue.ack(taken[2][0])
    assert await queue.trim() == 1
    assert await _ids(queue) == every[1:]
    depth = await queue.depth()
    assert (depth.waiting, depth.taken) == (3, 1)
    # The running one ends; the waiting ones are never dropped before they are delivered.
    await queue.ack(taken[1][0])
    await queue.trim()
    rest = await queue.read("b", 10, 10)
    assert [job for _, job in rest] == [_job(3), _job(4), _job(5)]
    for entry, _ in rest:
        await queue.ack(entry)
    await queue.trim()
    assert await _ids(queue) == [rest[-1][0]]  # the last delivered entry stays as the mark
    depth = await queue.depth()
    assert (depth.waiting, depth.taken) == (0, 0)
    # New work after a trim is delivered and counted as before.
    await queue.enqueue(_job(6))
    assert (await queue.depth()).waiting == 1
    assert [job for _, job in await queue.read("a", 5, 10)] == [_job(6)]


async def test_a_job_whose_worker_stopped_touching_it_is_claimed_once(queue: JobQueue) -> None:
    await queue.enqueue(_job(0))
    await queue.enqueue(_job(1))
    taken = await queue.read("dead", 1, 10)
    alive = await queue.read("alive", 1, 10)
    alive_job = alive[0][1]
    assert isinstance(alive_job, Job)
    verdict, token = await queue.take("alive", alive[0][0], alive_job)
    assert verdict is Taken.OWNER
    await asyncio.sleep(0.25)
    # the live worker's heartbeat
    assert await queue.touch("alive", [(alive[0][0], alive_job.run_id, token)]) == []
    claimed = await queue.claim_lost("rescuer", 0.2)
    assert [(entry, job) for entry, job in claimed] == taken
    assert await queue.claim_lost("other", 0.2) == []  # claiming reset its idle time
    assert (await queue.depth()).claimed == 1
    pending = await queue.redis.xpending_range(queue.stream, GROUP, "-", "+", 10)
    owners = {(p["message_id"], p["consumer"]) for p in pending}
    assert owners == {(taken[0][0], "rescuer"), (alive[0][0], "alive")}


# -- strict entries ------------------------------------------------------------------------

_WRONG_TYPES = {
    "run_key": 7, "run_id": None, "scope": ["T"], "channel": {"id": "C1"}, "thread_ts": 1.5,
    "query": 42, "previous_turn": {"query": "q"},
    "asked_at": 1764300000, "requested_by": True, "replay": "false", "status_ts": 17,
    "version": "1",
}  # fmt: skip


@pytest.mark.parametrize("field", sorted(_WRONG_TYPES))
def test_a_field_of_the_wrong_type_is_poison_never_an_exception(field: str) -> None:
    data = json.loads(_job(1).dumps())
    data[field] = _WRONG_TYPES[field]
    parsed = parse_entry({b"job": json.dumps(data).encode()})
    assert isinstance(parsed, Poison)
    assert parsed.reason == ("NEWER_VERSION" if field == "version" else "INVALID_FIELDS")
    # The thread is still identified when its own fields are fine (so it can be answered).
    if field not in ("channel", "thread_ts"):
        assert (parsed.channel, parsed.thread_ts) == ("CADMIN", "1764300000.000001")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("channel", "#general"), ("channel", "C1 "), ("channel", "https://evil"),
        ("thread_ts", "1764300000"), ("thread_ts", "1.2.3"), ("status_ts", "now"),
        ("run_id", "run id with spaces"), ("run_key", ""), ("scope", "x" * 300),
        ("previous_turn", '{"query": "q"}'), ("previous_turn", "not json"),
        ("asked_at", "yesterday"), ("asked_at", "2026-11-28T10:30:00"),
        ("version", 2), ("version", True), ("version", 10**30),
    ],
)  # fmt: skip
def test_fields_of_the_wrong_shape_are_poison(field: str, value: Any) -> None:
    data = json.loads(_job(1).dumps())
    data[field] = value
    assert isinstance(parse_entry({"job": json.dumps(data)}), Poison)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "MISSING_JOB"), ("", "NOT_JSON"), ("null", "NOT_AN_OBJECT"),
        ('"a job"', "NOT_AN_OBJECT"), ("[" * 100_000, "NOT_JSON"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "NOT_JSON"),
        ('{"a": ' * 500 + "1" + "}" * 500, "INVALID_FIELDS"),
        ("{" + '"k": 1, ' * 40_000 + '"z": 2}', "OVERSIZED"), ("\udcff{", "NOT_JSON"),
    ],
)  # fmt: skip
def test_entries_that_are_no_job_at_all_are_poison(raw: str | None, reason: str) -> None:
    fields: dict[Any, Any] = {} if raw is None else {"job": raw}
    parsed = parse_entry(fields)
    assert isinstance(parsed, Poison) and parsed.reason == reason
    assert len(parsed.raw) <= 4096


def test_fields_a_newer_front_added_are_tolerated() -> None:
    data = {**json.loads(_job(2).dumps()), "priority": "P1", "trigger": {"kind": "alert"}}
    assert parse_entry({"job": json.dumps(data), "shard": "3"}) == _job(2)
    older = json.loads(_job(2).dumps())
    del older["version"]  # a job written before the format had a version
    assert parse_entry({"job": json.dumps(older)}) == _job(2)


async def test_a_dead_letter_keeps_the_reason_and_acknowledges(queue: JobQueue) -> None:
    await queue.redis.xadd(queue.stream, {"job": '{"run_key": 1}'})
    [(entry, poison)] = await queue.read("a", 10, 10)
    assert isinstance(poison, Poison)
    await queue.dead_letter(entry, poison)
    [(_, dead)] = await queue.redis.xrange(queue.dead_stream)
    assert dead["reason"] == "INVALID_FIELDS" and dead["entry"] == entry
    assert (await queue.depth()).taken == 0


# -- fencing -------------------------------------------------------------------------------


async def _owned(queue: JobQueue, consumer: str, n: int) -> tuple[str, Job, str]:
    await queue.enqueue(_job(n))
    [(entry, job)] = await queue.read(consumer, 1, 10)
    assert isinstance(job, Job)
    taken, token = await queue.take(consumer, entry, job)
    assert taken is Taken.OWNER and token.endswith(f"|{consumer}")
    return entry, job, token


async def test_a_claimer_takes_the_token_and_the_owner_is_fenced_out(queue: JobQueue) -> None:
    entry, job, token = await _owned(queue, "owner", 1)
    fence = queue.fence(job, token, give_up_seconds=1)
    assert await fence.holds()
    await asyncio.sleep(0.15)
    [(claimed, _)] = await queue.claim_lost("claimer", 0.1)
    assert claimed == entry
    taken = await queue.takeover(job.run_id, "claimer", grace_seconds=60)
    assert taken.verdict is TakeoverVerdict.TAKEN and taken.token.startswith("2|")
    # The owner wakes: no progress update, no answer, no audit; its heartbeat says it lost.
    assert not await fence.holds() and fence.lost
    assert not await queue.fence(job, token, 1).take_answer()
    assert await queue.touch("owner", [(entry, job.run_id, token)]) == [0]
    pending = await queue.redis.xpending_range(queue.stream, GROUP, "-", "+", 10)
    assert [p["consumer"] for p in pending] == ["claimer"]  # the touch did not take it back
    await queue.mark_answered(job.run_id, taken.token)
    again = await queue.takeover(job.run_id, "third", grace_seconds=60)
    assert again.verdict is TakeoverVerdict.DONE


async def test_an_owner_posting_its_answer_is_waited_for_then_taken_over(queue: JobQueue) -> None:
    _, job, token = await _owned(queue, "owner", 2)
    fence = queue.fence(job, token, give_up_seconds=1)
    assert await fence.take_answer() and await fence.take_answer()  # idempotent
    waiting = await queue.takeover(job.run_id, "claimer", grace_seconds=60)
    assert waiting.verdict is TakeoverVerdict.WAIT
    await asyncio.sleep(0.2)
    # The owner died mid-post: past the grace period the claimer answers.
    taken = await queue.takeover(job.run_id, "claimer", grace_seconds=0.1)
    assert taken.verdict is TakeoverVerdict.TAKEN
    assert not await queue.fence(job, token, 1).take_answer()


async def test_an_answered_job_delivered_again_is_never_run_again(queue: JobQueue) -> None:
    entry, job, token = await _owned(queue, "owner", 3)
    fence = queue.fence(job, token, give_up_seconds=1)
    assert await fence.take_answer()
    await fence.answered()
    # The group is destroyed and created again from the start: the entry comes again.
    await queue.redis.xgroup_destroy(queue.stream, GROUP)
    assert await queue.read("b", 10, 10) == []  # NOGROUP: the reader creates the group
    [(again, same)] = await queue.read("b", 10, 10)
    assert again == entry and isinstance(same, Job)
    assert (await queue.take("b", again, same))[0] is Taken.ANSWERED
    assert (await queue.take("nobody", again, same))[0] is Taken.NOT_OURS


async def test_a_fence_redis_lost_is_recreated_by_its_owner(queue: JobQueue) -> None:
    entry, job, token = await _owned(queue, "owner", 4)
    await queue.redis.delete(queue.fence_key(job.run_id), queue.stream)
    fence = queue.fence(job, token, give_up_seconds=1)
    assert await fence.holds()  # nobody took it over
    assert await queue.touch("owner", [(entry, job.run_id, token)]) == []
    assert await queue.redis.hget(queue.fence_key(job.run_id), "holder") == token
    assert await fence.take_answer()
    assert (await queue.takeover(job.run_id, "front", 60)).verdict is TakeoverVerdict.WAIT
    await queue.enqueue(_job(5))  # the front re-creates stream and group as it enqueues
    assert [j for _, j in await queue.read("c", 10, 10)] == [_job(5)]


async def test_a_fence_out_of_reach_gives_the_answer_up_and_never_posts() -> None:
    # Redis stays unreachable past the patience: the run neither posts nor counts as taken
    # over, so its worker leaves the job pending for a claimer (at least one answer).
    unreachable = connect_redis(f"redis://127.0.0.1:{closed_port()}/0", socket_timeout=0.2)
    try:
        fence = RunFence(unreachable, "sre-diag:jobs:fence:run-x", "1|w", give_up_seconds=0.5)
        assert not await fence.holds()  # a progress update is skipped
        assert not fence.lost  # ... which is not a takeover
        started = time.monotonic()
        assert not await fence.take_answer()
        assert 0.4 <= time.monotonic() - started < 3
        assert fence.lost and fence.gave_up
    finally:
        await unreachable.aclose()
