"""The diagnosis use case: one request in, one Execution Result out.

``Harness.diagnose`` validates the input (refusing before any model call), builds the run's
RunContext, ONE FunctionAgent with its gated LLM and interceptor, runs it once — no retry of the
agent or of any model call — under the deadline and the cancellation token, and classifies the
end: a strictly parsed Draft, a controlled stop, or a closed failure. Every run that started
gets an audit record, whatever ends it: the run is handed to the harness's ``RunAudit`` port
(``sre_diag.audit.AuditTrail``, injected by ``sre_diag.wiring``) and its record is written AFTER
``diagnose`` returns, so a slow or broken sink never delays the answer.
Callers await ``drain_audit`` (or ``aclose``, which drains) before they exit, each bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
from llama_index.core.agent.workflow import AgentOutput
from workflows.handler import WorkflowHandler

from sre_diag.contract.draft import DraftDefect, DraftRejected, parse_draft
from sre_diag.contract.prompts import prompt_set
from sre_diag.contract.request import DiagnosisRequest, InputLimits, model_input
from sre_diag.contract.result import (
    ExecutionResult,
    Failure,
    FailureCode,
    Outcome,
    UsageReport,
)
from sre_diag.errors import BudgetStop, RunStop, StopReason
from sre_diag.harness.agent import build_agent
from sre_diag.harness.audit_port import RunAudit
from sre_diag.harness.budget import Budgets
from sre_diag.harness.catalog import Catalogues
from sre_diag.harness.context import RunContext
from sre_diag.harness.hooks import HookSet, StepHook
from sre_diag.harness.interceptor import ToolInterceptor
from sre_diag.harness.memory import run_memory
from sre_diag.harness.model import OversizedResponse, build_llm, model_http_client
from sre_diag.harness.state import RoundOutcome, new_run_id
from sre_diag.http_bounds import AnswerTooLarge
from sre_diag.log import bind_run_id, log_failure
from sre_diag.settings import Settings
from sre_diag.tools.base import EvidenceAdapter, ToolName

__all__ = ["DeferredAudit", "Harness", "budgets_from"]


@dataclass(slots=True)
class DeferredAudit:
    """A run's audit record held back by ``Harness.diagnose`` until its caller knows the record
    is its to write (a queued run's owner: once its final post is confirmed or known
    impossible, and only if no claimer took the run over). Written at most once."""

    _write: Callable[[], None] | None = None

    @property
    def pending(self) -> bool:
        return self._write is not None

    def hold(self, write: Callable[[], None]) -> None:
        self._write = write

    def write(self) -> None:
        """Hand the record over now (once)."""
        write, self._write = self._write, None
        if write is not None:
            write()

    def drop(self) -> None:
        """Another owner writes the run's record: this one never is."""
        self._write = None


_log = logging.getLogger(__name__)

# The framework's own iteration cap must never be the limit: the gate is.
_ITERATION_HEADROOM = 3

# Signals that end the run but belong to whoever sent them: recorded, then re-raised.
_SIGNALS = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)

# A drain waits for the record being written (at most DIAG_AUDIT_TIMEOUT_SECONDS from its start)
# plus the hop back from the writer's thread.
_AUDIT_DRAIN_SLACK_SECONDS = 1.0


