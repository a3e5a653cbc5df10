"""``eval``: run evaluation cases through the real harness and score them (CONTRACTS §1, §9).

A case is a folder with ``case.json`` and its own evidence (``runbooks/``, ``logs/``,
``mysql.sql``). Each case run gets isolated settings: the case's runbooks as
``DIAG_KNOWLEDGE_DIR``, its logs as ``DIAG_LOGS_SOURCE``, a throwaway database loaded from
``mysql.sql`` with a SELECT-only account (created through ``--mysql-admin-dsn`` and dropped after
the run; without it a MySQL case is ``SKIPPED``), its own audit folder and runbook cache in a
temporary folder, the case's ``asked_at`` and ``previous_turn``. Everything else (model endpoint,
budgets, prompt language) comes from the configured settings.

The model is the configured one, or with ``--replay`` the case's recorded cassettes served by the
scripted model server (:mod:`sre_diag.doubles.scripted_model`). Cassette naming: ``cassette.json``
is the run a competent model could have produced; ``cassette.<variant>.json`` are further
recorded runs of the same case, each reported as ``<case id>:<variant>`` (the bundled suite names
the ones that must fail the scoring ``cassette.fail-<why>.json``). A replay that leaves scripted
steps unused fails the ``cassette`` criterion: the recorded run no longer replays as recorded.

Scoring (case-insensitive on ``conclusion.summary``; absent keys are not scored): ``outcome``,
``conclusion`` (REQUIRED / NULL / ANY), ``root_cause_any``, ``root_cause_all``,
``must_not_mention``, ``must_cite_tools`` (each tool has a READY check cited by the conclusion or
a FINDING) and, beyond §9, ``max_tool_calls`` (executed tool calls, e.g. 0 for a question too
vague to bound). A run that FAILED closed never passes (criterion ``failure``).

Exit status: 0 every case ran (whatever the scores; SKIPPED included), 1 a case could not run
(unreadable ``case.json``, no cassette with ``--replay``, the database could not be prepared,
input refused), 2 bad arguments.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import ValidationError

from sre_diag.commands.eval.cases import (
    DEFAULT_CASSETTE,
    MYSQL_FILE,
    Case,
    CaseSpec,
    EvalUsageError,
    discover_cases,
)
from sre_diag.commands.eval.database import AdminDsn, EvalDatabaseError, ThrowawayDatabase
from sre_diag.commands.eval.report import (
    CRITERIA_SHOWN,
    RunReport,
    render_table,
    totals,
    write_report,
)
from sre_diag.commands.eval.score import score
from sre_diag.contract.request import DiagnosisRequest
from sre_diag.contract.result import ExecutionResult
from sre_diag.doubles.scripted_model import ScriptedModelServer, load_cassette
from sre_diag.errors import ConfigError, InputRejected
from sre_diag.settings import Settings, describe_invalid_settings

__all__ = ["RunPlan", "plan_runs", "run_eval"]

EXIT_OK, EXIT_COULD_NOT_RUN, EXIT_BAD_ARGUMENTS = 0, 1, 2
_REPLAY_MODEL = "recorded-cassette"


@dataclass(frozen=True, slots=True)
class RunPlan:
    case: Case
    variant: str | None
    cassette: Path | None
    repeat: int

    def new_report(self, status: Literal["PASS", "FAIL", "SKIPPED", "ERROR"]) -> RunReport:
        case_id = self.case.case_id
        run_id = case_id if self.variant is None else f"{case_id}:{self.variant}"
        name = self.cassette.name if self.cassette is not None else None
        return RunReport(run_id, case_id, name, self.repeat, status)


@dataclass
class Evaluation:
    """Runs the plans with one base configuration; ``settings`` are the configured ones."""

    settings: Settings
    replay: bool
    admin: AdminDsn | None
    progress: TextIO = sys.stderr
    total: int = 0
    _done: int = 0

    def case_settings(self, case: Case, work: Path, dsn: str, model_url: str | None) -> Settings:
        overrides: dict[str, Any] = {
            "DIAG_KNOWLEDGE_DIR": case.optional_dir("runbooks"),
            "DIAG_LOGS_SOURCE": case.optional_dir("logs"),
            "DIAG_MYSQL_DSN": dsn,
            "DIAG_MYSQL_ALLOWED_TABLES": "",
            "DIAG_MYSQL_REQUIRE_READ_ONLY": True,
            "DIAG_AUDIT_SINK": f"jsonl:{work / 'audit'}",
            "DIAG_CACHE_DIR": str(work / "cache"),
        }
        if model_url is not None:
            overrides.update(
                OPENAI_BASE_URL=model_url, OPENAI_API_KEY="offline-eval", DIAG_MODEL=_REPLAY_MODEL
            )
        try:
            return Settings(**overrides)
        except ValidationError as exc:
            raise ConfigError(describe_invalid_settings(exc)) from None

    async def run(self, plan: RunPlan, slots: asyncio.Semaphore) -> RunReport:
        async with slots:
            started = time.monotonic()
            report = await self._run_plan(plan)
            report.seconds = time.monotonic() - started
        self._done += 1
        self._progress(report)
        return report

    def _progress(self, r: RunReport) -> None:
        detail = ", ".join(r.failed_criteria) or r.reason or r.outcome or ""
        self.progress.write(
            f"[{self._done}/{self.total}] {r.id} #{r.repeat} {r.status} "
            f"{detail[: CRITERIA_SHOWN * 2]} ({r.seconds:.1f}s)\n"
        )
        self.progress.flush()

    async def _run_plan(self, plan: RunPlan) -> RunReport:
        case = plan.case
        if case.spec is None:
            report = plan.new_report("ERROR")
            report.reason = case.problem
            return report
        if self.replay and plan.cassette is None:
            report = plan.new_report("ERROR")
            report.reason = f"no {DEFAULT_CASSETTE} to replay"
            return report
        if case.needs_mysql and self.admin is None:
            report = plan.new_report("SKIPPED")
            report.reason = "needs MySQL: pass --mysql-admin-dsn"
            return report
        try:
            return await self._with_database(plan, case.spec)
        except (EvalDatabaseError, InputRejected, ConfigError) as exc:
            report = plan.new_report("ERROR")
            report.reason = str(exc)
            return report

    async def _with_database(self, plan: RunPlan, spec: CaseSpec) -> RunReport:
        if not plan.case.needs_mysql or self.admin is None:
            return await self._with_model(plan, spec, "")
        async with ThrowawayDatabase(self.admin, spec.id, plan.case.folder / MYSQL_FILE) as dsn:
            return await self._with_model(plan, spec, dsn)

    async def _with_model(self, plan: RunPlan, spec: CaseSpec, dsn: str) -> RunReport:
        if plan.cassette is None:
            result = await self._diagnose(plan.case, spec, dsn, None)
            report = plan.new_report("PASS")
            report.record(result, score(spec.expect, result))
            return report
        async with ScriptedModelServer(load_cassette(plan.cassette), model=_REPLAY_MODEL) as srv:
            result = await self._diagnose(plan.case, spec, dsn, srv.base_url)
        failed = score(spec.expect, result)
        if srv.request_count < len(srv.steps):
            failed.append(f"cassette:{len(srv.steps) - srv.request_count}_steps_unused")
        report = plan.new_report("PASS")
        report.record(result, failed)
        return report

    async def _diagnose(
        self, case: Case, spec: CaseSpec, dsn: str, model_url: str | None
    ) -> ExecutionResult:
        from sre_diag.wiring import build_harness

        with tempfile.TemporaryDirectory(prefix="diag-eval-") as work:
            settings = self.case_settings(case, Path(work), dsn, model_url)
            harness = build_harness(settings)
            request = DiagnosisRequest(spec.query, spec.previous_turn, asked_at=spec.asked_at)
            try:
                return await harness.diagnose(request, session_id=f"eval-{spec.id}")
            finally:
                await harness.aclose()


# --- the whole evaluation ---------------------------------------------------------------------


def plan_runs(cases: Sequence[Case], *, replay: bool, repeat: int) -> list[RunPlan]:
    plans: list[RunPlan] = []
    for case in cases:
        variants: list[tuple[str | None, Path | None]] = [(None, None)]
        if replay and case.spec is not None:
            variants = list(case.cassettes())
        for n in range(1, repeat + 1):
            if not variants:
                plans.append(RunPlan(case, None, None, n))
            plans.extend(RunPlan(case, v, path, n) for v, path in variants)
    return plans


async def run_eval(
    paths: Sequence[str],
    *,
    settings: Settings,
    replay: bool = False,
    repeat: int = 1,
    out: Path | None = None,
    admin_dsn: str | None = None,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
) -> int:
    """Run, print the table, write the report; the exit status (raises ``EvalUsageError``)."""
    if repeat < 1:
        raise EvalUsageError("--repeat must be at least 1")
    admin = AdminDsn.parse(admin_dsn) if admin_dsn else None
    cases = discover_cases(paths)
    plans = plan_runs(cases, replay=replay, repeat=repeat)
    evaluation = Evaluation(settings, replay, admin, progress=stderr, total=len(plans))
    slots = asyncio.Semaphore(settings.max_concurrent_runs)
    reports = list(await asyncio.gather(*(evaluation.run(p, slots) for p in plans)))
    summary = totals(reports)
    stdout.write(render_table(reports, summary) + "\n")
    stdout.flush()
    if out is not None:
        document = {
            "model": _REPLAY_MODEL if replay else settings.model,
            "replay": replay,
            "repeat": repeat,
            "runs": [r.to_json() for r in reports],
            "totals": summary,
        }
        write_report(out, document)
    return EXIT_COULD_NOT_RUN if summary["errors"] else EXIT_OK
