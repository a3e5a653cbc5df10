"""The one FunctionAgent of a run, its three tool definitions, and the ``call_tool`` override.

The agent is LlamaIndex's own ``FunctionAgent`` loop (no planner, no second agent, no
``output_cls``). Only ``call_tool`` is re-declared: every tool request goes to the run's
``ToolInterceptor`` with the RAW argument text taken from the assistant message's
``ToolCallBlock``, and whether it is the first call of its round.

The tool definitions come in two variants, each built once per process: the default one (the
pydantic Envelope schemas, bounds included) and, for an LLM with ``strict`` set
(``DIAG_STRUCTURED_OUTPUT=json_schema``), the same Envelopes within OpenAI's strict subset
(``sre_diag.contract.strict_schema``: every field required, optional ones nullable, no bounds). The
Envelope parser accepts exactly what either permits and enforces the bounds.

The descriptions are per run: they carry the catalogues (``sre_diag.harness.catalog``) and come from
``prompts/tools.<lang>.md``. A run's tools are the cached definitions with that run's
descriptions (:func:`described_tools`: a shallow copy of the metadata sharing the cached schema,
itself cached per set of descriptions), so the schemas are still generated once per process.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ToolCall, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms import LLM
from llama_index.core.tools import AsyncBaseTool, ToolMetadata, ToolOutput
from llama_index.core.workflow import Context
from llama_index.core.workflow.decorators import step
from pydantic import PrivateAttr

from sre_diag.contract.envelope import envelope_model
from sre_diag.contract.prompts import prompt_set
from sre_diag.contract.strict_schema import strict_schema
from sre_diag.harness._compat import base_workflow_steps
from sre_diag.harness.interceptor import INPUT_MODELS, ToolInterceptor
from sre_diag.tools.base import ToolName

__all__ = ["DiagnosisAgent", "build_agent", "described_tools", "tool_definitions"]


# The root keys a strict tool schema keeps (LlamaIndex keeps the same minus additionalProperties,
# which it then sets to false itself).
_STRICT_ROOT_KEYS = ("type", "properties", "required", "additionalProperties", "$defs")


class _FrozenToolMetadata(ToolMetadata):
    """Tool metadata whose JSON schema is generated once, not on every model round.

    LlamaIndex asks ``get_parameters_dict`` for each tool on each round; for the Envelope models
    pydantic's schema generation cost ~4.5 ms a round (measured in ``bench``).
    """

    def __init__(self, *args: Any, strict: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        parameters = super().get_parameters_dict()
        if strict and self.fn_schema is not None:
            full = strict_schema(self.fn_schema.model_json_schema())
            parameters = {key: full[key] for key in _STRICT_ROOT_KEYS if key in full}
        self._parameters = parameters

    def get_parameters_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._parameters)

    def to_openai_tool(self, skip_length_check: bool = True) -> dict[str, Any]:
        """The OpenAI tool spec; a catalogue may take the description past 1024 characters
        (bounded by ``sre_diag.harness.catalog``), which LlamaIndex's own check would refuse."""
        return super().to_openai_tool(skip_length_check=True)

    def described(self, description: str) -> _FrozenToolMetadata:
        """This metadata with another description, sharing the generated schema."""
        twin = copy.copy(self)
        twin.description = description
        return twin


class EnvelopeTool(AsyncBaseTool):
    """A tool definition offered to the model: name, description and Envelope schema.

    It is only a definition: execution happens in ``DiagnosisAgent.call_tool`` through the
    interceptor, so calling it directly is a programming error.
    """

    def __init__(self, tool: ToolName, *, strict: bool = False) -> None:
        self._metadata = _FrozenToolMetadata(
            name=tool.value,
            description=prompt_set().description(tool.value),
            fn_schema=envelope_model(INPUT_MODELS[tool]),
            strict=strict,
        )

    @property
    def metadata(self) -> ToolMetadata:
        return self._metadata

    def described(self, description: str) -> EnvelopeTool:
        """This definition with another description (the schema is shared, not regenerated)."""
        twin = copy.copy(self)
        twin._metadata = self._metadata.described(description)
        return twin

    def call(self, input: Any) -> ToolOutput:
        raise RuntimeError("diagnosis tools run only through the harness interceptor")

    async def acall(self, input: Any) -> ToolOutput:
        raise RuntimeError("diagnosis tools run only through the harness interceptor")


