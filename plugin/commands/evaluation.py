"""``eval``: run evaluation cases through the real harness and score them (CONTRACTS §1, §9).

A case is a folder with ``case.json`` and its own evidence (``runbooks/``, ``logs/``,
``mysql.sql``). Each case run gets isolated settings: the case's runbooks as
``DIAG_KNOWLEDGE_DIR``, its logs as ``DIAG_LOGS_SOURCE``, a throwaway database loaded from
``mysql.sql`` with a SELECT-only account (created through ``--mysql-admin-dsn`` and dropped after
the run; without it a MySQL case is ``SKIPPED``), its own audit folder and runbook cache in a
temporary folder, the case's ``asked_at`` and ``previous_turn``. Everything else (model endpoint,
budgets, prompt language) comes from the configured settings.

The model is the configured one, or with ``--replay`` the case's recorded cassettes served by the
scripted model server (:mod:`plugin.doubles.scripted_model`). Cassette naming: ``cassette.json``
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
import json
import math
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO
from urllib.parse import quote, unquote, urlsplit

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from plugin.contract.request import DiagnosisRequest, PreviousTurn
from plugin.contract.result import ExecutionResult, Outcome
from plugin.doubles.scripted_model import ScriptedModelServer, load_cassette
from plugin.errors import ConfigError, InputRejected
from plugin.settings import Settings, describe_invalid_settings

__all__ = [
    "CaseSpec",
    "EvalUsageError",
    "Expect",
    "RunReport",
    "discover_cases",
    "run_eval",
    "score",
]

CASE_FILE = "case.json"
DEFAULT_CASSETTE = "cassette.json"
EXIT_OK, EXIT_COULD_NOT_RUN, EXIT_BAD_ARGUMENTS = 0, 1, 2
_MYSQL_FILE = "mysql.sql"
_REPLAY_MODEL = "recorded-cassette"
_ADMIN_CONNECT_SECONDS = 5
_CRITERIA_SHOWN = 60


class EvalUsageError(Exception):
    """Bad arguments: a path that does not exist, no case found, a malformed admin DSN."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Phrase = Annotated[str, Field(min_length=1, max_length=200)]
ToolLiteral = Literal["lookup_knowledge", "query_logs", "query_mysql"]


class Expect(_Strict):
    """What a case scores; an absent key is not scored."""

    outcome: Literal["DRAFT", "STOPPED", "ANY"] | None = None
    conclusion: Literal["REQUIRED", "NULL", "ANY"] | None = None
    root_cause_any: tuple[Phrase, ...] | None = None
    root_cause_all: tuple[Phrase, ...] | None = None
    must_not_mention: tuple[Phrase, ...] | None = None
    must_cite_tools: tuple[ToolLiteral, ...] | None = None
    max_tool_calls: Annotated[int, Field(ge=0)] | None = None


