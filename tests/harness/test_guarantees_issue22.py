"""Guarantees that survived a mutation pass (issue 22 item 8), each pinned by a test here.

- A tool call id is used exactly as the model wrote it — never cut, case-folded or trimmed — at
  the adapter, in the ledger (``progress.checks``), in the tool message, in the audit record and
  in the citation check: long ids of odd characters (quotes, CJK, emoji, whitespace, ``<&>``).
- ``DIAG_MAX_OBSERVATION_BYTES`` counts UTF-8 bytes: CJK-only evidence (3 bytes a character)
  at the cap is cut to the cap in bytes, not in characters.
- The system prompt carries the Draft's generated JSON schema, in every bundled language: it is
  parsed back out of the prompt the model received.
- ``previous_observation.tool_call_id`` must name the pending call exactly: a near-miss
  (``C1 `` for ``c1``) is ``PREVIOUS_OBSERVATION_MISMATCH`` and runs nothing.

(The fifth, "the adapter call shielded from cancellation", is killed by
``tests/harness/test_cut_off_calls.py``: the adapter must see its cancellation at the deadline
and at Cancel.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sre_diag.contract.draft import draft_json_schema
from sre_diag.contract.prompts import BUNDLED_LANGUAGES, SCHEMA_SLOT, load_prompt
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.tools.base import Ready, ToolName
from sre_diag.tools.schemas import KnowledgeItem
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    ScriptedAdapter,
    adapters,
    audit_records,
    call,
    default_ready,
    draft_json,
    final_step,
    harness,
    tool_messages,
    tool_step,
)

QUERY = DiagnosisRequest("payment-api 5xx since 10:05 UTC")

# Long ids of odd characters, each within the 128-character bound; the first two share their
# first eight characters (an id cut there would name both).
ODD_IDS = (
    ' call "一" 🚀\t<&> ' + "長" * 100,
    ' call "一" 🚀\t<&> ' + "短" * 99 + "\u200b",
    "CALL-'二'\\ <b>&amp;</b>\n 🧪 " + "x" * 90 + "  ",
)


# -- ids exactly as written ---------------------------------------------------------------------


async def test_odd_long_tool_call_ids_are_used_exactly_everywhere(
    model_server: StartServer, tmp_path: Path
) -> None:
    first, second, third = ODD_IDS
    assert all(len(i) <= 128 for i in ODD_IDS) and len({i[:8] for i in ODD_IDS}) == 2
    server = await model_server(
        [
            tool_step(call(first, "query_logs", LOGS_INPUT)),
            tool_step(call(second, "lookup_knowledge", {"query": "pool"}, (first, "GAINED"))),
            tool_step(
                call(third, "query_mysql", {"sql": "SELECT 1", "purpose": "p"}, (second, "GAINED"))
            ),
            final_step(draft_json([first, second, third])),
        ]
    )
    table = adapters()
    h = harness(server, tmp_path, table)
    result = await h.diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    # At each adapter.
    seen = [c.tool_call_id for tool in ToolName for c in table[tool].calls]
    assert sorted(seen) == sorted(ODD_IDS)
    assert [c.tool_call_id for c in table[ToolName.QUERY_LOGS].calls] == [first]
    assert [c.tool_call_id for c in table[ToolName.LOOKUP_KNOWLEDGE].calls] == [second]
    assert [c.tool_call_id for c in table[ToolName.QUERY_MYSQL].calls] == [third]
    # In the ledger, as the result shows it: every call READY and evaluated (the exact id was
    # matched as the pending one each time).
    assert result.progress is not None
    checks = [(c.tool_call_id, c.status) for c in result.progress.checks]
    assert checks == [(first, "READY"), (second, "READY"), (third, "READY")]
    # In the tool messages the model got: the message's id and the observation's own.
    sent = tool_messages(server.requests[-1])
    assert [m["tool_call_id"] for m in sent] == [first, second, third]
    assert [m["observation"]["tool_call_id"] for m in sent] == [first, second, third]
    assert [m["observation"]["evidence_status"] for m in sent] == ["READY"] * 3
    # In the audit record, invocations and citations.
    (record,) = audit_records(tmp_path)
    assert [i["tool_call_id"] for i in record["invocations"]] == [first, second, third]
    assert sorted(record["cited_tool_call_ids"]) == sorted(ODD_IDS)


@pytest.mark.parametrize(
    "cited",
    [ODD_IDS[0][:8], ODD_IDS[0].strip(), ODD_IDS[0].upper(), ODD_IDS[1]],
    ids=["first-8-chars", "stripped", "upper-cased", "the-sibling-never-called"],
)
async def test_a_citation_must_name_the_id_exactly(
    model_server: StartServer, tmp_path: Path, cited: str
) -> None:
    server = await model_server(
        [tool_step(call(ODD_IDS[0], "query_logs", LOGS_INPUT)), final_step(draft_json([cited]))]
    )
    result = await harness(server, tmp_path).diagnose(QUERY)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None
    assert (result.failure.code, result.failure.detail) == ("INVALID_DRAFT", "UNKNOWN_CITATION")


# -- the observation cap counts UTF-8 bytes ---------------------------------------------------


def _cjk_items(count: int) -> list[KnowledgeItem]:
    return [
        KnowledgeItem(
            title="支付服务排查手册",
            heading=f"第{n}步",
            path="支付.md",
            score=1.0,
            snippet="数据库连接池耗尽" * 20,
        )
        for n in range(count)
    ]


@pytest.mark.parametrize("cap", [1024, 4096])
async def test_cjk_only_evidence_is_cut_to_the_cap_in_bytes(
    model_server: StartServer, tmp_path: Path, cap: int
) -> None:
    items = _cjk_items(40)  # some 20 KB of three-byte characters
    knowledge = ScriptedAdapter(ToolName.LOOKUP_KNOWLEDGE, lambda c: Ready(items=items))
    server = await model_server(
        [tool_step(call("c1", "lookup_knowledge", {"query": "连接池"})),
         final_step(draft_json(["c1"]))]
    )  # fmt: skip
    h = harness(
        server, tmp_path, adapters(lookup_knowledge=knowledge),
        DIAG_MAX_OBSERVATION_BYTES=str(cap),
    )  # fmt: skip
    result = await h.diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    (message,) = tool_messages(server.requests[-1])
    content: str = message["content"]
    size = len(content.encode("utf-8"))
    assert size <= cap, (size, len(content))
    # Cut item by item: as many as fit, and not one more (the next would pass the cap).
    observation = message["observation"]
    kept = observation["item_count"]
    assert observation["truncated"] is True and 0 < kept < len(items)
    one_item = json.dumps(
        items[0].model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
    )
    assert cap - size < len(one_item.encode("utf-8")) + 2  # the next item (and a comma) did not fit
    (record,) = audit_records(tmp_path)
    (invocation,) = record["invocations"]
    assert invocation["observation_bytes"] == size


# -- the Draft schema in the system prompt ---------------------------------------------------


@pytest.mark.parametrize("language", BUNDLED_LANGUAGES)
async def test_the_system_prompt_carries_the_draft_schema(
    model_server: StartServer, tmp_path: Path, language: str
) -> None:
    server = await model_server([final_step(draft_json(conclusion=False))])
    result = await harness(server, tmp_path, DIAG_PROMPT=language).diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT
    system = next(m["content"] for m in server.requests[0]["messages"] if m["role"] == "system")
    before, after = load_prompt(f"diagnosis_system.{language}").split(SCHEMA_SLOT)
    assert system.startswith(before) and system.endswith(after)
    schema, end = json.JSONDecoder().raw_decode(system, len(before))
    assert system[end:] == after  # the schema is the whole slot
    assert schema == json.loads(draft_json_schema())
    # What the model must produce, read from the prompt itself.
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert sorted(schema["required"]) == sorted(
        ["conclusion", "analysis", "action_plan", "recommendations", "limitations"]
    )
    assert set(schema["properties"]) == set(schema["required"])


# -- previous_observation names the pending call exactly --------------------------------------


@pytest.mark.parametrize("near_miss", ["C1 ", "C1", "c1 ", " c1", "c１"])
async def test_a_near_miss_previous_observation_id_is_a_mismatch(
    model_server: StartServer, tmp_path: Path, near_miss: str
) -> None:
    logs = ScriptedAdapter(ToolName.QUERY_LOGS, lambda c: default_ready(ToolName.QUERY_LOGS))
    knowledge = ScriptedAdapter(ToolName.LOOKUP_KNOWLEDGE)
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "lookup_knowledge", {"query": "pool"}, (near_miss, "GAINED"))),
            tool_step(call("c3", "lookup_knowledge", {"query": "pool"}, ("c1", "GAINED"))),
            final_step(draft_json(["c1", "c3"])),
        ]
    )
    h = harness(server, tmp_path, adapters(query_logs=logs, lookup_knowledge=knowledge))
    result = await h.diagnose(QUERY)
    assert result.outcome is Outcome.DRAFT, result.to_json()
    refused = tool_messages(server.requests[2])[-1]["observation"]
    assert refused["tool_call_id"] == "c2"
    assert refused["evidence_status"] == "REJECTED"
    assert refused["error_code"] == "PREVIOUS_OBSERVATION_MISMATCH"
    assert refused["expected_previous_tool_call_id"] == "c1"
    # The refused call ran nothing; the exact id then did.
    assert [c.tool_call_id for c in knowledge.calls] == ["c3"]
    assert result.progress is not None
    statuses = [(c.tool_call_id, c.status) for c in result.progress.checks]
    assert statuses == [("c1", "READY"), ("c2", "REJECTED"), ("c3", "READY")]