@cache
def tool_definitions(strict: bool = False) -> tuple[EnvelopeTool, ...]:
    """The three tool definitions (``strict``: within OpenAI's strict subset); immutable, so
    each variant is built once per process."""
    return tuple(EnvelopeTool(tool, strict=strict) for tool in ToolName)


@lru_cache(maxsize=16)
def described_tools(strict: bool, descriptions: tuple[str, ...]) -> tuple[EnvelopeTool, ...]:
    """The three definitions with a run's ``descriptions`` (``ToolName`` order); a set of
    descriptions (one catalogue snapshot) is built once, then shared by the runs that see it."""
    return tuple(
        tool.described(description)
        for tool, description in zip(tool_definitions(strict), descriptions, strict=True)
    )


class DiagnosisAgent(FunctionAgent):
    """FunctionAgent whose tool step is the harness interceptor."""

    _interceptor: ToolInterceptor | None = PrivateAttr(default=None)
    _steps: dict[str, Any] | None = PrivateAttr(default=None)

    def bind(self, interceptor: ToolInterceptor) -> DiagnosisAgent:
        self._interceptor = interceptor
        return self

    def _get_steps(self) -> dict[str, Any]:
        """The workflow's steps, looked up once per agent.

        The workflow runtime asks for them on every step; the lookup is ``inspect.getmembers``
        over this pydantic model (~0.7 ms, 20+ times a run: the largest part of the per-run CPU
        the bench found besides the model client). The steps of an agent never change.
        """
        # a private workflow hook: see sre_diag.harness._compat (and its canary)
        private = getattr(self, "__pydantic_private__", None)
        if private is None:  # during construction
            return base_workflow_steps(super())
        if self._steps is None:
            self._steps = base_workflow_steps(super())
        return self._steps

    @step(num_workers=1)
    async def call_tool(self, ctx: Context, ev: ToolCall) -> ToolCallResult:
        """Hand the request, with its raw arguments, to the interceptor."""
        if self._interceptor is None:
            raise RuntimeError("DiagnosisAgent used without an interceptor")
        blocks = await self._round_tool_calls(ctx)
        raw, position = _raw_arguments(blocks, ev)
        later = (
            [(b.tool_call_id or "", b.tool_name) for b in blocks[position + 1 :]]
            if position is not None
            else []
        )
        text = await self._interceptor.handle(
            ev.tool_name, ev.tool_id, raw, first_in_round=position == 0, later=later
        )
        output = ToolOutput(
            content=text, tool_name=ev.tool_name, raw_input={}, raw_output=None, is_error=False
        )
        return ToolCallResult(
            tool_name=ev.tool_name,
            tool_kwargs={},
            tool_id=ev.tool_id,
            tool_output=output,
            return_direct=False,
        )

    async def _round_tool_calls(self, ctx: Context) -> list[ToolCallBlock]:
        scratchpad: list[ChatMessage] = await ctx.store.get(self.scratchpad_key, default=[])
        for message in reversed(scratchpad):
            if message.role == "assistant":
                return [b for b in message.blocks if isinstance(b, ToolCallBlock)]
        return []


def _raw_arguments(
    blocks: list[ToolCallBlock], ev: ToolCall
) -> tuple[str | dict[str, Any], int | None]:
    """The raw argument text of this call and its position in the round's message."""
    for index, block in enumerate(blocks):
        if block.tool_call_id == ev.tool_id and block.tool_name == ev.tool_name:
            return block.tool_kwargs, index
    # Not found in the round's message: never fall back to the framework's repaired dict.
    return "", None


def build_agent(
    llm: LLM,
    system_prompt: str,
    interceptor: ToolInterceptor,
    descriptions: Sequence[str] | None = None,
) -> DiagnosisAgent:
    """The run's agent; the tool schemas follow the LLM's ``strict`` flag (which is what marks
    the definitions ``"strict": true`` in the request); ``descriptions`` (``ToolName`` order,
    with the run's catalogues) replace the plain ones."""
    strict = getattr(llm, "strict", False) is True
    tools = (
        described_tools(strict, tuple(descriptions))
        if descriptions is not None
        else tool_definitions(strict)
    )
    agent = DiagnosisAgent(
        name="diagnosis_agent",
        description="Evidence-bound incident diagnosis",
        tools=list(tools),
        llm=llm,
        system_prompt=system_prompt,
        streaming=False,
        allow_parallel_tool_calls=True,
    )
    return agent.bind(interceptor)
