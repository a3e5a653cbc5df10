"""The Tool interceptor: every tool request the model makes passes here, and only here.

``decide`` is pure with respect to the outside world: it reads the RunContext and returns a
tagged decision — run the adapter (``Execute``), answer without running it (``Respond``) — or
raises ``CollectionStopped`` when the model asks for a tool after STOP_REQUIRED. ``handle``
carries the decision out: it records the canonical invocation, runs the adapter, bounds the
observation and accounts its bytes.

Order of checks for one request: unknown tool → stop already required → reused id → not the
first call of its round → envelope → pending evaluation → consume evaluation → saturation,
tool budget, last model round, byte capacity → duplicate → execute.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from plugin.context import RunContext
from plugin.envelope import Envelope, EnvelopeError, Evaluation, parse_envelope
from plugin.errors import CollectionStopped
from plugin.ledger import Invocation, InvocationStatus
from plugin.observations import (
    RejectCode,
    error_observation,
    ready_observation,
    rejected_observation,
    stop_required_observation,
)
from tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    EvidenceAdapter,
    Failed,
    ToolName,
)
from tools.schemas import KnowledgeInput, LogsInput, MysqlInput

__all__ = ["INPUT_MODELS", "Execute", "Respond", "ToolInterceptor"]

_log = logging.getLogger(__name__)

INPUT_MODELS: Mapping[ToolName, type[BaseModel]] = {
    ToolName.LOOKUP_KNOWLEDGE: KnowledgeInput,
    ToolName.QUERY_LOGS: LogsInput,
    ToolName.QUERY_MYSQL: MysqlInput,
}

STOP_REQUIRED_CODE = "STOP_REQUIRED"


@dataclass(frozen=True, slots=True)
class Execute:
    """Run the adapter with this unwrapped business input."""

    tool: ToolName
    tool_call_id: str
    business: Any
    canonical: str
    scope: str


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer with this observation; record ``invocation`` unless it is None (unknown tool)."""

    observation: str
    invocation: Invocation | None


Decision = Execute | Respond


