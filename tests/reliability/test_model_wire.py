"""The model requests of a run, read from an endpoint that writes like a real one.

The endpoint is the fragmenting socket fake (``tests/model_wire.py``). A normal answer, however
it is written (writes of 1–100 bytes, chunked, gzip, deflate, one piece), is read whole; an
answer larger than the cap (endless, a gzip bomb, a declared length) ends the run
``MODEL_ERROR OVERSIZED_RESPONSE`` with the memory bounded; a reset or a close mid-body
``CONNECTION``; an undecodable body ``BAD_RESPONSE``; a trickle ``TIMEOUT`` at the model timeout,
or ``DEADLINE_EXCEEDED`` at the run's deadline when that comes first. After each, the same
harness (the same connection pool) still serves a run.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path
from typing import Any

import pytest

from sre_diag.contract.result import ExecutionResult, FailureCode, Outcome
from sre_diag.errors import StopReason
from sre_diag.harness.model import MODEL_ANSWER_MAX_BYTES, answer_cap
from sre_diag.harness.run import Harness
from tests.harness.support import adapters, draft_json
from tests.model_wire import FakeModel, chat_reply, tool_call_reply
from tests.reliability.support import LOGS_WINDOW, QUERY, audit_of, build
from tests.tools.fake_loki import ONE_PIECE, Reply, Wire, json_reply, start_fake_loki

NO_CONCLUSION = draft_json(conclusion=False)
LIVENESS_SECONDS = 30.0  # a hung run fails the test instead of hanging the suite
TRICKLE = Wire(write_sizes=(1, 1), pause=0.05, pause_every=1)  # 20 bytes a second


async def run(harness: Harness) -> ExecutionResult:
    return await asyncio.wait_for(harness.diagnose(QUERY), LIVENESS_SECONDS)


async def still_serves(harness: Harness, fake: FakeModel) -> None:
    """The next run on the same harness and pool, over a healthy wire, ends with a Draft."""
    fake.wire = Wire()
    fake.script.append(chat_reply(NO_CONCLUSION))
    assert (await run(harness)).outcome is Outcome.DRAFT


WIRES = {
    "chunked-gzip-fragments": Wire(),
    "chunked-deflate": Wire(encoding="deflate"),
    "raw-deflate-with-length": Wire(chunked=False, encoding="deflate-raw"),
    "plain-length-fragments": Wire(chunked=False, encoding=None),
    "one-piece": ONE_PIECE,
}


@pytest.mark.parametrize("wire", WIRES.values(), ids=WIRES.keys())
async def test_a_run_reads_every_answer_whole_however_it_is_written(
    tmp_path: Path, wire: Wire
) -> None:
    logs = {"service": "payment-api", **LOGS_WINDOW}
    script = [tool_call_reply("c1", "query_logs", {"input": logs}), chat_reply(NO_CONCLUSION)]
    async with start_fake_loki(FakeModel(wire=wire, script=script)) as fake:
        harness = build(fake.base_url, tmp_path, adapters())
        result = await run(harness)
        assert result.outcome is Outcome.DRAFT, result
        assert result.usage.model_calls == 2 and result.usage.tool_calls == 1
        assert not fake.script and len(fake.bodies) == 2
        assert all(h.get("Accept-Encoding") == "gzip, deflate" for h in fake.headers)


def _bomb() -> Reply:
    """Gigabyte-class in spirit: 8 × the cap of text, gzip'd into a small, honestly declared
    body."""
    body = b'{"choices": [{"message": {"content": "' + b"A" * (8 * MODEL_ANSWER_MAX_BYTES)
    return Reply(body=body + b'"}}]}')


OVERSIZED = {
    "endless": (Wire(encoding=None, endless=True, write_sizes=(512, 8192)), json_reply({})),
    "gzip-bomb": (Wire(chunked=False, encoding="gzip", write_sizes=(1, 4096)), _bomb()),
    "declared-length": (
        Wire(chunked=False, encoding=None, write_sizes=(65536, 65536)),
        Reply(body=b" " * (MODEL_ANSWER_MAX_BYTES + 1)),
    ),
}


@pytest.mark.parametrize("case", OVERSIZED.values(), ids=OVERSIZED.keys())
async def test_an_answer_past_the_cap_fails_the_run_oversized(
    tmp_path: Path, case: tuple[Wire, Reply]
) -> None:
    wire, reply = case
    async with start_fake_loki(FakeModel(wire=wire, script=[reply])) as fake:
        table = adapters()
        harness = build(fake.base_url, tmp_path, table)
        result = await run(harness)
        assert result.outcome is Outcome.FAILED and result.failure is not None
        assert (result.failure.code, result.failure.detail) == (
            FailureCode.MODEL_ERROR,
            "OVERSIZED_RESPONSE",
        )
        assert all(not adapter.calls for adapter in table.values())
        assert len(audit_of(tmp_path, result)["rounds"]) == 1
        # Refused as it arrived: the peer could not push much more than the cap (what is in
        # flight in the socket buffers) before the client hung up.
        assert fake.body_bytes_sent < 4 * MODEL_ANSWER_MAX_BYTES
        await still_serves(harness, fake)


def test_the_cap_leaves_room_for_the_largest_draft_escaped() -> None:
    assert answer_cap(16384) == MODEL_ANSWER_MAX_BYTES
    big = 2 * MODEL_ANSWER_MAX_BYTES
    assert answer_cap(big) >= 6 * big  # every character a \uXXXX escape


BROKEN: dict[str, tuple[Wire, Reply, FailureCode, str]] = {
    "reset-mid-body": (Wire(reset_after=40), chat_reply(NO_CONCLUSION), FailureCode.MODEL_ERROR,
                       "CONNECTION"),
    "closed-mid-body": (Wire(close_after=40), chat_reply(NO_CONCLUSION), FailureCode.MODEL_ERROR,
                        "CONNECTION"),
    "not-gzip": (Wire(encoding=None),
                 Reply(body=b"plain text", headers=(("Content-Encoding", "gzip"),)),
                 FailureCode.MODEL_ERROR, "BAD_RESPONSE"),
    "never-offered-encoding": (Wire(encoding=None),
                               Reply(body=b"{}", headers=(("Content-Encoding", "zstd"),)),
                               FailureCode.MODEL_ERROR, "BAD_RESPONSE"),
}  # fmt: skip


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
async def test_a_broken_answer_fails_the_run_with_its_code(
    tmp_path: Path, case: tuple[Wire, Reply, FailureCode, str]
) -> None:
    wire, reply, code, detail = case
    async with start_fake_loki(FakeModel(wire=wire, script=[reply])) as fake:
        harness = build(fake.base_url, tmp_path, adapters())
        result = await run(harness)
        assert result.failure is not None
        assert (result.outcome, result.failure.code, result.failure.detail) == (
            Outcome.FAILED,
            code,
            detail,
        )
        await still_serves(harness, fake)


async def _trickled(tmp_path: Path, **env: Any) -> tuple[ExecutionResult, float, FakeModel]:
    async with start_fake_loki(FakeModel(wire=TRICKLE, script=[chat_reply(NO_CONCLUSION)])) as fake:
        harness = build(fake.base_url, tmp_path, adapters(), **env)
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await run(harness)
        took = loop.time() - started
        sent = fake.body_bytes_sent
        await asyncio.sleep(0.3)
        assert fake.body_bytes_sent <= sent + 10  # the client hung up: nothing more goes out
        await still_serves(harness, fake)
        return result, took, fake


async def test_a_trickling_answer_ends_at_the_model_timeout(tmp_path: Path) -> None:
    """Every read is quick (a byte each 50 ms, far under any read timeout), the whole answer
    takes ~20 s: the request's own bound (``DIAG_MODEL_TIMEOUT_SECONDS``) ends it."""
    result, took, _ = await _trickled(tmp_path, DIAG_MODEL_TIMEOUT_SECONDS=1)
    assert result.failure is not None
    assert (result.outcome, result.failure.code, result.failure.detail) == (
        Outcome.FAILED,
        FailureCode.MODEL_ERROR,
        "TIMEOUT",
    )
    assert took < LIVENESS_SECONDS / 2, took


