"""``python -m sre_diag check --model`` as a process, against endpoints lacking each capability.

The endpoint is the scripted model server (``CapabilityModelServer``: the shipped double plus a
knob that answers 400 to requests carrying a given key). Each test asserts the exit code, the
verdict per capability with its reason, the recommended settings, the exact number of requests
and what each request body carried; no key and no raw error body may reach the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sre_diag.commands.model_probe import MAX_PROBE_SECONDS, probe_seconds, progress_every
from sre_diag.doubles.scripted_model import ModelStep, ToolCallSpec
from sre_diag.harness.agent import tool_definitions
from sre_diag.harness.model import DiagnosisLLM, draft_response_format
from tests.cli.capability_model import (
    REPO,
    CapabilityModelServer,
    Checked,
    Refusal,
    never,
    refuse_parallel_tool_calls,
    refuse_response_format_with_tools,
    run_check_model,
)
from tests.cli.test_check import closed_port
from tests.slack.support import redis_url

KEY = "sk-CANARY-model-key-6620"
MODEL = "probe-model-x"
DRAFT = json.dumps(
    {
        "conclusion": None,
        "analysis": [],
        "action_plan": [],
        "recommendations": [],
        "limitations": {"checked_scope": [], "missing_info": ["probe"]},
    }
)
CAPABILITIES = (
    "tool_calling", "parallel_tool_calls", "json_schema_with_tools", "usage", "max_tokens",
)  # fmt: skip

StartCapable = Callable[..., Awaitable[CapabilityModelServer]]


def echo(arguments: str | dict[str, Any] | None = None, **usage: Any) -> ModelStep:
    call = ToolCallSpec(
        "call_probe_1", "probe_echo", {"word": "ok"} if arguments is None else arguments
    )
    return ModelStep(tool_calls=(call,), **usage)


def draft(content: str = DRAFT, **usage: Any) -> ModelStep:
    return ModelStep(content=content, **usage)


def capable() -> list[ModelStep]:
    return [echo(), echo(), draft()]


@pytest.fixture
async def capability_server() -> AsyncIterator[StartCapable]:
    """Start servers; at teardown each must have served exactly its script."""
    servers: list[CapabilityModelServer] = []

    async def start(steps: Sequence[ModelStep], refuse: Refusal = never) -> CapabilityModelServer:
        server = await CapabilityModelServer(list(steps), refuse=refuse).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()
    for server in servers:
        server.assert_complete()


async def check(
    tmp_path: Path, server: CapabilityModelServer | None, *flags: str, **env: str
) -> Checked:
    base = server.base_url if server else f"http://127.0.0.1:{closed_port()}/v1"
    settings = {"OPENAI_BASE_URL": base, "OPENAI_API_KEY": KEY, "DIAG_MODEL": MODEL, **env}
    return await run_check_model(tmp_path, *flags, secrets=(KEY, "CANARY"), **settings)


def timed(found: dict[str, Any]) -> dict[str, Any]:
    """A capability's finding without its ``seconds``, which must be how long a request took."""
    seconds = found["seconds"]
    assert isinstance(seconds, float | int) and 0 <= seconds < 60, found
    return {k: v for k, v in found.items() if k != "seconds"}


def real_json_schema_tools() -> list[dict[str, Any]]:
    """The tool definitions a ``DIAG_STRUCTURED_OUTPUT=json_schema`` run sends (the harness's
    own LLM class preparing the harness's own strict tools)."""
    llm = DiagnosisLLM(model=MODEL, api_key="unused", strict=True)
    prepared = llm._prepare_chat_with_tools(list(tool_definitions(True)))
    tools: list[dict[str, Any]] = prepared["tools"]
    return tools


def assert_probe_bodies(server: CapabilityModelServer, count: int = 3) -> None:
    """The probes send what they claim, in order, and nothing else."""
    bodies = server.received
    assert len(bodies) == count
    assert server.authorizations == [f"Bearer {KEY}"] * count
    first = bodies[0]
    assert first["model"] == MODEL
    assert [t["function"]["name"] for t in first["tools"]] == ["probe_echo"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "probe_echo"}}
    assert 0 < first["max_tokens"] <= 64
    assert "parallel_tool_calls" not in first and "response_format" not in first
    if count < 2:
        return
    assert bodies[1] == {**first, "parallel_tool_calls": False}
    if count < 3:
        return
    third = bodies[2]
    assert third["model"] == MODEL
    assert third["response_format"] == draft_response_format()
    assert third["response_format"]["json_schema"]["strict"] is True
    assert third["tools"] == real_json_schema_tools()
    assert all(t["function"]["strict"] is True for t in third["tools"])
    assert [t["function"]["name"] for t in third["tools"]] == [
        "lookup_knowledge", "query_logs", "query_mysql",
    ]  # fmt: skip
    assert third["tool_choice"] == "none"
    assert 0 < third["max_tokens"] <= 300
    assert "parallel_tool_calls" not in third


