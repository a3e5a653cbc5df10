"""Prompts as files, two languages (issue 13 item 6): ``DIAG_PROMPT`` picks the system prompt,
the tool descriptions and the observation hints the model receives; a bad value is
``INVALID_SETTINGS``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sre_diag.contract.prompts import BUNDLED_LANGUAGES, HINT_CODES, prompt_set
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import Outcome
from sre_diag.doubles.scripted_model import ToolCallSpec
from sre_diag.harness.run import Harness
from sre_diag.settings import Settings, describe_invalid_settings
from tests.cli.test_cli import run_cli, single_json
from tests.conftest import StartServer
from tests.harness.support import (
    LOGS_INPUT,
    call,
    draft_json,
    final_step,
    harness,
    tool_messages,
    tool_step,
)

NO_CONCLUSION = draft_json(conclusion=False)
REPO = Path(__file__).resolve().parents[2]
_CJK = re.compile(r"[\u4e00-\u9fff]")


def system_message(body: dict[str, Any]) -> str:
    text: str = next(m["content"] for m in body["messages"] if m["role"] == "system")
    return text


def described(body: dict[str, Any]) -> dict[str, str]:
    return {t["function"]["name"]: t["function"]["description"] for t in body["tools"]}


async def _told(model_server: StartServer, tmp_path: Path, **env: Any) -> list[dict[str, Any]]:
    """One run that makes a broken call (REJECTED hint) and then answers: the request bodies."""
    server = await model_server(
        [
            tool_step(ToolCallSpec(id="c1", name="query_logs", arguments="{broken")),
            final_step(NO_CONCLUSION),
        ]
    )
    built: Harness = harness(server, tmp_path, **env)
    result = await built.diagnose(DiagnosisRequest("payment-api 5xx since 10:05"))
    assert result.outcome is Outcome.DRAFT
    return server.requests


@pytest.mark.parametrize("language", BUNDLED_LANGUAGES)
async def test_the_language_picks_system_prompt_tool_descriptions_and_hints(
    model_server: StartServer, tmp_path: Path, language: str
) -> None:
    prompts = prompt_set(language)
    bodies = await _told(model_server, tmp_path, DIAG_PROMPT=language)
    assert system_message(bodies[0]) == prompts.system
    tools = described(bodies[0])
    for name in ("lookup_knowledge", "query_logs", "query_mysql"):
        assert tools[name].startswith(prompts.description(name)[:20])
    hint = tool_messages(bodies[1])[-1]["observation"]["hint"]
    assert hint.startswith(prompts.hints["INVALID_ENVELOPE"].split("{{FIELD}}")[0])
    text = system_message(bodies[0]) + "".join(tools.values()) + hint
    if language == "en":
        assert not _CJK.search(text), "the English set carries Chinese text"
    else:
        assert _CJK.search(system_message(bodies[0])) and _CJK.search(hint)


def test_both_prompts_carry_the_same_rules() -> None:
    zh, en = prompt_set("zh").system, prompt_set("en").system
    for marker in ("`asked_at`", "`previous_turn`", "checked_scope", "STOP_REQUIRED", "REJECTED"):
        assert marker in zh and marker in en
    assert "language of the user's question" in en
    assert "用用户问题所用的语言作答" in zh
    for language in BUNDLED_LANGUAGES:
        assert set(prompt_set(language).hints) == set(HINT_CODES)


def test_no_hint_or_description_text_left_in_code() -> None:
    for path in (
        "plugin/harness/agent.py",
        "plugin/contract/observations.py",
        "plugin/harness/interceptor.py",
    ):
        source = (REPO / path).read_text(encoding="utf-8")
        for language in BUNDLED_LANGUAGES:
            prompts = prompt_set(language)
            for text in [*prompts.hints.values(), *prompts.tools.values()]:
                assert text.split("{{")[0][:40] not in source or len(text) < 12, (path, text)


async def test_a_prompt_file_path_is_used_with_its_sibling_files(
    model_server: StartServer, tmp_path: Path
) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    system = "Custom prompt. Cite ids.\n\n{{DRAFT_SCHEMA}}\n"
    (folder / "diagnosis_system.custom.md").write_text(system, encoding="utf-8")
    en_tools = (REPO / "prompts" / "tools.en.md").read_text(encoding="utf-8")
    (folder / "tools.custom.md").write_text(
        en_tools.replace("Search one service's logs", "CUSTOM logs"), encoding="utf-8"
    )
    bodies = await _told(
        model_server, tmp_path, DIAG_PROMPT=str(folder / "diagnosis_system.custom.md")
    )
    assert system_message(bodies[0]).startswith("Custom prompt. Cite ids.\n\n{")
    assert described(bodies[0])["query_logs"].startswith("CUSTOM logs")
    # No hints.custom.md beside it: the default (zh) hints.
    hint = tool_messages(bodies[1])[-1]["observation"]["hint"]
    assert hint.startswith(prompt_set("zh").hints["INVALID_ENVELOPE"][:10])


def _invalid(**env: str) -> str:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, **env)  # type: ignore[arg-type]
    return describe_invalid_settings(info.value)


def test_bad_prompt_values_are_invalid_settings(tmp_path: Path) -> None:
    assert "DIAG_PROMPT" in _invalid(DIAG_PROMPT="fr")
    no_slot = tmp_path / "no-slot.md"
    no_slot.write_text("a prompt without the schema slot", encoding="utf-8")
    assert "DIAG_PROMPT" in _invalid(DIAG_PROMPT=str(no_slot))
    broken = tmp_path / "diagnosis_system.xx.md"
    broken.write_text("{{DRAFT_SCHEMA}}", encoding="utf-8")
    (tmp_path / "hints.xx.md").write_text("## STOP_REQUIRED\n\nonly one\n", encoding="utf-8")
    assert "lacks section" in _invalid(DIAG_PROMPT=str(broken))
    binary = tmp_path / "binary.md"
    binary.write_bytes(b"\xff\xfe{{DRAFT_SCHEMA}}")
    assert "DIAG_PROMPT" in _invalid(DIAG_PROMPT=str(binary))


async def test_a_bad_prompt_through_the_cli_is_invalid_settings_exit_2(tmp_path: Path) -> None:
    code, out, err = await run_cli("diagnose", "q", env={"DIAG_PROMPT": "klingon"}, cwd=tmp_path)
    assert code == 2, out + err
    error = single_json(out)["error"]
    assert error["code"] == "INVALID_SETTINGS" and "DIAG_PROMPT" in error["message"]


async def test_english_stop_hint_reaches_the_model(
    model_server: StartServer, tmp_path: Path
) -> None:
    """A model-call budget of 2: the second request is answered STOP_REQUIRED in English."""
    server = await model_server(
        [
            tool_step(call("c1", "query_logs", LOGS_INPUT)),
            tool_step(call("c2", "query_logs", {**LOGS_INPUT, "level": "WARN"})),
            final_step(NO_CONCLUSION),
        ]
    )
    built = harness(server, tmp_path, DIAG_PROMPT="en", DIAG_MAX_TOOL_CALLS="1")
    await built.diagnose(DiagnosisRequest("payment-api 5xx since 10:05"))
    stops = [
        m["observation"]
        for m in tool_messages(server.requests[-1])
        if m["observation"]["evidence_status"] == "STOP_REQUIRED"
    ]
    assert stops and stops[-1]["hint"] == prompt_set("en").hints["STOP_REQUIRED"]