async def test_a_trickling_answer_cannot_hold_a_run_past_its_deadline(tmp_path: Path) -> None:
    result, took, _ = await _trickled(
        tmp_path, DIAG_DEADLINE_SECONDS=1, DIAG_MODEL_TIMEOUT_SECONDS=60
    )
    assert (result.outcome, result.stop_reason) == (
        Outcome.STOPPED,
        StopReason.DEADLINE_EXCEEDED,
    )
    assert took < LIVENESS_SECONDS / 2, took


async def test_a_gzip_answer_is_counted_decoded_not_on_the_wire(tmp_path: Path) -> None:
    """Just under the cap decoded (a few KB on the wire): read, and refused as a Draft by the
    gate (too large for ``DIAG_MAX_DRAFT_BYTES``), not by the HTTP client."""
    content = "x" * (MODEL_ANSWER_MAX_BYTES - 4096)
    reply = chat_reply(content)
    assert len(gzip.compress(reply.body)) < MODEL_ANSWER_MAX_BYTES // 100
    async with start_fake_loki(FakeModel(wire=Wire(write_sizes=(1, 4096)), script=[reply])) as f:
        harness = build(f.base_url, tmp_path, adapters())
        result = await run(harness)
        assert result.failure is not None
        assert (result.failure.code, result.failure.detail) == (
            FailureCode.INVALID_DRAFT,
            "OVERSIZED",
        )