@dataclass
class Harness:
    """Runs diagnoses with one set of settings, adapters, audit port and model HTTP client."""

    settings: Settings
    adapters: Mapping[ToolName, EvidenceAdapter[Any]]
    audit: RunAudit
    """Where every finished run goes (``sre_diag.audit.AuditTrail``)."""
    http_client: httpx.AsyncClient | None = None
    model_connections: int = 100
    """The model HTTP pool's size (a worker sizes it to ``DIAG_MAX_CONCURRENT_RUNS``)."""
    catalogues: Catalogues = field(init=False, repr=False)
    """The tool descriptions with their catalogues (``DIAG_PROMPT``'s language), one snapshot
    per run, refreshed every ``DIAG_CATALOG_REFRESH_SECONDS``."""

    def __post_init__(self) -> None:
        self.catalogues = Catalogues(
            self.adapters, prompt_set(self.settings.prompt), self.settings.catalog_refresh_seconds
        )
        # One pooled HTTP client for every model request of this process, closed by aclose().
        if self.http_client is None:
            self.http_client = model_http_client(
                timeout_seconds=self.settings.model_request_timeout_seconds,
                connections=self.model_connections,
                max_draft_bytes=self.settings.max_draft_bytes,
            )

    async def aclose(self) -> None:
        """Close the model HTTP client and the adapters; drain the audit writer (bounded as
        ``drain_audit``) and close its sink."""
        if self.http_client is not None:
            await self.http_client.aclose()
        for adapter in self.adapters.values():
            await adapter.aclose()
        await self.audit.aclose(self.audit_drain_seconds)

    @property
    def audit_drain_seconds(self) -> float:
        """The default drain bound: one audit write (``DIAG_AUDIT_TIMEOUT_SECONDS``) plus 1 s."""
        return self.settings.audit_timeout_seconds + _AUDIT_DRAIN_SLACK_SECONDS

    async def drain_audit(self, timeout_seconds: float | None = None) -> bool:
        """Wait for the audit records handed over so far, at most ``timeout_seconds`` (default
        ``audit_drain_seconds``); False when some are still being written."""
        bound = self.audit_drain_seconds if timeout_seconds is None else timeout_seconds
        return await self.audit.drain(bound)

    @property
    def audit_records_lost(self) -> int:
        """Audit records not written (sink failed or too slow, queue full, closed); logged."""
        return self.audit.records_lost

    @property
    def limits(self) -> InputLimits:
        s = self.settings
        return InputLimits(s.max_query_bytes, s.max_previous_turn_bytes, s.max_input_bytes)

    async def diagnose(
        self,
        request: DiagnosisRequest,
        *,
        session_id: str | None = None,
        hooks: Sequence[StepHook] = (),
        cancel_event: asyncio.Event | None = None,
        run_id: str | None = None,
        audit_gate: Callable[[], Awaitable[bool]] | None = None,
        defer_audit: DeferredAudit | None = None,
    ) -> ExecutionResult:
        """Run one diagnosis. Raises ``InputRejected`` before any model call on bad input.

        ``run_id``: the id the caller already gave the run (a queued job's), else a new one.
        ``audit_gate``: asked once the run ended; False means another process owns the run's
        outcome now (a fenced worker, see ``sre_diag.slack.fence``) and this run writes no audit
        record. ``defer_audit``: the record is held there (built in this run's context) for the
        caller to write or drop; a run ended by a signal writes it at once.
        """
        if request.asked_at is None:
            request = dataclasses.replace(request, asked_at=datetime.now(UTC))
        message = model_input(request, self.limits)
        ctx = RunContext.start(
            session_id=session_id or f"session-{uuid.uuid4().hex[:12]}",
            run_id=run_id or new_run_id(),
            budgets=budgets_from(self.settings),
            hooks=HookSet(hooks),
            cancel_event=cancel_event or asyncio.Event(),
            asked_at=request.asked_at,
        )
        ctx.state.usage.bytes += len(message.encode("utf-8"))
        bind_run_id(ctx.state.run_id)  # every log line of this run (and its tasks) carries run_id
        _log.info("run %s started (session %s)", ctx.state.run_id, ctx.state.session_id)
        try:
            result = await self._run_guarded(ctx, message)
        except _SIGNALS:
            # Task cancellation, KeyboardInterrupt, SystemExit: the run still gets its result
            # and audit record, then the signal goes on to whoever sent it.
            self._end(ctx, _last_resort(ctx, None, StopReason.CANCELLED))
            raise
        except BaseException as exc:
            # Any other BaseException (one an adapter or a library raised) ends the run FAILED.
            log_failure(_log, logging.ERROR, "run %s ended by %s", ctx.state.run_id, exc=exc)
            result = _last_resort(ctx, FailureCode.AGENT_ERROR, "UNCLASSIFIED")
        if audit_gate is not None and not await audit_gate():
            _log.warning("run %s fenced: its outcome belongs to another owner", ctx.state.run_id)
            ctx.deps.hooks.result(ctx.state, result)
            return result
        self._end(ctx, result, defer_audit)
        return result

    def record_lost(
        self,
        run_id: str,
        *,
        session_id: str,
        asked_at: datetime | None,
        detail: str,
        hooks: Sequence[StepHook] = (),
        audit: bool = True,
    ) -> ExecutionResult:
        """A run that started elsewhere and whose process vanished: it ends ``FAILED
        AGENT_ERROR <detail>`` with its audit record (never re-run); ``audit=False`` when the
        run's record is another owner's to write."""
        ctx = RunContext.start(
            session_id=session_id,
            run_id=run_id,
            budgets=budgets_from(self.settings),
            hooks=HookSet(hooks),
            asked_at=asked_at,
        )
        result = _failed(ctx, FailureCode.AGENT_ERROR, detail)
        if audit:
            self._end(ctx, result)
        else:
            _log.info("run %s ended: %s (recorded by its owner)", run_id, result.outcome.value)
            ctx.deps.hooks.result(ctx.state, result)
        return result

    def _end(
        self, ctx: RunContext, result: ExecutionResult, defer: DeferredAudit | None = None
    ) -> None:
        """Log the end, hand the audit record over (never awaited here; or hold it in
        ``defer``, to be written in this context later), tell the hooks."""
        _log.info("run %s ended: %s", ctx.state.run_id, result.outcome.value)
        if defer is None:
            self.audit.hand_over(ctx, result)
        else:
            context = contextvars.copy_context()
            defer.hold(lambda: context.run(self.audit.hand_over, ctx, result))
        ctx.deps.hooks.result(ctx.state, result)

    async def _run_guarded(self, ctx: RunContext, message: str) -> ExecutionResult:
        """The run, with a last resort: whatever an Exception escapes, the run ends FAILED.

        ``RecursionError``, ``MemoryError`` or a bug anywhere between the input check and the
        Draft parse must not leave a started run without a result and an audit record.
        """
        try:
            return await self._run(ctx, message)
        except Exception as exc:
            log_failure(
                _log,
                logging.ERROR,
                "run %s failed outside the agent loop: %s",
                ctx.state.run_id,
                exc=exc,
            )
            return _last_resort(ctx, FailureCode.AGENT_ERROR, "UNCLASSIFIED")

    async def _run(self, ctx: RunContext, message: str) -> ExecutionResult:
        s = self.settings
        llm = build_llm(
            ctx,
            model=s.model,
            api_base=s.openai_base_url,
            api_key=s.openai_api_key.get_secret_value() if s.openai_api_key else None,
            context_window=s.model_context_window,
            request_timeout=s.model_request_timeout_seconds,
            http_client=self.http_client,
            structured_output=s.structured_output,
        )
        prompts = self.catalogues.prompts
        descriptions = await self.catalogues.descriptions()  # this run's snapshot
        interceptor = ToolInterceptor(ctx, self.adapters, prompts.hints)
        agent = build_agent(llm, prompts.system, interceptor, descriptions)
        handler = agent.run(
            user_msg=message,
            memory=run_memory(llm),
            max_iterations=s.max_model_calls + _ITERATION_HEADROOM,
        )
        try:
            output = await _await_bounded(ctx, handler)
        except RunStop as stop:
            return _stopped(ctx, stop.reason)
        except Exception as exc:
            return _failed(ctx, *_classify_failure(ctx, exc))
        return self._finish(ctx, output)

    def _finish(self, ctx: RunContext, output: Any) -> ExecutionResult:
        if not isinstance(output, AgentOutput):
            return _failed(ctx, FailureCode.AGENT_ERROR, "NO_OUTPUT")
        text = output.response.content
        room = ctx.deps.budgets.run_capacity_bytes - ctx.state.usage.bytes
        try:
            draft = parse_draft(
                text,
                max_bytes=min(ctx.deps.budgets.max_draft_bytes, room),
                ready_ids=ctx.state.ledger.ready_ids(),
            )
        except DraftRejected as rejected:
            if _cut_by_token_budget(ctx):
                # The answer was stopped at the completion tokens the run had left: the token
                # budget ended the run, not a defect of the model's output.
                return _stopped(ctx, StopReason.TOKEN_BUDGET_EXHAUSTED)
            return _failed(ctx, FailureCode.INVALID_DRAFT, rejected.defect.value)
        ctx.state.usage.bytes += len((text or "").encode("utf-8"))
        return ExecutionResult(
            run_id=ctx.state.run_id,
            session_id=ctx.state.session_id,
            outcome=Outcome.DRAFT,
            draft=draft,
            progress=ctx.state.ledger.progress(),
            usage=_usage(ctx),
        )