# -- fully capable ---------------------------------------------------------------------------------


async def test_fully_capable_endpoint(tmp_path: Path, capability_server: StartCapable) -> None:
    server = await capability_server(capable())
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 0, checked.out + checked.err
    assert_probe_bodies(server)
    model = checked.model
    assert model["status"] == "OK"
    assert model["usable"] is True and model["failure"] is None
    assert model["requests"] == 3
    assert checked.supported() == dict.fromkeys(CAPABILITIES, True)
    assert model["recommended"] == {"DIAG_STRUCTURED_OUTPUT": "json_schema"}
    assert model["warnings"] == []
    part = next(c for c in checked.report["checks"] if c["name"] == "model")
    assert part["status"] == "OK" and "usable (5/5 capabilities)" in part["detail"]
    assert MODEL in part["detail"]

    text_server = await capability_server(capable())
    text = await check(tmp_path, text_server)
    assert text.code == 0, text.out
    lines = text.out.splitlines()
    model_line = next(i for i, line in enumerate(lines) if line.startswith("model "))
    shown = lines[model_line + 1 : model_line + 7]
    assert [line.split()[0] for line in shown] == ["yes"] * 5 + ["recommended"]
    assert "DIAG_STRUCTURED_OUTPUT=json_schema" in shown[5]
    assert "tool calling with JSON arguments" in shown[0]


def refuse_max_tokens(body: Mapping[str, Any]) -> str | None:
    """Like endpoints that do not take ``max_tokens`` (every diagnosis request carries it)."""
    return "max_tokens" if "max_tokens" in body else None


async def test_max_tokens_refused(tmp_path: Path, capability_server: StartCapable) -> None:
    server = await capability_server([], refuse=refuse_max_tokens)
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 1
    assert len(server.refused) == 3  # every probe carries max_tokens, as every run request does
    model = checked.model
    assert model["usable"] is False
    assert checked.supported()["max_tokens"] is False
    assert "(max_tokens)" in model["capabilities"]["max_tokens"]["reason"]
    assert model["failure"].startswith("max_tokens refused")


# -- tool calling missing: the model is unusable, exit 1 -------------------------------------------


async def test_text_instead_of_a_tool_call(tmp_path: Path, capability_server: StartCapable) -> None:
    server = await capability_server(
        [draft("I would echo ok."), draft("I would echo ok."), draft()]
    )
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 1
    assert_probe_bodies(server)
    model = checked.model
    assert model["status"] == "FAILED" and model["usable"] is False
    assert checked.supported()["tool_calling"] is False
    assert "no tool call came back (text instead" in model["capabilities"]["tool_calling"]["reason"]
    assert "tool calling missing" in model["failure"]
    assert model["recommended"] == {}
    assert any("unusable" in w for w in model["warnings"])
    text_server = await capability_server(
        [draft("I would echo ok."), draft("I would echo ok."), draft()]
    )
    text = await check(tmp_path, text_server)
    assert text.code == 1
    assert "MISSING         tool calling with JSON arguments: no tool call" in text.out
    assert "tool calling missing: the model is unusable" in text.out


async def test_arguments_that_are_not_json(tmp_path: Path, capability_server: StartCapable) -> None:
    server = await capability_server([echo("{word: ok"), echo("{word: ok"), draft()])
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 1
    assert_probe_bodies(server)
    found = timed(checked.model["capabilities"]["tool_calling"])
    assert found == {
        "supported": False, "reason": "the tool call's arguments are not a JSON object",
    }  # fmt: skip
    assert checked.supported()["parallel_tool_calls"] is True


# -- parallel_tool_calls refused: every diagnosis request carries it, exit 1 -----------------------


