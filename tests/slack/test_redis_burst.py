"""A burst of mentions never meets "state unreachable" because of the client's own pool.

redis-py's default asyncio pool refuses the 101st concurrent command at once
(``MaxConnectionsError``); the front declined every mention past the hundredth of a burst as
"shared run state unreachable". Every Redis client of the product waits for a free connection.
"""

from __future__ import annotations

import asyncio
import uuid

from sre_diag.slack.job_entry import Job
from sre_diag.slack.jobs import JobQueue
from sre_diag.slack.state import REDIS_MAX_CONNECTIONS, Lease, RedisState, connect_redis
from tests.slack.support import redis_url, require_redis

_DB = 12


async def test_more_concurrent_commands_than_connections_all_succeed() -> None:
    admin = await require_redis(_DB)
    namespace = f"test-burst-{uuid.uuid4().hex}"
    state = RedisState(redis_url(_DB), namespace=namespace)
    burst = REDIS_MAX_CONNECTIONS + 300
    try:
        leases = [Lease(f"T:A:C:{i}", f"run-{i}", "C1") for i in range(burst)]
        events = await asyncio.gather(
            *(state.claim_event(f"ev-{i}", 60) for i in range(burst)), return_exceptions=True
        )
        threads = await asyncio.gather(
            *(state.claim_thread(lease, 60) for lease in leases), return_exceptions=True
        )
        again = await asyncio.gather(*(state.claim_event(f"ev-{i}", 60) for i in range(10)))
    finally:
        await state.aclose()
        keys = [key async for key in admin.scan_iter(f"{namespace}:*")]
        if keys:
            await admin.delete(*keys)
        await admin.aclose()
    assert events == [True] * burst
    assert threads == [True] * burst
    assert again == [False] * 10  # still a dedupe: each event claimed once


async def test_a_burst_of_jobs_is_queued_whole() -> None:
    admin = await require_redis(_DB)
    client = connect_redis(redis_url(_DB))
    queue = JobQueue(client, f"test-burst-jobs:{uuid.uuid4().hex}")
    try:
        await queue.ensure_group()
        jobs = [
            Job(f"k{i}", f"run-{i}", "T:A", "C1", f"1.{i}", "q", None, None, None, False, None)
            for i in range(REDIS_MAX_CONNECTIONS + 100)
        ]
        await asyncio.gather(*(queue.enqueue(job) for job in jobs))
        assert (await queue.depth()).waiting == len(jobs)
    finally:
        await admin.delete(queue.stream)
        await client.aclose()
        await admin.aclose()