def budgets_from(settings: Settings) -> Budgets:
    """The run budgets the settings give (``DIAG_MAX_MODEL_CALLS`` ...)."""
    return Budgets(
        max_model_calls=settings.max_model_calls,
        max_total_tokens=settings.max_total_tokens,
        deadline_seconds=settings.deadline_seconds,
        max_tool_calls=settings.max_tool_calls,
        no_gain_streak=settings.no_gain_streak,
        max_observation_bytes=settings.max_observation_bytes,
        max_draft_bytes=settings.max_draft_bytes,
        run_capacity_bytes=settings.run_capacity_bytes,
    )


def _cut_by_token_budget(ctx: RunContext) -> bool:
    """The final round's answer was stopped at a ``max_tokens`` the token budget set (lower
    than ``max_draft_bytes``, which alone could not cut an acceptable Draft)."""
    if not ctx.state.rounds:
        return False
    last = ctx.state.rounds[-1]
    sent = last.max_tokens
    return last.cut and sent is not None and sent < ctx.deps.budgets.max_draft_bytes


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a finished future's exception so asyncio never reports it as unretrieved."""
    if not future.cancelled():
        future.exception()


def _last_resort(
    ctx: RunContext, code: FailureCode | None, why: str | StopReason
) -> ExecutionResult:
    """A result built so that it cannot fail: the ledger snapshot is left out if it does."""
    try:
        if code is None:
            return _stopped(ctx, StopReason(why))
        return _failed(ctx, code, str(why))
    except Exception:
        run = ctx.state
        usage = UsageReport(
            model_calls=0, prompt_tokens=0, completion_tokens=0, tool_calls=0, bytes=0,
            elapsed_ms=0,
        )  # fmt: skip
        if code is None:
            return ExecutionResult(
                run_id=run.run_id, session_id=run.session_id, outcome=Outcome.STOPPED,
                stop_reason=StopReason(why), usage=usage,
            )  # fmt: skip
        return ExecutionResult(
            run_id=run.run_id, session_id=run.session_id, outcome=Outcome.FAILED, usage=usage,
            failure=Failure(code=code, detail=str(why)),
        )  # fmt: skip


