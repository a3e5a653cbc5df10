"""The model client and the model-round gate.

``DiagnosisLLM`` is LlamaIndex's OpenAI client with three changes: any model name works (the
context window comes from settings), retries are off (``max_retries=0``: the SDK and a tenacity
decorator would otherwise turn one round into several HTTP requests), and every request asks the
server for ``parallel_tool_calls: false`` while keeping every call the server still returns, so
that the extra ones can be answered with ``ONE_TOOL_PER_ROUND`` instead of vanishing.

With ``DIAG_STRUCTURED_OUTPUT=json_schema`` (``build_llm(structured_output="json_schema")``)
every request also carries the Draft's strict schema as ``response_format`` (through
``additional_kwargs``, merged into every request body) and the tool definitions with
``"strict": true`` (LlamaIndex's ``strict`` flag; the agent offers the strict Envelope schemas
then). With ``off`` neither is sent: no ``response_format`` and no ``strict`` key at all (the
framework would send ``"strict": false``, which some OpenAI-compatible servers refuse).
Either way the strict Draft parser and the citation check decide.

Every request carries ``max_tokens``: the completion tokens the run has left
(``Budgets.max_tokens``: the tokens left minus at least the previous round's prompt and
completion, at most ``DIAG_MAX_DRAFT_BYTES``), read when the request is prepared.

``ModelRoundGate`` is a callback handler on the LLM's own CallbackManager. Its
``on_event_start`` runs before the HTTP request of every round: a failed check raises a typed
``BudgetStop`` there, so the request never reaches the server. ``on_event_end`` records usage
(a round asking for tools that went over the token budget ends the run; a final answer that did
is kept, its overrun recorded in ``Usage.overrun_tokens``)
and refuses a response whose text is larger than any Draft may be (``OversizedResponse``)
before the framework's memory tokenizes it: tiktoken needs minutes of CPU on a multi-megabyte
text, in a worker thread that neither the deadline nor a cancel can stop.
(The instrumentation dispatcher swallows handler exceptions, so it could not enforce anything.)

``model_http_client`` is the one pooled HTTP client the model requests of a process go through
(``sre_diag.http_bounds``): each answer is read whole, decoded, within ``answer_cap`` (4 MB with
the default settings) and within ``DIAG_MODEL_TIMEOUT_SECONDS`` from the request's start to its
last byte. An endpoint streaming gigabytes ends the run ``MODEL_ERROR OVERSIZED_RESPONSE``
after a few MB; one trickling bytes ends it ``MODEL_ERROR TIMEOUT`` (or the run's deadline
comes first).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeGuard

import httpx
from llama_index.core.base.llms.types import ChatResponse, LLMMetadata, ToolCallBlock
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.llms.llm import ToolSelection
from llama_index.llms.openai import OpenAI
from pydantic import PrivateAttr

from sre_diag.contract.draft import draft_strict_schema
from sre_diag.harness._compat import base_prepare_chat_with_tools
from sre_diag.harness.budget import estimated_tokens
from sre_diag.harness.context import RunContext
from sre_diag.harness.errors import OversizedResponse
from sre_diag.harness.state import ModelRound, RoundOutcome
from sre_diag.http_bounds import bounded_client, take_tls_context

__all__ = [
    "DRAFT_SCHEMA_NAME",
    "MODEL_ANSWER_MAX_BYTES",
    "DiagnosisLLM",
    "ModelRoundGate",
    "OversizedResponse",
    "StructuredOutput",
    "answer_cap",
    "build_llm",
    "draft_response_format",
    "model_http_client",
]

_log = logging.getLogger(__name__)

StructuredOutput = Literal["off", "json_schema"]

DRAFT_SCHEMA_NAME = "DiagnosisDraft"

MODEL_ANSWER_MAX_BYTES = 4 * 1024 * 1024
"""The most one model answer's body may carry, decoded, with the default settings: a Draft is
at most ``DIAG_MAX_DRAFT_BYTES`` (16 KB by default), and JSON escaping, tool calls and a
reasoning text stay far below this; what is larger is a broken or hostile endpoint, refused
before it fills the memory. A larger ``DIAG_MAX_DRAFT_BYTES`` raises it (``answer_cap``)."""
_ANSWER_PER_DRAFT_BYTE = 8  # a \uXXXX escape is 6 bytes for one character, plus the envelope


class DiagnosisLLM(OpenAI):
    """OpenAI-compatible chat model, no retries, one tool call a round requested, and each
    request's ``max_tokens`` given by the run (``cap_completions``)."""

    context_window: int = 128000
    _completion_cap: Callable[[], int] | None = PrivateAttr(default=None)

    def cap_completions(self, cap: Callable[[], int]) -> DiagnosisLLM:
        """Every request from now on carries ``max_tokens=cap()``, read when it is prepared."""
        self._completion_cap = cap
        return self

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_tokens or -1,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model,
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The round's tool calls with their exact ids, WITHOUT parsing their arguments.

        The harness reads each call's raw argument text from the message and parses it with
        bounded size and nesting (``parse_envelope``). The framework's own lenient parse is
        never used: it "repairs" broken JSON, and on a few KB of nested brackets it raised
        ``RecursionError`` out of the agent step, failing the run instead of refusing the call.
        """
        selections = [
            ToolSelection(
                tool_id=block.tool_call_id or "", tool_name=block.tool_name, tool_kwargs={}
            )
            for block in response.message.blocks
            if isinstance(block, ToolCallBlock)
        ]
        if not selections and error_on_no_tool_call:
            raise ValueError("Expected at least one tool call, but got 0 tool calls.")
        return selections

    def _prepare_chat_with_tools(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # a private LlamaIndex hook: see sre_diag.harness._compat (and its canary)
        prepared = base_prepare_chat_with_tools(super(), *args, **kwargs)
        if self._completion_cap is not None:
            prepared["max_tokens"] = self._completion_cap()
        if prepared.get("tools"):
            prepared["parallel_tool_calls"] = False
            if not self.strict:
                for spec in prepared["tools"]:
                    spec.get("function", {}).pop("strict", None)
        return prepared


class ModelRoundGate(BaseCallbackHandler):
    """Checks the run's budgets before each model round and records usage after it."""

    def __init__(self, ctx: RunContext, sent_with_every_round: Sequence[Any] = ()) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self._ctx = ctx
        # What the LLM itself adds to every request (the strict response_format), for estimates.
        self._always_sent = list(sent_with_every_round)
        self._open: dict[str, ModelRound] = {}
        # What each open round sends besides its messages (tool definitions, response format),
        # so an estimate counts the whole request: the definitions carry the catalogues.
        self._sent_besides: dict[str, list[Any]] = {}

    def on_event_start(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        parent_id: str = "",
        **kwargs: Any,
    ) -> str:
        if event_type is not CBEventType.LLM:
            return event_id
        ctx = self._ctx
        ctx.check_before_model_call()
        ctx.state.usage.model_calls += 1
        model_round = ModelRound(
            index=ctx.state.usage.model_calls,
            started_ms=ctx.elapsed_ms(),
            max_tokens=_sent_max_tokens(payload),
        )
        ctx.state.rounds.append(model_round)
        self._open[event_id] = model_round
        self._sent_besides[event_id] = [*_besides_messages(payload), *self._always_sent]
        return event_id

    def on_event_end(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        **kwargs: Any,
    ) -> None:
        if event_type is not CBEventType.LLM:
            return
        model_round = self._open.pop(event_id, None)
        besides = self._sent_besides.pop(event_id, [])
        if model_round is None:
            return
        ctx = self._ctx
        model_round.duration_ms = ctx.elapsed_ms() - model_round.started_ms
        response = (payload or {}).get(EventPayload.RESPONSE)
        if isinstance(response, ChatResponse):
            sent = [(payload or {}).get(EventPayload.MESSAGES), *besides]
            self._record_usage(model_round, response, sent)
        else:
            model_round.outcome = RoundOutcome.ERROR
        ctx.deps.hooks.model_round(ctx.state, model_round)
        if model_round.outcome is RoundOutcome.FINAL:
            # The gate authorized this round and its answer exists: a Draft is kept even when
            # the reported usage went over the budget; the overrun is recorded.
            self._record_overrun()
        else:
            # A round asking for tools that overran the budget ends the run: nothing it asked
            # runs.
            ctx.deps.budgets.check_tokens_after_round(ctx.state.usage)
        if isinstance(response, ChatResponse):
            _check_text_size(response, ctx.deps.budgets.max_draft_bytes)

    def _record_overrun(self) -> None:
        usage = self._ctx.state.usage
        usage.overrun_tokens = self._ctx.deps.budgets.overrun(usage)
        if usage.overrun_tokens:
            _log.warning(
                "run %s: the final round went %d tokens over the token budget",
                self._ctx.state.run_id,
                usage.overrun_tokens,
            )

    def _record_usage(self, model_round: ModelRound, response: ChatResponse, messages: Any) -> None:
        usage = self._ctx.state.usage
        counts = response.additional_kwargs
        prompt = counts.get("prompt_tokens")
        completion = counts.get("completion_tokens")
        # A count that is not a non-negative integer is not usage: a negative one would refill
        # the budget. It is treated like a missing one and estimated.
        if _is_count(prompt) and _is_count(completion):
            model_round.prompt_tokens, model_round.completion_tokens = prompt, completion
        else:
            model_round.usage_reported = False
            usage.usage_estimated = True
            model_round.prompt_tokens = _estimate_tokens(messages)
            model_round.completion_tokens = _estimate_tokens(response.message)
        usage.prompt_tokens += model_round.prompt_tokens
        usage.completion_tokens += model_round.completion_tokens
        usage.last_round_tokens = model_round.prompt_tokens + model_round.completion_tokens
        calls = [b for b in response.message.blocks if b.block_type == "tool_call"]
        model_round.tool_calls = len(calls)
        model_round.outcome = RoundOutcome.TOOL_CALLS if calls else RoundOutcome.FINAL
        model_round.cut = _finish_reason(response) == "length"

    def start_trace(self, trace_id: str | None = None) -> None:
        return None

    def end_trace(
        self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None
    ) -> None:
        return None


