"""The Tool interceptor: every tool request the model makes passes here, and only here.

``decide`` is a pure function of the request and the run's state (ledger, usage, budgets): it
changes nothing and returns a tagged decision — run the adapter (``Execute``), answer without
running it (``Respond``), or end the run now (``Stop``). Each decision carries the ledger
effects it implies (the evaluation it consumes, a duplicate counted as NO_GAIN, a stop to
require). ``handle`` applies them, runs the adapter for ``Execute``, records the canonical
invocation, projects a READY result through its tool's whitelist (``sre_diag.harness.whitelist``:
what does not fit it is ``ERROR INTERNAL``), bounds the observation and accounts its bytes.

Order of checks for one request:

1. STOP_REQUIRED was answered in an earlier round → ``Stop`` (whatever the tool name: an
   unknown tool does not buy more rounds), whose reason is what caused that STOP_REQUIRED
   (``Budgets.stop_cause``: the NO_GAIN streak, the tool-call, model-call or token budget; the
   byte capacity counts as the token budget).
2. unknown tool → ``UNKNOWN_TOOL``; missing, reused or over-long id → ``INVALID_ENVELOPE``
   (neither creates a canonical invocation; the first request of a round that must stop is
   answered STOP_REQUIRED instead). Reused means emitted before in this run, whatever it was
   answered: ``handle`` burns every id it is given (``InvocationLedger.burn``).
3. not the first request of its round → ``ONE_TOOL_PER_ROUND`` (also in the round that met a
   stop: the model sees STOP_REQUIRED and can still answer).
4. envelope → pending evaluation → consume the evaluation → "must stop" (``Budgets``) →
   duplicate → ``Execute``.
5. capacity: no observation may push the run past its byte capacity. An answer must leave room
   for the rest of its round's answers, one STOP_REQUIRED and a full Draft; otherwise it becomes
   STOP_REQUIRED; when not even that fits (a flood of parallel calls in one round), ``Stop``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from sre_diag.contract.envelope import (
    MAX_TOOL_CALL_ID_CHARS,
    Envelope,
    EnvelopeError,
    Evaluation,
    PreviousObservation,
    parse_envelope,
)
from sre_diag.contract.observations import (
    ID_MISSING,
    ID_REUSED,
    ID_TOO_LONG,
    Hints,
    RejectCode,
    error_observation,
    ready_observation,
    rejected_observation,
    rejection_bound,
    stop_required_bound,
    stop_required_observation,
)
from sre_diag.contract.prompts import prompt_set
from sre_diag.errors import StopReason
from sre_diag.harness.context import RunContext
from sre_diag.harness.decisions import (
    AFTER_STOP_REQUIRED,
    Consumed,
    Decision,
    Execute,
    Respond,
    Stop,
)
from sre_diag.harness.ledger import (
    CANCELLED,
    HarnessCode,
    Invocation,
    InvocationCode,
    InvocationStatus,
    next_streak,
)
from sre_diag.harness.whitelist import Unprojectable, project
from sre_diag.log import log_failure
from sre_diag.tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    EvidenceAdapter,
    Failed,
    Ready,
    ToolName,
)
from sre_diag.tools.schemas import KnowledgeInput, LogsInput, MysqlInput

__all__ = ["INPUT_MODELS", "ToolInterceptor"]

_log = logging.getLogger(__name__)

INPUT_MODELS: Mapping[ToolName, type[BaseModel]] = {
    ToolName.LOOKUP_KNOWLEDGE: KnowledgeInput,
    ToolName.QUERY_LOGS: LogsInput,
    ToolName.QUERY_MYSQL: MysqlInput,
}

STOP_REQUIRED_CODE = HarnessCode.STOP_REQUIRED
OVER_CAPACITY = "no room left in the run capacity for the round's answers"
CUT_OFF_TIMEOUT = AdapterErrorCode.TIMEOUT
# What cuts a call off from outside (the deadline, a Cancel, the process being stopped); any
# other BaseException out of an adapter is a crash.
_CUT_OFF = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
# The run's byte capacity (what the model is given to read) is its context budget: a stop it
# forces is reported as the token budget's, never as saturation (CONTRACTS §6 has no other name).
CAPACITY_STOP = StopReason.TOKEN_BUDGET_EXHAUSTED


class ToolInterceptor:
    """Enforces the envelope, evaluation, saturation, budget and capacity rules for one run."""

    def __init__(
        self,
        ctx: RunContext,
        adapters: Mapping[ToolName, EvidenceAdapter[Any]],
        hints: Hints | None = None,
    ) -> None:
        self._ctx = ctx
        self._run = ctx.state  # what the run did: usage, ledger
        self._budgets = ctx.deps.budgets
        self._adapters = adapters
        # The observation hints of the run's prompt language (default: the zh set).
        self._hints = hints if hints is not None else prompt_set().hints
        self._max_obs = self._budgets.max_observation_bytes
        self._stop_bound = stop_required_bound(self._max_obs, self._hints)
        self._bounds: dict[tuple[str, str], int] = {}

    async def handle(
        self,
        tool_name: str,
        tool_call_id: str,
        raw: str | dict[str, Any],
        *,
        first_in_round: bool,
        later: Sequence[tuple[str, str]] = (),
    ) -> str:
        """Decide, run if allowed, record, and return the observation text.

        ``later`` are the (id, name) of the requests after this one in the same model message:
        their answers are reserved before this one is given.
        """
        decision = self.decide(
            tool_name, tool_call_id, raw, first_in_round=first_in_round, later=later
        )
        # Whatever the answer, this id was emitted in this run: it can never be used again.
        self._run.ledger.burn(tool_call_id)
        if isinstance(decision, Stop):
            raise decision.signal()
        self._apply(decision)
        invocation: Invocation | None
        if isinstance(decision, Execute):
            text, invocation = await self._execute(decision)
        else:
            text, invocation = decision.observation, decision.invocation
            if invocation is not None:
                invocation.started_ms = self._ctx.elapsed_ms()
        self._run.usage.bytes += len(text.encode("utf-8"))
        if invocation is not None:
            invocation.observation_bytes = len(text.encode("utf-8"))
            self._run.ledger.record(invocation)
            self._ctx.deps.hooks.tool_invocation(self._run, invocation)
            self._ctx.deps.hooks.observation(self._run, invocation, text)
        return text

    def _apply(self, decision: Execute | Respond) -> None:
        ledger = self._run.ledger
        if decision.consumed is not None:
            ledger.consume(decision.consumed.tool_call_id, decision.consumed.evaluation)
        if isinstance(decision, Respond):
            if decision.duplicate:
                ledger.count(Evaluation.NO_GAIN)
            if decision.stop_cause is not None:
                ledger.require_stop(self._run.usage.model_calls, decision.stop_cause)

    # -- decision (pure) ------------------------------------------------------------------

    def decide(
        self,
        tool_name: str,
        tool_call_id: str,
        raw: str | dict[str, Any],
        *,
        first_in_round: bool,
        later: Sequence[tuple[str, str]] = (),
    ) -> Decision:
        """The decision for one request; reads the run's state and changes nothing."""
        ignored = self._run.ledger.stop_required_before(self._run.usage.model_calls)
        if ignored is not None:
            return Stop(ignored, AFTER_STOP_REQUIRED)
        candidate = self._candidate(tool_name, tool_call_id, raw, first_in_round)
        reserve = sum(self._later_bound(call_id, name) for call_id, name in later)
        return self._within_capacity(candidate, tool_name, tool_call_id, reserve)

    def _candidate(
        self, tool_name: str, tool_call_id: str, raw: str | dict[str, Any], first_in_round: bool
    ) -> Execute | Respond:
        tool = _known_tool(tool_name, self._adapters)
        if tool is None:
            return self._unrecorded(
                tool_call_id, tool_name, RejectCode.UNKNOWN_TOOL, first_in_round
            )
        id_problem = self._id_problem(tool_call_id, tool)
        if id_problem is not None:
            return self._unrecorded(
                tool_call_id, tool, RejectCode.INVALID_ENVELOPE, first_in_round, field=id_problem
            )
        if not first_in_round:
            return self._reject(tool, tool_call_id, RejectCode.ONE_TOOL_PER_ROUND)
        try:
            envelope = parse_envelope(raw, INPUT_MODELS[tool])
        except EnvelopeError as exc:
            cause = self._stop_cause(self._run.ledger.no_gain_streak)
            if cause is not None:
                return self._stop_answer(tool, tool_call_id, cause)
            return self._reject(tool, tool_call_id, RejectCode.INVALID_ENVELOPE, field=exc.field)
        return self._decide_valid(tool, tool_call_id, envelope)

    def _decide_valid(
        self, tool: ToolName, tool_call_id: str, envelope: Envelope[Any]
    ) -> Execute | Respond:
        ledger = self._run.ledger
        streak = ledger.no_gain_streak
        refusal = self._evaluation_refusal(tool, tool_call_id, envelope.previous_observation)
        if refusal is not None:
            cause = self._stop_cause(streak)
            return refusal if cause is None else self._stop_answer(tool, tool_call_id, cause)
        consumed = None
        if ledger.pending_evaluation is not None and envelope.previous_observation is not None:
            consumed = Consumed(ledger.pending_evaluation, envelope.previous_observation.evaluation)
            streak = next_streak(streak, consumed.evaluation)
        business = envelope.input
        canonical, scope = business.canonical(), business.scope()
        execute = Execute(tool, tool_call_id, business, canonical, scope, consumed)
        cause = self._stop_cause(streak)
        if cause is not None:
            return self._stop_answer(tool, tool_call_id, cause, execute)
        if ledger.already_executed(tool, canonical):
            if self._budgets.saturated(streak + 1):
                saturated = StopReason.INFORMATION_SATURATED
                return replace(
                    self._stop_answer(tool, tool_call_id, saturated, execute), duplicate=True
                )
            duplicate = self._reject(
                tool, tool_call_id, RejectCode.DUPLICATE_CALL, business=business, scope=scope
            )
            return replace(duplicate, consumed=consumed, duplicate=True)
        return execute

    def _evaluation_refusal(
        self, tool: ToolName, tool_call_id: str, previous: PreviousObservation | None
    ) -> Respond | None:
        """Why ``previous_observation`` is refused, if it is.

        With a result pending it must name exactly that call. With nothing pending it must be
        absent: naming an ERROR, REJECTED, empty or already evaluated call, or an id this run
        never handled, is refused ``PREVIOUS_OBSERVATION_MISMATCH`` (never silently dropped) —
        only a non-empty READY result can be evaluated, and only once.
        """
        pending = self._run.ledger.pending_evaluation
        if pending is None:
            if previous is None:
                return None
            return self._reject(
                tool,
                tool_call_id,
                RejectCode.PREVIOUS_OBSERVATION_MISMATCH,
                hint=self._hints["NOTHING_PENDING"],
            )
        if previous is None:
            code = RejectCode.PREVIOUS_OBSERVATION_REQUIRED
        elif previous.tool_call_id != pending:
            code = RejectCode.PREVIOUS_OBSERVATION_MISMATCH
        else:
            return None
        return self._reject(tool, tool_call_id, code, expected=pending)

    def _stop_cause(self, streak: int) -> StopReason | None:
        return self._budgets.stop_cause(self._run.usage, streak)

    def _id_problem(self, tool_call_id: str, tool: ToolName) -> str | None:
        """An id that could never be evaluated, cited or echoed within the observation bound."""
        if not tool_call_id:
            return ID_MISSING
        if self._run.ledger.burned(tool_call_id):
            return ID_REUSED
        if len(tool_call_id) > MAX_TOOL_CALL_ID_CHARS:
            return ID_TOO_LONG
        # The largest observations an executed call can get besides its items.
        empty = ready_observation(tool_call_id, tool, (), truncated=True, max_bytes=1 << 30)[0]
        failed = error_observation(tool_call_id, tool, AdapterErrorCode.FORBIDDEN_QUERY.value)
        if max(len(empty.encode("utf-8")), len(failed.encode("utf-8"))) > self._max_obs:
            return ID_TOO_LONG
        return None

    # -- capacity -------------------------------------------------------------------------

    def _later_bound(self, tool_call_id: str, tool_name: str) -> int:
        key = (tool_call_id, tool_name)
        bound = self._bounds.get(key)
        if bound is None:
            bound = rejection_bound(tool_call_id, tool_name, self._max_obs, self._hints)
            self._bounds[key] = bound
        return bound

    def _within_capacity(
        self, candidate: Execute | Respond, tool_name: str, tool_call_id: str, reserve: int
    ) -> Decision:
        budgets, usage = self._budgets, self._run.usage
        if self._run.ledger.stop_required:
            # This round's first request got STOP_REQUIRED; the rest of the round was reserved
            # then: their answers only have to fit the capacity.
            if isinstance(candidate, Respond) and budgets.within_capacity(
                usage, len(candidate.observation.encode("utf-8")) + reserve
            ):
                return candidate
            return Stop(CAPACITY_STOP, OVER_CAPACITY)
        if isinstance(candidate, Execute):
            size = self._max_obs + self._stop_bound
        else:
            size = len(candidate.observation.encode("utf-8"))
            if candidate.stop_cause is None:
                size += self._stop_bound
        if budgets.keeps_draft(usage, size + reserve):
            return candidate
        stop = self._as_stop(candidate, tool_name, tool_call_id)
        if budgets.within_capacity(usage, len(stop.observation.encode("utf-8")) + reserve):
            return stop
        return Stop(CAPACITY_STOP, OVER_CAPACITY)

    def _as_stop(self, candidate: Execute | Respond, tool_name: str, tool_call_id: str) -> Respond:
        if isinstance(candidate, Respond) and candidate.stop_cause is not None:
            return candidate
        if isinstance(candidate, Execute):
            return self._stop_answer(candidate.tool, tool_call_id, CAPACITY_STOP, candidate)
        observation = stop_required_observation(
            tool_call_id, tool_name, max_bytes=self._max_obs, hints=self._hints
        )
        invocation = candidate.invocation
        if invocation is not None:
            invocation = replace(invocation, code=STOP_REQUIRED_CODE)
        return Respond(
            observation, invocation, candidate.consumed, candidate.duplicate, CAPACITY_STOP
        )

    # -- answers --------------------------------------------------------------------------

    def _unrecorded(
        self,
        tool_call_id: str,
        tool_name: str,
        code: RejectCode,
        first_in_round: bool,
        *,
        field: str = "arguments",
    ) -> Respond:
        """An answer that creates no canonical invocation (unknown tool, unusable id)."""
        cause = self._stop_cause(self._run.ledger.no_gain_streak) if first_in_round else None
        if cause is not None:
            text = stop_required_observation(
                tool_call_id, tool_name, max_bytes=self._max_obs, hints=self._hints
            )
            return Respond(text, None, stop_cause=cause)
        text = rejected_observation(
            tool_call_id, tool_name, code, field=field, max_bytes=self._max_obs, hints=self._hints
        )
        return Respond(text, None)

    def _stop_answer(
        self,
        tool: ToolName,
        tool_call_id: str,
        cause: StopReason,
        execute: Execute | None = None,
    ) -> Respond:
        invocation = self._invocation(
            tool,
            tool_call_id,
            code=STOP_REQUIRED_CODE,
            business=execute.business if execute is not None else None,
            scope=execute.scope if execute is not None else None,
        )
        if execute is not None:
            invocation.canonical = execute.canonical
        text = stop_required_observation(
            tool_call_id, tool, max_bytes=self._max_obs, hints=self._hints
        )
        consumed = execute.consumed if execute is not None else None
        return Respond(text, invocation, consumed, stop_cause=cause)

    def _reject(
        self,
        tool: ToolName,
        tool_call_id: str,
        code: RejectCode,
        *,
        expected: str | None = None,
        field: str = "arguments",
        hint: str | None = None,
        business: BaseModel | None = None,
        scope: str | None = None,
    ) -> Respond:
        text = rejected_observation(
            tool_call_id,
            tool,
            code,
            expected_previous_tool_call_id=expected,
            field=field,
            hint=hint,
            max_bytes=self._max_obs,
            hints=self._hints,
        )
        invocation = self._invocation(tool, tool_call_id, code=code, business=business, scope=scope)
        return Respond(text, invocation)

    def _invocation(
        self,
        tool: ToolName,
        tool_call_id: str,
        *,
        code: InvocationCode | None,
        business: BaseModel | None,
        scope: str | None,
        status: InvocationStatus = InvocationStatus.REJECTED,
    ) -> Invocation:
        return Invocation(
            tool_call_id=tool_call_id,
            run_id=self._run.run_id,
            tool=tool,
            status=status,
            code=code,
            business_input=business.model_dump(mode="json") if business is not None else None,
            scope=scope,
        )

    # -- execution ------------------------------------------------------------------------

    async def _execute(self, decision: Execute) -> tuple[str, Invocation]:
        ctx = self._ctx
        ctx.state.usage.tool_calls += 1
        ctx.deps.hooks.tool_started(ctx.state, decision.tool, decision.scope)
        started = ctx.elapsed_ms()
        try:
            result = await self._invoke(decision)
        except BaseException as exc:
            # The deadline, a Cancel or a stop cut the call off, or the adapter crashed: the
            # adapter did run, so the call is still a canonical invocation (CONTRACTS §6),
            # never citable.
            self._record_cut_off(decision, started, exc)
            raise
        invocation = self._executed(decision, started, InvocationStatus.READY)
        projected = None if isinstance(result, Failed) else self._project(decision, result)
        if projected is None:
            code = result.code if isinstance(result, Failed) else AdapterErrorCode.INTERNAL
            invocation.status, invocation.code = InvocationStatus.ERROR, code
            text = error_observation(
                decision.tool_call_id, decision.tool, code.value, max_bytes=self._max_obs
            )
            return text, invocation
        text, count, truncated = projected
        invocation.item_count, invocation.truncated = count, truncated
        if count > 0:
            ctx.state.ledger.pending_evaluation = decision.tool_call_id
        else:
            # An empty result carries no information: it counts as NO_GAIN by itself.
            invocation.evaluation = Evaluation.NO_GAIN
            ctx.state.ledger.count(Evaluation.NO_GAIN)
        return text, invocation

    def _executed(
        self,
        decision: Execute,
        started: float,
        status: InvocationStatus,
        code: InvocationCode | None = None,
    ) -> Invocation:
        """The canonical invocation of a call that reached its adapter."""
        invocation = self._invocation(
            decision.tool,
            decision.tool_call_id,
            code=code,
            business=decision.business,
            scope=decision.scope,
            status=status,
        )
        invocation.canonical = decision.canonical
        invocation.started_ms = started
        invocation.duration_ms = self._ctx.elapsed_ms() - started
        return invocation

    def _record_cut_off(self, decision: Execute, started: float, exc: BaseException) -> None:
        """Record a call ended mid-call: cut off by a cancellation (``TIMEOUT`` at the
        deadline, else ``CANCELLED``), or crashed (``INTERNAL``: an adapter raising what no
        ``except Exception`` catches is a crash, never a Cancel).

        No observation was given for it (the model never sees one), so it has no bytes.
        """
        ctx = self._ctx
        code: InvocationCode = AdapterErrorCode.INTERNAL
        if isinstance(exc, _CUT_OFF):
            code = (
                CUT_OFF_TIMEOUT
                if ctx.state.abort_reason is StopReason.DEADLINE_EXCEEDED
                else CANCELLED
            )
        else:
            log_failure(
                _log, logging.ERROR, "adapter %s crashed on %s: %s",
                decision.tool, decision.tool_call_id, exc=exc,
            )  # fmt: skip
        invocation = self._executed(decision, started, InvocationStatus.ERROR, code)
        ctx.state.ledger.record(invocation)
        ctx.deps.hooks.tool_invocation(ctx.state, invocation)

    def _project(self, decision: Execute, result: Ready) -> tuple[str, int, bool] | None:
        """The READY observation through the tool's whitelist (``sre_diag.harness.whitelist``),
        or None when the adapter's result does not fit it (answered ``ERROR INTERNAL``)."""
        try:
            projected = project(decision.tool, result)
            return ready_observation(
                decision.tool_call_id,
                decision.tool,
                projected.items,
                truncated=projected.truncated,
                max_bytes=self._max_obs,
                summary=projected.summary,
                first_items=projected.first_items,
            )
        except Unprojectable as refused:
            _log.warning(
                "adapter %s returned a result outside its whitelist on %s: %s",
                decision.tool, decision.tool_call_id, refused.reason,
            )  # fmt: skip
            return None
        except Exception as exc:
            log_failure(
                _log, logging.WARNING, "adapter %s returned unusable items on %s: %s",
                decision.tool, decision.tool_call_id, exc=exc,
            )  # fmt: skip
            return None

    async def _invoke(self, decision: Execute) -> AdapterResult:
        """Run the adapter; anything but a ``Ready`` or ``Failed`` is ``Failed(INTERNAL)``.

        The adapter did run, so such an outcome is recorded as an ERROR invocation and counts
        against the tool budget like any other execution.
        """
        adapter = self._adapters[decision.tool]
        call = AdapterCall(
            tool_call_id=decision.tool_call_id,
            run_id=self._run.run_id,
            input=decision.business,
        )
        try:
            result: object = await adapter.invoke(call)
        except Exception as exc:
            # The exception text may carry backend detail or secrets: only its type is logged.
            log_failure(
                _log, logging.WARNING, "adapter %s failed on %s: %s",
                decision.tool, decision.tool_call_id, exc=exc,
            )  # fmt: skip
            return Failed(AdapterErrorCode.INTERNAL)
        if isinstance(result, Ready):
            return result
        if isinstance(result, Failed) and isinstance(result.code, AdapterErrorCode):
            return result
        _log.warning(
            "adapter %s returned %s on %s instead of a result",
            decision.tool,
            type(result).__name__,
            decision.tool_call_id,
        )
        return Failed(AdapterErrorCode.INTERNAL)


def _known_tool(name: str, adapters: Mapping[ToolName, object]) -> ToolName | None:
    try:
        tool = ToolName(name)
    except ValueError:
        return None
    return tool if tool in adapters else None