async def _await_bounded(ctx: RunContext, handler: WorkflowHandler) -> Any:
    """Await the run; the deadline and the cancellation token abort it even mid-request.

    Every task started here is awaited or has its exception consumed, whichever way the run
    ends: a run aborted while its workflow raised a typed stop must not leave "Task exception
    was never retrieved" behind.
    """
    run = asyncio.ensure_future(_result_of(handler))
    run.add_done_callback(_consume)
    cancelled = asyncio.ensure_future(ctx.deps.cancel_event.wait())
    cancelled.add_done_callback(_consume)
    try:
        done, _ = await asyncio.wait(
            {run, cancelled},
            timeout=max(ctx.remaining_seconds(), 0.0),
            return_when=asyncio.FIRST_COMPLETED,
        )
    except asyncio.CancelledError:
        ctx.state.abort_reason = StopReason.CANCELLED
        await _abort(handler, run)
        raise
    finally:
        cancelled.cancel()
    if run in done:
        return run.result()
    reason = (
        StopReason.CANCELLED if ctx.deps.cancel_event.is_set() else StopReason.DEADLINE_EXCEEDED
    )
    ctx.state.abort_reason = reason
    await _abort(handler, run)
    raise BudgetStop(reason)


async def _result_of(handler: WorkflowHandler) -> Any:
    return await handler