def _besides_messages(payload: dict[str, Any] | None) -> list[Any]:
    """The tool definitions a round sends with its messages (the call's keyword arguments)."""
    kwargs = (payload or {}).get(EventPayload.ADDITIONAL_KWARGS) or {}
    if not isinstance(kwargs, dict):
        return []
    return [kwargs[key] for key in ("tools", "response_format") if kwargs.get(key)]


def _sent_max_tokens(payload: dict[str, Any] | None) -> int | None:
    """The ``max_tokens`` the round's request carries (``DiagnosisLLM.cap_completions``)."""
    kwargs = (payload or {}).get(EventPayload.ADDITIONAL_KWARGS) or {}
    value = kwargs.get("max_tokens") if isinstance(kwargs, dict) else None
    return value if _is_count(value) else None


def _finish_reason(response: ChatResponse) -> str:
    """The server's ``finish_reason`` of the answer ('' when it gave none)."""
    choices = getattr(response.raw, "choices", None)
    if not choices:
        return ""
    return str(getattr(choices[0], "finish_reason", "") or "")


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_text_size(response: ChatResponse, max_bytes: int) -> None:
    """Refuse a response text no Draft could be, before the framework stores and tokenizes it."""
    text = response.message.content or ""
    # Cheap bound first: a str of n characters has at least n UTF-8 bytes.
    if len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
        calls = [b for b in response.message.blocks if b.block_type == "tool_call"]
        raise OversizedResponse(final=not calls)


