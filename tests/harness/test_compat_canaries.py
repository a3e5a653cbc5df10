"""Canaries: one per private framework touch (``harness._compat``, ``tools._compat``).

Each fails loudly, naming the touch, when the installed library changes the private thing the
product relies on; none needs a network, a model or a database.
"""

from __future__ import annotations

import inspect
from typing import Any

import aiomysql
import pytest
import workflows.runtime.types.step_function as step_function
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI
from workflows import Workflow

from sre_diag.harness import _compat as harness_compat


def _private(owner: type, name: str) -> Any:
    found = getattr(owner, name, None)
    if found is None:
        pytest.fail(f"{owner.__module__}.{owner.__qualname__}.{name} is gone: see _compat")
    return found


def _lookup(**_: Any) -> str:
    """Look something up."""
    return ""


def test_workflow_steps_are_asked_through_get_steps() -> None:
    """``base_workflow_steps``: the runtime asks ``_get_steps`` and gets the steps by name."""
    _private(Workflow, "_get_steps")
    assert "._get_steps()" in inspect.getsource(step_function), (
        "the workflow runtime no longer asks Workflow._get_steps(): DiagnosisAgent's cache is dead"
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(_lookup)], llm=_llm())
    steps = harness_compat.base_workflow_steps(agent)
    assert "call_tool" in steps and all(callable(f) for f in steps.values())


def _llm() -> OpenAI:
    return OpenAI(model="gpt-4o-mini", api_key="canary", max_retries=0)


def test_prepare_chat_with_tools_returns_function_specs() -> None:
    """``base_prepare_chat_with_tools``: a dict whose ``tools`` are OpenAI function specs."""
    _private(OpenAI, "_prepare_chat_with_tools")
    tool = FunctionTool.from_defaults(_lookup)
    prepared = harness_compat.base_prepare_chat_with_tools(_llm(), [tool], strict=True)
    assert isinstance(prepared, dict) and prepared["tools"], prepared
    spec = prepared["tools"][0]
    assert spec["type"] == "function" and spec["function"]["name"] == "_lookup", spec
    assert "strict" in spec["function"], "OpenAI specs no longer carry 'strict': see DiagnosisLLM"


@pytest.mark.parametrize(
    ("name", "params"),
    [("_connect", []), ("_execute_command", ["command", "sql"]), ("_read_packet", None)],
)
def test_aiomysql_connection_internals(name: str, params: list[str] | None) -> None:
    """``sre_diag.tools._compat`` (``connect_prepared``, ``send_command``, ``read_packet``):
    coroutines of that shape on ``aiomysql.Connection``."""
    method = _private(aiomysql.Connection, name)
    assert inspect.iscoroutinefunction(method), f"aiomysql.Connection.{name} is no coroutine"
    if params is not None:
        names = list(inspect.signature(method).parameters)[1:]
        assert names[: len(params)] == params, f"aiomysql.Connection.{name}{names}"