class ToolInterceptor:
    """Enforces the envelope, evaluation, saturation and budget rules for one run."""

    def __init__(self, ctx: RunContext, adapters: Mapping[ToolName, EvidenceAdapter[Any]]) -> None:
        self._ctx = ctx
        self._adapters = adapters

    async def handle(
        self, tool_name: str, tool_call_id: str, raw: str | dict[str, Any], *, first_in_round: bool
    ) -> str:
        """Decide, run if allowed, record, and return the observation text."""
        decision = self.decide(tool_name, tool_call_id, raw, first_in_round=first_in_round)
        invocation: Invocation | None
        if isinstance(decision, Execute):
            text, invocation = await self._execute(decision)
        else:
            text, invocation = decision.observation, decision.invocation
        self._ctx.usage.bytes += len(text.encode("utf-8"))
        if invocation is not None:
            invocation.observation_bytes = len(text.encode("utf-8"))
            self._ctx.ledger.record(invocation)
            self._ctx.hooks.tool_invocation(self._ctx, invocation)
        return text

    # -- decision -------------------------------------------------------------------------

    def decide(
        self, tool_name: str, tool_call_id: str, raw: str | dict[str, Any], *, first_in_round: bool
    ) -> Decision:
        ledger = self._ctx.ledger
        tool = _known_tool(tool_name, self._adapters)
        if tool is None:
            text = rejected_observation(tool_call_id, tool_name, RejectCode.UNKNOWN_TOOL)
            return Respond(text, None)
        if ledger.stop_required:
            raise CollectionStopped
        if not tool_call_id or ledger.find(tool_call_id) is not None:
            text = rejected_observation(
                tool_call_id, tool, RejectCode.INVALID_ENVELOPE, field="tool_call_id reused"
            )
            return Respond(text, None)
        if not first_in_round:
            return self._reject(tool, tool_call_id, RejectCode.ONE_TOOL_PER_ROUND)
        try:
            envelope = parse_envelope(raw, INPUT_MODELS[tool])
        except EnvelopeError as exc:
            return self._reject(tool, tool_call_id, RejectCode.INVALID_ENVELOPE, field=exc.field)
        return self._decide_valid(tool, tool_call_id, envelope)

    def _decide_valid(self, tool: ToolName, tool_call_id: str, envelope: Envelope[Any]) -> Decision:
        ledger = self._ctx.ledger
        business = envelope.input
        pending = ledger.pending_evaluation
        if pending is not None:
            previous = envelope.previous_observation
            if previous is None:
                return self._reject(
                    tool, tool_call_id, RejectCode.PREVIOUS_OBSERVATION_REQUIRED, expected=pending
                )
            if previous.tool_call_id != pending:
                return self._reject(
                    tool, tool_call_id, RejectCode.PREVIOUS_OBSERVATION_MISMATCH, expected=pending
                )
            ledger.apply_evaluation(pending, previous.evaluation)
            ledger.pending_evaluation = None
        canonical, scope = business.canonical(), business.scope()
        if self._must_stop():
            return self._stop(tool, tool_call_id, business, canonical, scope)
        if ledger.already_executed(tool, canonical):
            ledger.count(Evaluation.NO_GAIN)
            if self._saturated():
                return self._stop(tool, tool_call_id, business, canonical, scope)
            return self._reject(
                tool, tool_call_id, RejectCode.DUPLICATE_CALL, business=business, scope=scope
            )
        return Execute(tool, tool_call_id, business, canonical, scope)

    def _saturated(self) -> bool:
        return self._ctx.ledger.no_gain_streak >= self._ctx.budgets.no_gain_streak

    def _must_stop(self) -> bool:
        budgets, usage = self._ctx.budgets, self._ctx.usage
        return (
            self._saturated()
            or budgets.tool_calls_left(usage) <= 0
            or budgets.rounds_left(usage) <= 1
            or not budgets.can_hold_observation(usage)
        )

    def _stop(
        self, tool: ToolName, tool_call_id: str, business: BaseModel, canonical: str, scope: str
    ) -> Respond:
        self._ctx.ledger.stop_required = True
        invocation = self._invocation(
            tool,
            tool_call_id,
            InvocationStatus.REJECTED,
            code=STOP_REQUIRED_CODE,
            business=business,
            scope=scope,
        )
        invocation.canonical = canonical
        return Respond(stop_required_observation(tool_call_id, tool), invocation)

    def _reject(
        self,
        tool: ToolName,
        tool_call_id: str,
        code: RejectCode,
        *,
        expected: str | None = None,
        field: str = "arguments",
        business: BaseModel | None = None,
        scope: str | None = None,
    ) -> Respond:
        text = rejected_observation(
            tool_call_id, tool, code, expected_previous_tool_call_id=expected, field=field
        )
        invocation = self._invocation(
            tool,
            tool_call_id,
            InvocationStatus.REJECTED,
            code=code.value,
            business=business,
            scope=scope,
        )
        return Respond(text, invocation)

    def _invocation(
        self,
        tool: ToolName,
        tool_call_id: str,
        status: InvocationStatus,
        *,
        code: str | None,
        business: BaseModel | None,
        scope: str | None,
    ) -> Invocation:
        return Invocation(
            tool_call_id=tool_call_id,
            run_id=self._ctx.run_id,
            tool=tool,
            status=status,
            code=code,
            business_input=business.model_dump(mode="json") if business is not None else None,
            scope=scope,
            started_ms=self._ctx.elapsed_ms(),
        )

    # -- execution ------------------------------------------------------------------------

    async def _execute(self, decision: Execute) -> tuple[str, Invocation]:
        ctx = self._ctx
        ctx.usage.tool_calls += 1
        ctx.hooks.tool_started(ctx, decision.tool, decision.scope)
        started = ctx.elapsed_ms()
        result = await self._invoke(decision)
        invocation = self._invocation(
            decision.tool,
            decision.tool_call_id,
            InvocationStatus.READY,
            code=None,
            business=decision.business,
            scope=decision.scope,
        )
        invocation.canonical = decision.canonical
        invocation.started_ms = started
        invocation.duration_ms = ctx.elapsed_ms() - started
        if isinstance(result, Failed):
            invocation.status = InvocationStatus.ERROR
            invocation.code = result.code.value
            return error_observation(decision.tool_call_id, decision.tool, result.code), invocation
        text, count, truncated = ready_observation(
            decision.tool_call_id,
            decision.tool,
            result.items,
            truncated=result.truncated,
            max_bytes=ctx.budgets.max_observation_bytes,
        )
        invocation.item_count, invocation.truncated = count, truncated
        if count > 0:
            ctx.ledger.pending_evaluation = decision.tool_call_id
        else:
            # An empty result carries no information: it counts as NO_GAIN by itself.
            invocation.evaluation = Evaluation.NO_GAIN
            ctx.ledger.count(Evaluation.NO_GAIN)
        return text, invocation

    async def _invoke(self, decision: Execute) -> AdapterResult:
        adapter = self._adapters[decision.tool]
        call = AdapterCall(
            tool_call_id=decision.tool_call_id, run_id=self._ctx.run_id, input=decision.business
        )
        try:
            return await adapter.invoke(call)
        except Exception as exc:
            # The exception text may carry backend detail or secrets: only its type is logged.
            _log.warning(
                "adapter %s failed on %s: %s",
                decision.tool,
                decision.tool_call_id,
                type(exc).__name__,
            )
            return Failed(AdapterErrorCode.INTERNAL)


def _known_tool(name: str, adapters: Mapping[ToolName, object]) -> ToolName | None:
    try:
        tool = ToolName(name)
    except ValueError:
        return None
    return tool if tool in adapters else None
