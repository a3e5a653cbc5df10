"""One audit record per queued run, whoever answers it.

Real processes (``serve --http --workers 0`` as the front, two ``sre-diag worker`` processes),
a redis-server of the test's own, the recording Slack API and the scripted model. The worker
that owns a run takes its answer token, its first post is rate limited (a 429 with
``Retry-After``), and it is frozen (SIGSTOP) right then — between taking its answer and posting
it — past the grace period a claimer gives an owner that is posting. The other worker takes the
run over and answers it as lost (WORKER_LOST, with its audit record); the owner wakes (SIGCONT)
and posts nothing, and writes no record of its own: the run has exactly one.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.fence import NO_FENCE, RunFence, TakeoverVerdict, takeover
from tests.conftest import StartServer
from tests.harness.support import draft_json
from tests.slack.redis_server import own_redis
from tests.slack.serve_support import ServeProcess, mention_body, post_signed
from tests.slack.support import MANIFEST_SCOPES
from tests.slack.test_fencing import (
    CLAIM,
    _answers,
    _env,
    _front,
    _no_traceback,
    _outcome,
    _runs_audited,
    _stop,
    _until,
    _worker,
)

GRACE = 60.0
"""How long a claimer lets an owner that is posting its answer finish (its floor)."""


def _is_answer(params: dict[str, Any]) -> bool:
    return bool(params.get("metadata"))


async def test_whoever_claims_the_audit_record_first_writes_it_alone(tmp_path: Path) -> None:
    """The record is claimed in the run's fence, once: an owner taken over while it stalled
    cannot claim it after the claimer did, nor can a claimer after the owner did; asking again
    (a lost reply) gives the same answer."""
    async with own_redis(tmp_path) as server:
        redis = server.client()
        for owner_first in (False, True):
            key = f"diag:jobs:fence:run-{int(owner_first)}"
            await redis.hset(key, mapping={"n": 1, "holder": "1|owner"})
            owner = RunFence(redis, key, "1|owner", give_up_seconds=2.0)
            assert await owner.take_answer()
            if owner_first:
                assert await owner.claim_audit()
            await asyncio.sleep(0.3)  # the owner stalls past the grace period
            taken = await takeover(redis, key, "claimer", 0.2)
            assert taken.verdict is TakeoverVerdict.TAKEN and taken.stale
            claimer = RunFence.holding(redis, key, taken.token, give_up_seconds=2.0)
            assert await claimer.claim_audit() is not owner_first
            assert await claimer.claim_audit() is not owner_first  # the same, asked again
            assert await owner.claim_audit() is owner_first
        await redis.aclose()
        assert await NO_FENCE.claim_audit()  # in-process: nobody else can write it


async def test_a_worker_paused_between_taking_and_posting_its_answer_leaves_one_record(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=1)])
    thread = "1764300000.002001"
    async with own_redis(tmp_path) as redis, RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        slack.fail("chat.postMessage", status=429, error="ratelimited", retry_after=5,
                   match=_is_answer)  # fmt: skip
        env = _env(tmp_path, slack, model.base_url, redis)
        front, port = await _front(env, tmp_path)
        first, second = await _worker(env, tmp_path), await _worker(env, tmp_path)
        processes: tuple[ServeProcess, ...] = (first, second, front)
        try:
            assert await post_signed(port, mention_body("EvAUDT0001", thread)) == 200
            owner_posted = lambda: any(_is_answer(c.params) for c in slack.calls)  # noqa: E731
            await _until(owner_posted, 30, "the owner's first answer attempt")
            owner, other = (first, second) if "taken by" in first.stderr else (second, first)
            owner.send(signal.SIGSTOP)  # it holds its answer token, rate limited, not posted
            await _until(lambda: len(_answers(slack, thread)) == 1, GRACE + CLAIM + 30,
                         "the claimer's WORKER_LOST")  # fmt: skip
            owner.send(signal.SIGCONT)
            await owner.wait_for_log("run fenced", within=30)
            await asyncio.sleep(CLAIM)  # time enough for a second answer, if one were coming
            await _stop(first, second, front)
        finally:
            for process in processes:
                await process.aclose()
    answers = _answers(slack, thread)
    assert [_outcome(a) for a in answers] == ["WORKER_LOST"], answers
    assert "its worker was lost" in other.stderr
    assert model.request_count == 1
    audited = _runs_audited(tmp_path)
    assert list(audited.values()) == [1], audited
    records = [
        json.loads(line)
        for path in (tmp_path / "audit").glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    assert "WORKER_LOST" in json.dumps(records)
    _no_traceback(front, first, second)