async def _abort(handler: WorkflowHandler, run: asyncio.Future[Any]) -> None:
    """Stop the workflow and its in-flight HTTP request; its own outcome no longer matters.

    ``cancel_run`` waits for the workflow's end and lets a ``BaseException`` it ended with
    (our typed ``RunStop``, e.g. the gate's CANCELLED raised just before the cancel landed) out:
    that is swallowed here, so ``run`` is always cancelled if still pending and awaited.
    """
    try:
        if not run.done():
            with contextlib.suppress(Exception, RunStop):
                await handler.cancel_run()
    finally:
        if not run.done():
            run.cancel()
        with contextlib.suppress(BaseException):
            await run


def _classify_failure(ctx: RunContext, exc: BaseException) -> tuple[FailureCode, str]:
    chain = _exception_chain(exc)
    refused = _refused_by_http_client(chain)
    if refused:
        return FailureCode.MODEL_ERROR, refused
    for item in chain:
        if isinstance(item, OversizedResponse):
            if item.final:
                return FailureCode.INVALID_DRAFT, DraftDefect.OVERSIZED.value
            return FailureCode.MODEL_ERROR, "OVERSIZED_RESPONSE"
        if isinstance(item, openai.APIStatusError):
            return FailureCode.MODEL_ERROR, f"HTTP_{item.status_code}"
        if isinstance(item, openai.APITimeoutError):
            _log.error("model endpoint %s: no answer in time", _endpoint(item.request))
            return FailureCode.MODEL_ERROR, "TIMEOUT"
        if isinstance(item, openai.APIConnectionError):
            cause = item.__cause__ or item
            log_failure(
                _log,
                logging.ERROR,
                "model endpoint %s unreachable (%s)",
                _endpoint(item.request),
                exc=cause,
            )
            return FailureCode.MODEL_ERROR, "CONNECTION"
        if isinstance(item, openai.APIError):
            return FailureCode.MODEL_ERROR, "BAD_RESPONSE"
    if ctx.state.rounds and ctx.state.rounds[-1].outcome in {
        RoundOutcome.IN_FLIGHT,
        RoundOutcome.ERROR,
    }:
        # The failure happened inside a model round (e.g. an unusable response body).
        return FailureCode.MODEL_ERROR, "BAD_RESPONSE"
    log_failure(_log, logging.ERROR, "run %s failed: %s", ctx.state.run_id, exc=exc)
    return FailureCode.AGENT_ERROR, "UNCLASSIFIED"


def _refused_by_http_client(chain: Sequence[BaseException]) -> str:
    """The detail of an answer the model HTTP client itself refused (``sre_diag.http_bounds``;
    the SDK wraps it as a connection error), or ''."""
    if any(isinstance(item, AnswerTooLarge) for item in chain):
        return "OVERSIZED_RESPONSE"
    if any(isinstance(item, httpx.DecodingError) for item in chain):
        return "BAD_RESPONSE"
    return ""


def _endpoint(request: httpx.Request) -> str:
    """``host:port`` of the model endpoint: never the key, the user info or the path."""
    url = request.url
    return f"{url.host}:{url.port}" if url.port else url.host


def _exception_chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _usage(ctx: RunContext) -> UsageReport:
    u = ctx.state.usage
    return UsageReport(
        model_calls=u.model_calls,
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        tool_calls=u.tool_calls,
        bytes=u.bytes,
        elapsed_ms=round(ctx.elapsed_ms()),
    )


def _stopped(ctx: RunContext, reason: StopReason) -> ExecutionResult:
    return ExecutionResult(
        run_id=ctx.state.run_id,
        session_id=ctx.state.session_id,
        outcome=Outcome.STOPPED,
        stop_reason=reason,
        progress=ctx.state.ledger.progress(),
        usage=_usage(ctx),
    )


def _failed(ctx: RunContext, code: FailureCode, detail: str) -> ExecutionResult:
    return ExecutionResult(
        run_id=ctx.state.run_id,
        session_id=ctx.state.session_id,
        outcome=Outcome.FAILED,
        progress=ctx.state.ledger.progress() if ctx.state.ledger.has_ready() else None,
        usage=_usage(ctx),
        failure=Failure(code=code, detail=detail),
    )
