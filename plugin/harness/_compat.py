"""Every touch of a private LlamaIndex hook the harness makes, one named function each.

The harness overrides two private hooks (the override must sit on the subclass; its body asks
the framework's own version through these functions). Each says what it relies on; each has a
canary in ``tests/harness/test_compat_canaries.py`` that fails loudly when the installed library
changes that private thing. The evidence tools' touches (aiomysql) are in
``sre_diag.tools._compat`` (the tools import nothing of the harness).
"""

from __future__ import annotations

from typing import Any

__all__ = ["base_prepare_chat_with_tools", "base_workflow_steps"]


def base_workflow_steps(parent: Any) -> dict[str, Any]:
    """The workflow's steps as the framework finds them (``super()`` of the agent).

    Relies on ``workflows.Workflow._get_steps()`` returning ``{step name: step function}`` and
    on the workflow runtime asking for the steps through it on every step
    (``workflows/runtime/types/step_function.py``): ``DiagnosisAgent`` caches the answer.
    """
    steps: dict[str, Any] = parent._get_steps()  # pyright: ignore[reportPrivateUsage]
    return steps


def base_prepare_chat_with_tools(parent: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The chat request's keyword arguments as ``llama_index.llms.openai.OpenAI`` prepares them.

    Relies on ``OpenAI._prepare_chat_with_tools`` (called by ``achat_with_tools`` /
    ``astream_chat_with_tools``) returning a dict whose ``"tools"`` are OpenAI function specs
    (``{"type": "function", "function": {..., "strict": ...}}``): ``DiagnosisLLM`` adds
    ``parallel_tool_calls=False`` and drops ``strict`` there.
    """
    prepared: dict[str, Any] = parent._prepare_chat_with_tools(  # pyright: ignore[reportPrivateUsage]
        *args, **kwargs
    )
    return prepared