class CaseSpec(_Strict):
    """``case.json`` (CONTRACTS §9); ``note`` is free text for humans, never scored."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    query: Annotated[str, Field(min_length=1)]
    asked_at: AwareDatetime | None = None
    previous_turn: PreviousTurn | None = None
    expect: Expect = Expect()
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Case:
    folder: Path
    spec: CaseSpec | None
    problem: str | None = None
    """Why the case cannot run (its ``case.json`` is unreadable or invalid)."""

    @property
    def case_id(self) -> str:
        return self.spec.id if self.spec is not None else self.folder.name

    @property
    def needs_mysql(self) -> bool:
        return (self.folder / _MYSQL_FILE).is_file()

    def optional_dir(self, name: str) -> str:
        """The folder as a setting value, or ``""`` (unset: that tool is NOT_CONFIGURED)."""
        path = self.folder / name
        return str(path.resolve()) if path.is_dir() else ""

    def cassettes(self) -> list[tuple[str | None, Path]]:
        """``cassette.json`` (variant None) first, then ``cassette.<variant>.json`` by name."""
        found: list[tuple[str | None, Path]] = []
        if (self.folder / DEFAULT_CASSETTE).is_file():
            found.append((None, self.folder / DEFAULT_CASSETTE))
        for path in sorted(self.folder.glob("cassette.*.json")):
            found.append((path.name[len("cassette.") : -len(".json")], path))
        return found


def _load_case(folder: Path) -> Case:
    try:
        text = (folder / CASE_FILE).read_text(encoding="utf-8")
        return Case(folder, CaseSpec.model_validate_json(text))
    except (OSError, UnicodeDecodeError) as exc:
        return Case(folder, None, f"case.json unreadable ({type(exc).__name__})")
    except ValidationError as exc:
        where = ", ".join(
            ".".join(str(part) for part in error["loc"]) or "case.json" for error in exc.errors()
        )
        return Case(folder, None, f"case.json invalid at: {where}"[:300])


def _case_folders(root: Path) -> list[Path]:
    if (root / CASE_FILE).is_file():
        return [root]
    found: list[Path] = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith((".", "__")):
            found.extend(_case_folders(child))
    return found


def discover_cases(paths: Sequence[str]) -> list[Case]:
    """Each PATH is a case folder or a folder of case folders (searched recursively)."""
    folders: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise EvalUsageError(f"not a folder: {raw}")
        found = _case_folders(path)
        if not found:
            raise EvalUsageError(f"no {CASE_FILE} under {raw}")
        folders.extend(f for f in found if f not in folders)
    return [_load_case(folder) for folder in folders]


# --- scoring ----------------------------------------------------------------------------------


def _cited_tools(result: ExecutionResult) -> set[str]:
    """Tools with a READY check cited by the conclusion or by a FINDING."""
    draft = result.draft
    if draft is None:
        return set()
    cited: set[str] = set()
    if draft.conclusion is not None:
        cited.update(draft.conclusion.evidence_tool_call_ids)
    for item in draft.analysis:
        if item.kind == "FINDING" and item.evidence.status == "CITED":
            cited.update(item.evidence.tool_call_ids)
    checks = result.progress.checks if result.progress is not None else ()
    return {c.tool for c in checks if c.status == "READY" and c.tool_call_id in cited}


def _summary(result: ExecutionResult) -> str | None:
    draft = result.draft
    if draft is None or draft.conclusion is None:
        return None
    return draft.conclusion.summary.casefold()


def _shape_criteria(expect: Expect, result: ExecutionResult) -> list[str]:
    failed: list[str] = []
    if result.outcome is Outcome.FAILED:
        detail = result.failure.detail if result.failure is not None else "?"
        failed.append(f"failure:{detail}")
    if expect.outcome not in (None, "ANY") and result.outcome.value != expect.outcome:
        failed.append(f"outcome:{expect.outcome}")
    has_conclusion = _summary(result) is not None
    if expect.conclusion == "REQUIRED" and not has_conclusion:
        failed.append("conclusion:REQUIRED")
    if expect.conclusion == "NULL" and (has_conclusion or result.draft is None):
        failed.append("conclusion:NULL")
    if expect.max_tool_calls is not None and result.usage.tool_calls > expect.max_tool_calls:
        failed.append(f"max_tool_calls:{expect.max_tool_calls}")
    return failed


def _text_criteria(expect: Expect, summary: str | None) -> list[str]:
    text = summary or ""
    failed: list[str] = []
    if expect.root_cause_any and not any(p.casefold() in text for p in expect.root_cause_any):
        failed.append("root_cause_any")
    for phrase in expect.root_cause_all or ():
        if summary is None or phrase.casefold() not in text:
            failed.append(f"root_cause_all:{phrase}")
    failed.extend(
        f"must_not_mention:{p}" for p in expect.must_not_mention or () if p.casefold() in text
    )
    return failed


def score(expect: Expect, result: ExecutionResult) -> list[str]:
    """The failed criteria of one run (empty: passed)."""
    failed = _shape_criteria(expect, result) + _text_criteria(expect, _summary(result))
    cited = _cited_tools(result)
    failed.extend(f"must_cite_tools:{t}" for t in expect.must_cite_tools or () if t not in cited)
    return failed


# --- one run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class RunReport:
    """One case run as the table and the JSON report show it."""

    id: str
    case: str
    cassette: str | None
    repeat: int
    status: Literal["PASS", "FAIL", "SKIPPED", "ERROR"]
    failed_criteria: list[str] = field(default_factory=list)
    outcome: str | None = None
    stop_reason: str | None = None
    failure: dict[str, str] | None = None
    usage: dict[str, int] | None = None
    rejections: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool | None:
        return {"PASS": True, "FAIL": False}.get(self.status)

    @property
    def tokens(self) -> int:
        u = self.usage or {}
        return u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "case": self.case,
            "cassette": self.cassette,
            "repeat": self.repeat,
            "status": self.status,
            "passed": self.passed,
            "failed_criteria": self.failed_criteria,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason,
            "failure": self.failure,
            "usage": self.usage,
            "rejections": self.rejections,
            "tool_errors": self.tool_errors,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }

    def record(self, result: ExecutionResult, failed: list[str]) -> None:
        self.status = "FAIL" if failed else "PASS"
        self.failed_criteria = failed
        self.outcome = result.outcome.value
        self.stop_reason = result.stop_reason.value if result.stop_reason else None
        self.failure = result.failure.model_dump(mode="json") if result.failure else None
        self.usage = result.usage.model_dump(mode="json")
        checks = result.progress.checks if result.progress is not None else ()
        rejected = Counter(c.error_code or "?" for c in checks if c.status == "REJECTED")
        errors = Counter(c.error_code or "?" for c in checks if c.status == "ERROR")
        self.rejections, self.tool_errors = dict(rejected), dict(errors)


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


class _DatabaseError(Exception):
    """The throwaway database could not be prepared (a stable, credential-free reason)."""


@dataclass(frozen=True, slots=True)
class AdminDsn:
    """``--mysql-admin-dsn``: an account that may create databases and users."""

    host: str
    port: int
    user: str
    password: str

    @classmethod
    def parse(cls, dsn: str) -> AdminDsn:
        try:
            parts = urlsplit(dsn.strip())
            port = parts.port or 3306
        except ValueError:
            raise EvalUsageError("--mysql-admin-dsn: the port must be a number") from None
        if parts.scheme.lower() not in {"mysql", "mariadb"} or not parts.hostname:
            raise EvalUsageError("--mysql-admin-dsn must look like mysql://user[:pw]@host[:port]")
        user = unquote(parts.username or "root")
        return cls(parts.hostname, port, user, unquote(parts.password or ""))


def sql_statements(text: str) -> list[str]:
    """``mysql.sql`` split at semicolons that end a line; ``--`` comment lines dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    parts = re.split(r";\s*$", "\n".join(lines), flags=re.M)
    return [part.strip() for part in parts if part.strip()]