async def test_parallel_tool_calls_refused(tmp_path: Path, capability_server: StartCapable) -> None:
    server = await capability_server([echo(), draft()], refuse=refuse_parallel_tool_calls)
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 1
    assert_probe_bodies(server)
    assert server.refused == [server.received[1]]
    assert checked.supported() == {
        "tool_calling": True, "parallel_tool_calls": False,
        "json_schema_with_tools": True, "usage": True, "max_tokens": True,
    }  # fmt: skip
    reason = checked.model["capabilities"]["parallel_tool_calls"]["reason"]
    assert reason == "refused (HTTP 400 unsupported_parameter (parallel_tool_calls))"
    assert "parallel_tool_calls: false refused" in checked.model["failure"]
    assert checked.model["recommended"] == {}


# -- structured output: reported, a failure only when configured ----------------------------------


async def test_response_format_with_tools_refused(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    server = await capability_server([echo(), echo()], refuse=refuse_response_format_with_tools)
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 0, checked.out
    assert_probe_bodies(server)
    assert server.refused == [server.received[2]]
    found = timed(checked.model["capabilities"]["json_schema_with_tools"])
    assert found == {
        "supported": False, "reason": "refused (HTTP 400 unsupported_parameter (response_format))",
    }  # fmt: skip
    assert checked.model["recommended"] == {"DIAG_STRUCTURED_OUTPUT": "off"}
    assert any("no structured output" in w for w in checked.model["warnings"])

    configured = await capability_server([echo(), echo()], refuse=refuse_response_format_with_tools)
    strict = await check(tmp_path, configured, "--json", DIAG_STRUCTURED_OUTPUT="json_schema")
    assert strict.code == 1
    assert_probe_bodies(configured)
    assert strict.model["status"] == "FAILED"
    assert "DIAG_STRUCTURED_OUTPUT=json_schema is set" in strict.model["failure"]
    assert strict.model["recommended"] == {"DIAG_STRUCTURED_OUTPUT": "off"}


async def test_non_json_content_under_response_format(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    server = await capability_server([echo(), echo(), draft(f"```json\n{DRAFT}\n```")])
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 0, checked.out
    assert_probe_bodies(server)
    found = timed(checked.model["capabilities"]["json_schema_with_tools"])
    assert found == {"supported": False, "reason": "accepted, but the answer's content is not JSON"}
    assert checked.model["recommended"] == {"DIAG_STRUCTURED_OUTPUT": "off"}


# -- usage missing: budgets estimated, not a failure -----------------------------------------------


async def test_usage_missing(tmp_path: Path, capability_server: StartCapable) -> None:
    none = {"prompt_tokens": None, "completion_tokens": None}
    steps = [echo(**none), echo(**none), draft(**none)]
    server = await capability_server(steps)
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 0, checked.out
    assert_probe_bodies(server)
    assert checked.supported() == {**dict.fromkeys(CAPABILITIES, True), "usage": False}
    assert checked.model["capabilities"]["usage"]["reason"].startswith("an answer carried no usage")
    assert checked.model["recommended"] == {"DIAG_STRUCTURED_OUTPUT": "json_schema"}
    assert any("will be estimated" in w for w in checked.model["warnings"])

    text_server = await capability_server(steps)
    text = await check(tmp_path, text_server)
    assert text.code == 0
    assert "MISSING         usage reported: an answer carried no usage" in text.out
    assert "recommended     DIAG_STRUCTURED_OUTPUT=json_schema" in text.out
    assert "warning         usage not reported: token budgets" in text.out


async def test_negative_usage_counts_are_not_usage(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    server = await capability_server([echo(), echo(prompt_tokens=-5), draft()])
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 0
    assert checked.supported()["usage"] is False
    assert "non-negative" in checked.model["capabilities"]["usage"]["reason"]


# -- the endpoint refuses the key, or is not there: one request at most, exit 1 -------------------


async def test_key_refused_stops_after_one_request(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    body = json.dumps(
        {"error": {"message": f"Incorrect API key {KEY}", "type": "invalid_request_error",
                   "code": "invalid_api_key", "param": None}}
    )  # fmt: skip
    server = await capability_server([ModelStep(status=401, raw_body=body)])
    checked = await check(tmp_path, server, "--json")
    assert checked.code == 1
    assert_probe_bodies(server, count=1)
    model = checked.model
    assert model["requests"] == 1
    assert model["detail"] == (
        f"endpoint 127.0.0.1:{server.base_url.split(':')[2].split('/')[0]}"
        " refused the key (HTTP 401 invalid_api_key)"
    )
    assert checked.supported() == dict.fromkeys(CAPABILITIES, False)
    assert model["capabilities"]["parallel_tool_calls"]["reason"].startswith("not probed:")
    assert model["recommended"] == {} and model["warnings"] == []


async def test_closed_port(tmp_path: Path) -> None:
    checked = await check(tmp_path, None, "--json")
    assert checked.code == 1
    model = checked.model
    assert model["status"] == "FAILED" and model["requests"] == 1
    assert "unreachable (ConnectError)" in model["detail"]
    assert checked.supported() == dict.fromkeys(CAPABILITIES, False)
    assert model["capabilities"]["usage"]["reason"] == "not probed: no request was answered"
    text = await check(tmp_path, None)
    assert text.code == 1
    assert text.out.count("MISSING") == 5


# -- a slow endpoint: each probe waits up to the model timeout, says so, and says how long ---------


@pytest.mark.parametrize(
    ("model_timeout", "bound"),
    [(60.0, 60.0), (20.0, 20.0), (10.5, 10.5), (0.5, 0.5), (120.0, 120.0), (121.0, 120.0),
     (3600.0, 120.0)],
)  # fmt: skip
def test_a_probe_waits_up_to_the_model_timeout_within_120_s(
    model_timeout: float, bound: float
) -> None:
    assert probe_seconds(model_timeout) == bound == min(model_timeout, MAX_PROBE_SECONDS)


@pytest.mark.parametrize(
    ("bound", "every"), [(0.5, 1.0), (3, 1.0), (20, 2.0), (60, 5.0), (120, 5.0)]
)
def test_progress_lines_come_every_few_seconds(bound: float, every: float) -> None:
    assert progress_every(bound) == every


def _progress(err: str) -> list[str]:
    return [line.split(None, 1)[1] for line in err.splitlines() if line.startswith("model ")]


async def test_a_slow_first_answer_is_waited_for_with_progress(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    # Like a CPU-served model: the first request takes 2.5 s, within a 4 s model timeout.
    server = await capability_server([echo(delay_seconds=2.5), echo(), draft()])
    checked = await check(tmp_path, server, "--json", DIAG_MODEL_TIMEOUT_SECONDS="4")
    assert checked.code == 0, checked.out + checked.err
    assert_probe_bodies(server)
    found = checked.model["capabilities"]
    assert 2.5 <= found["tool_calling"]["seconds"] < 4
    assert found["parallel_tool_calls"]["seconds"] < 2.5
    assert found["usage"]["seconds"] is None  # no request of its own
    lines = _progress(checked.err)
    assert lines[0] == "probing tool_calling (waiting up to 4 s)"
    took = next(n for n, line in enumerate(lines) if line.startswith("tool_calling took "))
    waiting = lines[1:took]  # a line a second (a tenth of the bound, at least 1 s)
    assert 1 <= len(waiting) <= 3, lines
    tick = re.compile(r"still waiting for tool_calling: \d s of at most 4 s")
    assert all(tick.fullmatch(w) for w in waiting), waiting
    assert 2.5 <= float(lines[took].split()[2]) < 4
    assert [line.split()[:2] for line in lines[took + 1 :]] == [
        ["probing", "parallel_tool_calls"], ["parallel_tool_calls", "took"],
        ["probing", "json_schema_with_tools"], ["json_schema_with_tools", "took"],
    ]  # fmt: skip
    json.loads(checked.out)  # stdout is still exactly one JSON object

    text_server = await capability_server([echo(delay_seconds=1.2), echo(), draft()])
    text = await check(tmp_path, text_server, DIAG_MODEL_TIMEOUT_SECONDS="4")
    assert text.code == 0, text.out
    shown = next(line for line in text.out.splitlines() if "tool calling with JSON" in line)
    assert shown.endswith(" s)") and "(1." in shown


async def test_a_probe_slower_than_the_model_timeout_stops_at_it(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    server = await capability_server([echo(delay_seconds=5)])
    checked = await check(tmp_path, server, "--json", DIAG_MODEL_TIMEOUT_SECONDS="1.5")
    assert checked.code == 1
    model = checked.model
    assert model["requests"] == 1 and "no answer within 1.5 s" in model["detail"]
    assert 1.5 <= model["capabilities"]["tool_calling"]["seconds"] < 2.5
    assert model["capabilities"]["json_schema_with_tools"]["reason"].startswith("not probed:")
    assert _progress(checked.err)[-1].startswith("tool_calling took 1.")


async def test_an_answer_trickling_past_the_model_timeout_is_cut_at_it(tmp_path: Path) -> None:
    # Headers at once, then a byte every 0.2 s forever: no single read waits long, the whole
    # answer does; the bound is from the probe's start to its whole answer.
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(b"1\r\n \r\n")
                await writer.drain()
                await asyncio.sleep(0.2)

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": KEY,
               "DIAG_MODEL": MODEL, "DIAG_MODEL_TIMEOUT_SECONDS": "1.5"}  # fmt: skip
        checked = await run_check_model(tmp_path, "--json", secrets=(KEY,), **env)
    finally:
        server.close()
    assert checked.code == 1
    assert "no answer within 1.5 s" in checked.model["detail"]
    assert checked.model["requests"] == 1
    # cut at the bound although every read got a byte well within it
    assert 1.5 <= checked.model["capabilities"]["tool_calling"]["seconds"] < 2.5


@pytest.mark.parametrize(("setting", "bound"), [("60", "60"), ("45.5", "45.5"), ("600", "120")])
async def test_the_bound_in_use_is_the_model_timeout_not_an_older_cap(
    tmp_path: Path, capability_server: StartCapable, setting: str, bound: str
) -> None:
    # Cheap: a fast endpoint, and the bound each probe waits with is the one it announces.
    server = await capability_server(capable())
    checked = await check(tmp_path, server, "--json", DIAG_MODEL_TIMEOUT_SECONDS=setting)
    assert checked.code == 0, checked.out + checked.err
    starts = [line for line in _progress(checked.err) if line.startswith("probing ")]
    assert starts == [
        f"probing {name} (waiting up to {bound} s)"
        for name in ("tool_calling", "parallel_tool_calls", "json_schema_with_tools")
    ]


# -- every part at once (issue 22: imports raced between the runbook and the model probes) -------

# Slow imports, as on a loaded machine: a finder in the child's ``sitecustomize`` that waits 20 ms
# each time a ``llama_index`` module is looked up (about 420 of them: some 8 s in all, while
# that module's import lock is held, as a cold disk or a busy CPU holds it). Nothing of the code
# under test is replaced.
SLOW_IMPORTS = """
import sys, time

class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("llama_index"):
            time.sleep(0.02)
        return None

sys.meta_path.insert(0, _Slow())
"""


async def test_every_part_and_the_model_at_once_with_slow_imports(
    tmp_path: Path, capability_server: StartCapable
) -> None:
    """Runbooks (LlamaIndex, read in a thread), logs, Redis, the audit sink and the model probe
    (LlamaIndex's tool and Draft schemas) in one ``check`` while importing LlamaIndex takes
    some 8 s: every part OK. Imports happen once, before any probe starts its clock, so none is
    starved into a false "no answer within 5 s" and no import is seen half-initialised."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_IMPORTS, encoding="utf-8")
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "pool.md").write_text("# Pool\n\n## Fix\n\nroll back\n", encoding="utf-8")
    (tmp_path / "logs" / "payment-api" / "2026-11-28").mkdir(parents=True)
    server = await capability_server(capable())
    checked = await check(
        tmp_path, server, "--json",
        PYTHONPATH=f"{site}{os.pathsep}{REPO}",
        DIAG_KNOWLEDGE_DIR=str(runbooks), DIAG_LOGS_SOURCE=str(tmp_path / "logs"),
        DIAG_REDIS_URL=redis_url(),
    )  # fmt: skip
    statuses = {c["name"]: (c["status"], c["detail"]) for c in checked.report["checks"]}
    assert {name: status for name, (status, _) in statuses.items()} == {
        "runbooks": "OK", "logs": "OK", "mysql": "NOT_CONFIGURED", "redis": "OK",
        "audit": "OK", "slack": "NOT_CONFIGURED", "model": "OK",
    }, statuses  # fmt: skip
    assert checked.code == 0, checked.out + checked.err
    assert_probe_bodies(server)
