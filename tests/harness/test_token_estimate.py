"""Without reported usage the token estimate counts the whole request (issue 20 item 5): the
messages AND the tool definitions, whose descriptions carry the catalogues (services, tables,
runbook titles) — leaving them out counted far less than was sent."""

from __future__ import annotations

import json
from pathlib import Path

from sre_diag.contract.request import DiagnosisRequest
from sre_diag.doubles.scripted_model import ModelStep
from tests.conftest import StartServer
from tests.harness.support import draft_json, harness

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC")


def _bytes(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


async def test_the_estimate_counts_tool_definitions(
    model_server: StartServer, tmp_path: Path
) -> None:
    step = ModelStep(
        content=draft_json(conclusion=False), prompt_tokens=None, completion_tokens=None
    )
    server = await model_server([step])
    result = await harness(server, tmp_path).diagnose(QUERY)
    sent = server.requests[0]
    tools, messages = sent["tools"], sent["messages"]
    assert len(tools) == 3
    content = sum(len(str(m.get("content") or "").encode("utf-8")) for m in messages)
    # About 4 bytes a token: at least the definitions and the message texts as sent.
    assert result.usage.prompt_tokens * 4 >= _bytes(tools) + content
    assert result.usage.prompt_tokens * 4 <= 2 * _bytes(sent) + 4096  # and not wildly more


async def test_the_estimate_counts_the_response_format_under_structured_output(
    model_server: StartServer, tmp_path: Path
) -> None:
    step = ModelStep(
        content=draft_json(conclusion=False), prompt_tokens=None, completion_tokens=None
    )
    server = await model_server([step])
    built = harness(server, tmp_path, DIAG_STRUCTURED_OUTPUT="json_schema")
    result = await built.diagnose(QUERY)
    sent = server.requests[0]
    assert "response_format" in sent
    content = sum(len(str(m.get("content") or "").encode("utf-8")) for m in sent["messages"])
    counted = _bytes(sent["tools"]) + _bytes(sent["response_format"]) + content
    assert result.usage.prompt_tokens * 4 >= counted