class ThrowawayDatabase:
    """A database ``diag_eval_<case>_<random>`` loaded from ``mysql.sql`` and a SELECT-only
    account on it; both dropped on exit, whatever happened."""

    def __init__(self, admin: AdminDsn, case_id: str, sql_file: Path) -> None:
        slug = re.sub(r"[^a-z0-9]+", "_", case_id.lower()).strip("_")[:30] or "case"
        token = secrets.token_hex(4)
        self.admin = admin
        self.database = f"diag_eval_{slug}_{token}"
        self.user = f"diag_eval_{token}"
        self.password = secrets.token_urlsafe(18)
        self.sql_file = sql_file

    @property
    def dsn(self) -> str:
        host = "127.0.0.1" if self.admin.host == "localhost" else self.admin.host
        return (
            f"mysql://{quote(self.user, safe='')}:{quote(self.password, safe='')}"
            f"@{host}:{self.admin.port}/{self.database}"
        )

    def _connect(self) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.admin.host,
            port=self.admin.port,
            user=self.admin.user,
            password=self.admin.password,
            connect_timeout=_ADMIN_CONNECT_SECONDS,
            autocommit=True,
            charset="utf8mb4",
        )

    def _create(self) -> None:
        statements = sql_statements(self.sql_file.read_text(encoding="utf-8"))
        account = f"'{self.user}'@'%'"
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE `{self.database}` "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
            cur.execute(f"USE `{self.database}`")
            for statement in statements:
                cur.execute(statement)
            secret = conn.escape(self.password)
            cur.execute(f"CREATE USER {account} IDENTIFIED BY {secret}")
            cur.execute(f"GRANT SELECT ON `{self.database}`.* TO {account}")

    def _drop(self) -> None:
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            cur.execute(f"DROP USER IF EXISTS '{self.user}'@'%'")

    async def __aenter__(self) -> str:
        import pymysql

        try:
            await asyncio.to_thread(self._create)
        except (pymysql.MySQLError, OSError, UnicodeDecodeError) as exc:
            await self.__aexit__()
            code = exc.args[0] if isinstance(exc, pymysql.MySQLError) and exc.args else ""
            raise _DatabaseError(
                f"mysql.sql could not be loaded ({type(exc).__name__} {code})".strip()
            ) from None
        return self.dsn

    async def __aexit__(self, *exc_info: object) -> None:
        import pymysql

        try:
            await asyncio.to_thread(self._drop)
        except pymysql.MySQLError:
            sys.stderr.write(f"eval: could not drop {self.database} / {self.user}\n")


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
            f"{detail[: _CRITERIA_SHOWN * 2]} ({r.seconds:.1f}s)\n"
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
        except (_DatabaseError, InputRejected, ConfigError) as exc:
            report = plan.new_report("ERROR")
            report.reason = str(exc)
            return report

    async def _with_database(self, plan: RunPlan, spec: CaseSpec) -> RunReport:
        if not plan.case.needs_mysql or self.admin is None:
            return await self._with_model(plan, spec, "")
        async with ThrowawayDatabase(self.admin, spec.id, plan.case.folder / _MYSQL_FILE) as dsn:
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
        from plugin.wiring import build_harness

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


