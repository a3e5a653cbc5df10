"""``check --model`` against an endpoint that writes like a real one, and against broken ones.

The endpoint is the fragmenting socket fake (``tests/model_wire.py``): answers split over writes
of 1–100 bytes, chunked, gzip or deflate; or a body that never ends, a gzip bomb, a declared
length past the cap, a trickle, a reset or a clean close mid-body, an encoding never offered.
Every probe answer is read whole within ``MAX_ANSWER_BYTES`` and the probe's time bound, and
each broken answer gives one stable reason — never a traceback or the body.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sre_diag.commands.model_probe import MAX_ANSWER_BYTES, Capability, ModelReport, probe_model
from tests.cli.capability_model import run_check_model
from tests.model_wire import FakeModel, chat_reply, tool_call_reply
from tests.tools.fake_loki import ONE_PIECE, Reply, Wire, json_reply, start_fake_loki

CANARY = "BODY-CANARY-5h2k"
DRAFT = json.dumps(
    {
        "conclusion": None,
        "analysis": [],
        "action_plan": [],
        "recommendations": [],
        "limitations": {"checked_scope": [], "missing_info": ["probe"]},
    }
)


def capable() -> list[Reply]:
    echo = tool_call_reply("call_probe_1", "probe_echo", {"word": "ok"})
    return [echo, echo, chat_reply(DRAFT)]


async def probe(fake: FakeModel, bound: float = 10.0) -> ModelReport:
    async with start_fake_loki(fake) as served:
        return await probe_model(
            base_url=served.url + "v1",
            api_key="sk-wire",
            model="wire-model",
            request_seconds=bound,
            endpoint="wire",
        )


WIRES = {
    "chunked-gzip-fragments": Wire(),
    "chunked-deflate": Wire(encoding="deflate"),
    "raw-deflate-with-length": Wire(chunked=False, encoding="deflate-raw"),
    # the zlib-or-raw decision needs two bytes: they arrive one write at a time
    "raw-deflate-one-byte-writes": Wire(chunked=False, encoding="deflate-raw", write_sizes=(1, 1)),
    "zlib-deflate-one-byte-writes": Wire(encoding="deflate", write_sizes=(1, 1)),
    "plain-length-fragments": Wire(chunked=False, encoding=None),
    "one-piece": ONE_PIECE,
}


@pytest.mark.parametrize("wire", WIRES.values(), ids=WIRES.keys())
async def test_every_capability_read_whole_however_the_answer_is_written(wire: Wire) -> None:
    fake = FakeModel(wire=wire, script=capable())
    report = await probe(fake)
    assert report.stopped == "" and report.failure == ""
    assert all(report.supports(c) for c in Capability), report.to_json()
    assert report.requests == 3 and not fake.script
    assert all(h.get("Accept-Encoding") == "gzip, deflate" for h in fake.headers)


OVERSIZED = {
    # never ends: bytes until the client hangs up
    "endless": (Wire(encoding=None, endless=True, write_sizes=(512, 8192)), json_reply({})),
    # 24 MB of JSON compressed to a few KB, with a small honest Content-Length
    "gzip-bomb": (
        Wire(chunked=False, encoding="gzip"),
        Reply(body=b'{"x": "' + b"A" * (24 << 20) + b'"}'),
    ),
    # the length is declared up front: refused before the body is read
    "declared-length": (
        Wire(chunked=False, encoding=None, write_sizes=(65536, 65536)),
        Reply(body=b" " * (MAX_ANSWER_BYTES + 1)),
    ),
    # an error answer is read under the same cap
    "huge-error-body": (
        Wire(write_sizes=(1, 4096)),
        Reply(status=400, body=b'{"e":"' + bytes(range(256)) * (6 << 12) + b'"}'),
    ),
}


@pytest.mark.parametrize("case", OVERSIZED.values(), ids=OVERSIZED.keys())
async def test_an_oversized_answer_stops_the_probing_with_a_stable_reason(
    case: tuple[Wire, Reply],
) -> None:
    wire, reply = case
    fake = FakeModel(wire=wire, script=[reply])
    report = await probe(fake)
    reason = f"answered more than {MAX_ANSWER_BYTES} bytes"
    assert report.stopped == f"endpoint wire {reason}"
    assert report.capabilities[Capability.TOOL_CALLING].reason == reason
    assert report.requests == 1
    # the peer was stopped long before it could send what it meant to
    assert fake.body_bytes_sent < 16 * MAX_ANSWER_BYTES


BROKEN = {
    "reset-mid-body": (Wire(reset_after=40), "unreachable (ReadError)"),
    "closed-mid-body": (Wire(close_after=40), "unreachable (RemoteProtocolError)"),
    "trickle": (
        Wire(write_sizes=(1, 1), pause=0.05, pause_every=1),
        "no answer within 1 s",
    ),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
async def test_a_broken_answer_stops_the_probing_within_its_bound(case: tuple[Wire, str]) -> None:
    wire, reason = case
    fake = FakeModel(wire=wire, script=capable())
    report = await probe(fake, bound=1.0)
    assert report.stopped == f"endpoint wire {reason}"
    assert report.requests == 1
    assert (report.capabilities[Capability.TOOL_CALLING].seconds or 0) < 5.0


UNDECODABLE = {
    "not-gzip": (("Content-Encoding", "gzip"), b"this is not gzip " + CANARY.encode()),
    "cut-gzip": (("Content-Encoding", "gzip"), gzip.compress(bytes(range(256)) * 64)[:-12]),
    "never-offered": (("Content-Encoding", "br"), CANARY.encode()),
    # a second gzip member, or bytes after the stream's end: never silently dropped
    "two-gzip-members": (("Content-Encoding", "gzip"), gzip.compress(b"{}") * 2),
    "gzip-then-garbage": (("Content-Encoding", "gzip"), gzip.compress(b"{}") + CANARY.encode()),
}


@pytest.mark.parametrize("status", [200, 400])
async def test_json_nested_deeper_than_the_parser_is_a_stable_reason(status: int) -> None:
    """Hostile nesting (a RecursionError in the JSON parser) is a body that is not JSON."""
    deep = b'{"error": ' * 20_000 + b"1" + b"}" * 20_000  # 220 KB: under the cap
    script = [Reply(status=status, body=deep), *capable()[1:]]
    report = await probe(FakeModel(wire=Wire(encoding=None), script=script))
    reason = report.to_json()["capabilities"]["tool_calling"]["reason"]
    assert reason == {200: "answered HTTP 200 with a body that is not JSON"}.get(
        status, "refused (HTTP 400)"
    )


@pytest.mark.parametrize("case", UNDECODABLE.values(), ids=UNDECODABLE.keys())
async def test_a_body_that_cannot_be_decoded_is_named_never_shown(
    case: tuple[tuple[str, str], bytes],
) -> None:
    header, body = case
    fake = FakeModel(wire=Wire(encoding=None), script=[Reply(body=body, headers=(header,))])
    report = await probe(fake)
    assert report.stopped == "endpoint wire answered a body that cannot be decoded"
    assert CANARY not in json.dumps(report.to_json())


async def test_check_model_prints_the_reason_and_no_body(tmp_path: Path) -> None:
    """The whole command against an oversized answer: exit 1, the reason in the JSON report,
    no traceback, nothing of the body."""
    filler = CANARY * 1000
    fake = FakeModel(
        wire=Wire(encoding=None, chunked=False),
        script=[Reply(body=json.dumps({"x": filler * 200}).encode())],
    )
    async with start_fake_loki(fake) as served:
        checked = await run_check_model(
            tmp_path,
            "--json",
            OPENAI_BASE_URL=served.url + "v1",
            OPENAI_API_KEY="sk-wire",
            DIAG_MODEL="wire-model",
        )
    assert checked.code == 1
    where = urlsplit(served.url).netloc
    assert (
        checked.model["failure"] == f"endpoint {where} answered more than {MAX_ANSWER_BYTES} bytes"
    )
    assert CANARY not in checked.out + checked.err