def _estimate_tokens(value: Any) -> int:
    """Without reported usage, tokens are estimated from bytes (``BYTES_PER_TOKEN``)."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return estimated_tokens(len(text.encode("utf-8")))


def draft_response_format() -> dict[str, Any]:
    """The ``response_format`` asking for the Draft under OpenAI's strict structured output."""
    return {
        "type": "json_schema",
        "json_schema": {"name": DRAFT_SCHEMA_NAME, "strict": True, "schema": draft_strict_schema()},
    }


def build_llm(
    ctx: RunContext,
    *,
    model: str,
    api_base: str | None,
    api_key: str | None,
    context_window: int,
    request_timeout: float,
    http_client: httpx.AsyncClient | None,
    structured_output: StructuredOutput = "off",
) -> DiagnosisLLM:
    """One LLM per run, whose CallbackManager holds that run's gate."""
    strict = structured_output == "json_schema"
    response_format = draft_response_format()
    llm = DiagnosisLLM(
        model=model,
        api_base=api_base,
        api_key=api_key or "unset",
        max_retries=0,
        timeout=request_timeout,
        temperature=0.0,
        context_window=context_window,
        async_http_client=http_client,
        callback_manager=CallbackManager(
            [ModelRoundGate(ctx, [response_format] if strict else [])]
        ),
        strict=strict,
        additional_kwargs={"response_format": response_format} if strict else None,
    )
    return llm.cap_completions(lambda: ctx.deps.budgets.max_tokens(ctx.state.usage))


def answer_cap(max_draft_bytes: int) -> int:
    """The byte cap of one model answer: room for the largest Draft, escaped, at least
    ``MODEL_ANSWER_MAX_BYTES``."""
    return max(MODEL_ANSWER_MAX_BYTES, _ANSWER_PER_DRAFT_BYTE * max_draft_bytes)


def model_http_client(
    *, timeout_seconds: float, connections: int, max_draft_bytes: int
) -> httpx.AsyncClient:
    """The pooled HTTP client of every model request of a process: answers bounded in bytes
    (``answer_cap``) and, from a request's start to its last byte, in time. Its TLS context is
    the one the command prepared at its start, if it did (``take_tls_context``)."""
    return bounded_client(
        max_bytes=answer_cap(max_draft_bytes),
        total_seconds=timeout_seconds,
        timeout=timeout_seconds,
        verify=take_tls_context(),
        limits=httpx.Limits(
            max_connections=connections, max_keepalive_connections=min(20, connections)
        ),
    )