def _percentile(values: Sequence[int], fraction: float) -> int | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def totals(reports: Sequence[RunReport]) -> dict[str, Any]:
    ran = [r for r in reports if r.status in ("PASS", "FAIL")]
    passed = sum(1 for r in ran if r.status == "PASS")
    elapsed = [r.usage["elapsed_ms"] for r in ran if r.usage is not None]
    return {
        "cases": len({r.case for r in reports}),
        "runs": len(ran),
        "passed": passed,
        "failed": len(ran) - passed,
        "skipped": sum(1 for r in reports if r.status == "SKIPPED"),
        "errors": sum(1 for r in reports if r.status == "ERROR"),
        "pass_rate": round(passed / len(ran), 4) if ran else None,
        "elapsed_ms_p50": _percentile(elapsed, 0.50),
        "elapsed_ms_p95": _percentile(elapsed, 0.95),
        "tokens": sum(r.tokens for r in ran),
    }


def render_table(reports: Sequence[RunReport], summary: dict[str, Any]) -> str:
    rows = [("case", "result", "failed criteria", "outcome", "calls", "tokens", "seconds")]
    for r in reports:
        name = r.id if r.repeat == 1 else f"{r.id} #{r.repeat}"
        outcome = r.stop_reason or r.outcome or "-"
        if r.outcome == "FAILED" and r.failure:
            outcome = f"FAILED {r.failure['code']}"
        rows.append(
            (
                name,
                r.status,
                (", ".join(r.failed_criteria) or r.reason or "-")[:_CRITERIA_SHOWN],
                outcome if r.outcome != "STOPPED" else f"STOPPED {r.stop_reason}",
                str((r.usage or {}).get("model_calls", "-")),
                str(r.tokens) if r.usage else "-",
                f"{r.seconds:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    rate = summary["pass_rate"]
    lines.append("")
    lines.append(
        f"cases {summary['cases']}  runs {summary['runs']}  passed {summary['passed']}  "
        f"pass_rate {'-' if rate is None else f'{rate:.1%}'}  "
        f"skipped {summary['skipped']}  errors {summary['errors']}  "
        f"elapsed_ms p50 {summary['elapsed_ms_p50']} p95 {summary['elapsed_ms_p95']}  "
        f"tokens {summary['tokens']}"
    )
    return "\n".join(line.rstrip() for line in lines)


def _write_report(out: Path, document: dict[str, Any]) -> None:
    out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", "utf-8")


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
        _write_report(out, document)
    return EXIT_COULD_NOT_RUN if summary["errors"] else EXIT_OK
