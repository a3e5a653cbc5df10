"""The run queue (``plugin.slack.jobs.JobQueue``) against the machine's Redis: delivery, depth,
lost-job claims and trimming — the stream keeps every entry that is waiting or running and drops
the acknowledged ones.

Each test uses a stream name of its own in a Redis database no other test writes (``_DB``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from plugin.slack.jobs import GROUP, Job, JobQueue, Poison, Taken
from tests.slack.support import require_redis

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
