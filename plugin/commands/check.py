"""``python -m sre_diag check [--model] [--json]``: reach every configured part, say what works.

One :class:`CheckResult` per part — runbook folder, log source, MySQL (reachable, server kind,
allowed tables, read-only verdict), Redis, audit sink, Slack — and, with ``--model``, the model
endpoint. A part whose setting is unset is ``NOT_CONFIGURED``; a configured part that does not
work is ``FAILED`` with a reason an operator can act on. Reasons are built from error codes
and kinds: no credential, no raw backend response and no traceback ever reaches them. The log
source and MySQL are asked through their adapters' own ``probe()`` (STYLE.md 9:
:mod:`sre_diag.tools.logs.probe`, :mod:`sre_diag.tools.mysql.probe`); the rest is probed here.

Every probe is bounded (``PROBE_TIMEOUT_SECONDS``) and leaves nothing behind that looks like a
run: the JSON-lines audit probe opens today's file exactly as the writer does and appends zero
bytes; the MySQL audit probe asks the server to ``EXPLAIN`` the insert (privileges checked,
nothing written).

With ``--model``, :func:`check_model` probes the model endpoint's capabilities (CONTRACTS §3,
``sre_diag.commands.model_probe``: three small requests, each waiting up to
``DIAG_MODEL_TIMEOUT_SECONDS``
but at most ``MAX_PROBE_SECONDS``), prints one line per capability with how long its request
took and the settings it recommends; ``--json`` adds a top-level ``model`` object with the same.
While a probe waits, progress lines go to the ``progress`` callback (the command line: stderr).

Every module a probe needs (LlamaIndex for the runbooks and for the model probe's schemas, the
MySQL, Redis and Slack clients) is imported ONCE, in one thread, before any probe starts: two
probes importing LlamaIndex at once (one in a thread, one on the loop) saw it half-initialised,
and an import holding the loop starved the network probes into a false "no answer within 5 s".
So each probe's bound runs from its own start, not from the start of ``check``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sre_diag.log import failure_reason
from sre_diag.settings import Settings
from sre_diag.tools.base import ProbeReport
from sre_diag.tools.probing import CONNECT_SECONDS, LISTED, hostport, listed, os_reason

__all__ = [
    "CheckResult", "CheckStatus", "check_model", "render_json", "render_text", "run_checks",
    "warnings",
]  # fmt: skip

PROBE_TIMEOUT_SECONDS = 10.0


class CheckStatus(StrEnum):
    """What ``check`` found for one part."""

    OK = "OK"
    """Configured and working."""
    FAILED = "FAILED"
    """Configured and not working (exit 1); the line says why."""
    NOT_CONFIGURED = "NOT_CONFIGURED"
    """Not set: the part answers ``NOT_CONFIGURED`` (or, for the model, commands refuse)."""
    NOT_PROBED = "NOT_PROBED"
    """Configured but not contacted: the model endpoint without ``--model``."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One configured part: its status, a one-line reason, and facts for scripts."""

    name: str
    status: CheckStatus
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


def _ok(name: str, detail: str, **facts: Any) -> CheckResult:
    return CheckResult(name, CheckStatus.OK, detail, facts)


def _failed(name: str, detail: str, **facts: Any) -> CheckResult:
    return CheckResult(name, CheckStatus.FAILED, detail, facts)


def _unset(name: str, detail: str) -> CheckResult:
    return CheckResult(name, CheckStatus.NOT_CONFIGURED, detail)


# --- runbooks ----------------------------------------------------------------------------------


def _count_sections(folder: Path) -> tuple[int, int]:
    from sre_diag.tools.runbooks import iter_sections

    sections = list(iter_sections(folder))
    return len({s.path for s in sections}), len(sections)


async def check_runbooks(settings: Settings) -> CheckResult:
    folder: Path | None = settings.knowledge_dir
    if folder is None:
        return _unset(
            "runbooks", "DIAG_KNOWLEDGE_DIR unset: lookup_knowledge answers NOT_CONFIGURED"
        )
    return await asyncio.to_thread(_runbooks_in, folder)


def _runbooks_in(folder: Path) -> CheckResult:
    name = "runbooks"
    if not folder.exists():
        return _failed(name, f"{folder}: the folder does not exist", folder=str(folder))
    if not folder.is_dir():
        return _failed(name, f"{folder}: not a folder", folder=str(folder))
    try:
        files, sections = _count_sections(folder)
    except OSError as exc:
        return _failed(name, f"{folder}: unreadable: {os_reason(exc)}", folder=str(folder))
    if not sections:
        return _failed(
            name, f"{folder}: no runbook sections found (no readable *.md files)",
            folder=str(folder), files=files, sections=0,
        )  # fmt: skip
    return _ok(
        name, f"{folder}: {sections} sections in {files} runbooks",
        folder=str(folder), files=files, sections=sections,
    )  # fmt: skip


# --- logs and MySQL: the adapters probe themselves (STYLE.md 9) -----------------------------------


def _from_probe(name: str, report: ProbeReport) -> CheckResult:
    return CheckResult(name, CheckStatus(report.status.value), report.detail, report.facts)


async def check_logs(settings: Settings) -> CheckResult:
    from sre_diag.tools.logs import LogsAdapter, build_log_source

    adapter = LogsAdapter(
        build_log_source(
            settings.logs_source,
            loki_service_label=settings.loki_service_label,
            loki_line_format=settings.loki_line_format,
            loki_org_id=settings.loki_org_id,
        )
    )
    try:
        return _from_probe("logs", await adapter.probe())
    finally:
        await adapter.aclose()


async def check_mysql(settings: Settings) -> CheckResult:
    from sre_diag.tools.mysql import MysqlAdapter

    dsn = settings.mysql_dsn.get_secret_value() if settings.mysql_dsn is not None else None
    adapter = MysqlAdapter(
        dsn, settings.mysql_allowed_tables, connect_timeout_seconds=CONNECT_SECONDS,
        require_read_only=settings.mysql_require_read_only,
        require_column_grants=settings.mysql_require_column_grants,
        secret_columns=settings.mysql_secret_columns,
    )  # fmt: skip
    try:
        return _from_probe("mysql", await adapter.probe())
    finally:
        await adapter.aclose()


# --- Redis -------------------------------------------------------------------------------------


async def check_redis(settings: Settings) -> CheckResult:
    from redis import exceptions
    from redis.asyncio import Redis

    if settings.redis_url is None:
        return _unset("redis", "DIAG_REDIS_URL unset: in-process state (one replica)")
    url = settings.redis_url.get_secret_value()
    where = hostport(url) if "://" in url and not url.startswith("unix:") else "unix socket"
    client = Redis.from_url(url, socket_timeout=CONNECT_SECONDS, socket_connect_timeout=2.0)
    try:
        async with asyncio.timeout(CONNECT_SECONDS + 1):
            await client.ping()
    except (exceptions.AuthenticationError, exceptions.AuthorizationError):
        return _failed("redis", f"Redis at {where}: authentication refused")
    except (TimeoutError, exceptions.TimeoutError):
        return _failed("redis", f"Redis at {where}: no answer within {CONNECT_SECONDS:g} s")
    except exceptions.ConnectionError as exc:
        return _failed("redis", f"Redis at {where} unreachable ({failure_reason(exc)})")
    except exceptions.RedisError as exc:
        return _failed("redis", f"Redis at {where} refused PING ({failure_reason(exc)})")
    finally:
        await client.aclose()
    return _ok("redis", f"Redis at {where}: PING answered", redis=where)


# --- audit sink --------------------------------------------------------------------------------


async def check_audit(settings: Settings) -> CheckResult:
    spec = settings.audit_sink
    kind, _, target = spec.partition(":")
    if kind == "jsonl":
        return await asyncio.to_thread(_jsonl_audit, target)
    return await _check_mysql_audit(spec)


def _jsonl_audit(directory: str) -> CheckResult:
    from sre_diag.audit import AuditWriteError, JsonlAuditSink
    from sre_diag.audit.jsonl import append_line

    path = JsonlAuditSink(Path(directory)).path_for(datetime.now(UTC))
    try:
        # The writer's own open (no links followed, regular files only) and a zero-byte append:
        # a real test of what the next record needs, and no record written.
        append_line(path, b"")
    except AuditWriteError as exc:
        return _failed("audit", f"jsonl: {exc.reason}", path=str(path))
    return _ok("audit", f"jsonl: {path} writable", path=str(path))


async def _check_mysql_audit(spec: str) -> CheckResult:
    from sre_diag.tools.mysql import parse_dsn
    from sre_diag.tools.mysql.probe import connect, failure_reason

    dsn = parse_dsn(spec)
    where = f"{dsn.user}@{dsn.host}:{dsn.port}/{dsn.database}"
    try:
        conn = await connect(dsn)
    except Exception as exc:
        return _failed("audit", f"mysql {where}: {failure_reason(exc)}", server=where)
    try:
        detail = await _probe_audit_table(conn)
    except Exception as exc:
        return _failed("audit", f"mysql {where}: {failure_reason(exc)}", server=where)
    finally:
        conn.close()
    return _ok("audit", f"mysql {where}: {detail}", server=where)


async def _probe_audit_table(conn: Any) -> str:
    async with asyncio.timeout(CONNECT_SECONDS), conn.cursor() as cur:
        await cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'diag_audit'"
        )
        if not (await cur.fetchone())[0]:
            return "reachable; diag_audit is created on the first write"
        # Privileges are checked as for the insert itself; nothing is written.
        await cur.execute(
            "EXPLAIN INSERT INTO diag_audit"
            " (kind, run_id, session_id, outcome, recorded_at, record)"
            " VALUES ('check', 'check', 'check', 'CHECK', NOW(6), '{}')"
        )
        await cur.fetchall()
    return "diag_audit writable"


# --- Slack -------------------------------------------------------------------------------------


def _slack_reason(exc: Exception) -> str:
    from slack_sdk.errors import SlackApiError

    from sre_diag.slack.posting import slack_error_code

    if isinstance(exc, SlackApiError):
        code = slack_error_code(exc)
        return f"refused: {code}" if code else "refused"
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_SECONDS:g} s"
    return f"unreachable ({failure_reason(exc)})"


async def check_slack(settings: Settings) -> CheckResult:
    from slack_sdk.web.async_client import AsyncWebClient

    if settings.slack_bot_token is None:
        return _unset("slack", "SLACK_BOT_TOKEN unset: no Slack app")
    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url or "https://slack.com/api/",
        timeout=int(CONNECT_SECONDS),
    )
    try:
        async with asyncio.timeout(CONNECT_SECONDS * 2):
            auth = await client.auth_test()
    except Exception as exc:
        return _failed("slack", f"auth.test {_slack_reason(exc)}")
    facts: dict[str, Any] = {"team_id": auth.get("team_id"), "bot_user_id": auth.get("user_id")}
    head = f"auth.test ok (bot {auth.get('user_id')} in team {auth.get('team_id')})"
    app = await _app_token(settings)
    if app:
        head += f"; app token {app}"
    channels = settings.admin_channels
    if not channels:
        return _failed(
            "slack", f"{head}; DIAG_ADMIN_CHANNELS is empty: the bot acts nowhere", **facts
        )
    member, problems = await _memberships(client, channels)
    facts["member_of"] = member
    facts["not_member_of"] = [c for c, _ in problems]
    if problems:
        why = "; ".join(f"{c}: {reason}" for c, reason in problems[:LISTED])
        return _failed("slack", f"{head}; member of {listed(member) or 'none'}; {why}", **facts)
    return _ok("slack", f"{head}; member of every admin channel ({listed(member)})", **facts)


async def _memberships(
    client: Any, channels: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    member: list[str] = []
    problems: list[tuple[str, str]] = []
    for channel in channels:
        try:
            async with asyncio.timeout(CONNECT_SECONDS * 2):
                info = await client.conversations_info(channel=channel)
        except Exception as exc:
            problems.append((channel, f"conversations.info {_slack_reason(exc)}"))
            continue
        if (info.get("channel") or {}).get("is_member"):
            member.append(channel)
        else:
            problems.append((channel, "the bot is not a member (invite it to the channel)"))
    return member, problems


async def _app_token(settings: Settings) -> str:
    """``accepted`` / ``refused: …`` for SLACK_APP_TOKEN (Socket Mode); '' when unset."""
    from slack_sdk.web.async_client import AsyncWebClient

    if settings.slack_app_token is None:
        return ""
    client = AsyncWebClient(
        token=settings.slack_app_token.get_secret_value(),
        base_url=settings.slack_api_url or "https://slack.com/api/",
        timeout=int(CONNECT_SECONDS),
    )
    try:
        async with asyncio.timeout(CONNECT_SECONDS * 2):
            await client.apps_connections_open(
                app_token=settings.slack_app_token.get_secret_value()
            )
    except Exception as exc:
        return _slack_reason(exc)
    return "accepted"


# --- model: capability probes (CONTRACTS §3; sre_diag.commands.model_probe) ---------------


_OPENAI_DEFAULT = "https://api.openai.com/v1"  # the openai SDK's default base URL


def _model_timeout(settings: Settings) -> float:
    """One probe request's bound: ``DIAG_MODEL_TIMEOUT_SECONDS``, at most ``MAX_PROBE_SECONDS``."""
    from sre_diag.commands.model_probe import probe_seconds

    return probe_seconds(settings.model_request_timeout_seconds)


def model_line(settings: Settings) -> CheckResult:
    """The model line ``check`` always prints, without contacting the endpoint."""
    if not settings.model_configured:
        return CheckResult(
            "model",
            CheckStatus.NOT_CONFIGURED,
            "set OPENAI_BASE_URL and/or OPENAI_API_KEY (and DIAG_MODEL); diagnose, replay, eval,"
            " serve and worker refuse without one ('sre-diag demo' needs none)",
        )
    where = hostport(settings.openai_base_url or _OPENAI_DEFAULT)
    return CheckResult(
        "model",
        CheckStatus.NOT_PROBED,
        f"endpoint {where}, model {settings.model}: run `check --model` to probe it",
    )


async def check_model(
    settings: Settings, progress: Callable[[str], None] | None = None
) -> CheckResult:
    """Probe the model endpoint's capabilities (``sre_diag.commands.model_probe``) and recommend
    settings.

    FAILED (exit 1) when the endpoint cannot be used: unreachable, key refused, no tool call
    with JSON arguments, ``parallel_tool_calls: false`` refused (every diagnosis request carries
    it), or ``DIAG_STRUCTURED_OUTPUT=json_schema`` set where the endpoint cannot do it. A missing
    ``json_schema`` (while ``off``) or missing ``usage`` is reported with its consequence, not
    failed.
    """
    from sre_diag.commands.model_probe import probe_model

    base = settings.openai_base_url or _OPENAI_DEFAULT
    where = hostport(base)
    report = await probe_model(
        base_url=base,
        api_key=settings.openai_api_key.get_secret_value() if settings.openai_api_key else None,
        model=settings.model,
        request_seconds=_model_timeout(settings),
        endpoint=where,
        structured_output=settings.structured_output,
        progress=progress,
    )
    facts = report.to_json()
    head = f"endpoint {where}, model {settings.model}"
    if report.stopped:
        return _failed("model", report.stopped, **facts)
    if report.failure:
        return _failed("model", f"{head}: {report.failure}", **facts)
    supported = sum(f.supported for f in report.capabilities.values())
    return _ok(
        "model", f"{head}: usable ({supported}/{len(report.capabilities)} capabilities)", **facts
    )


# --- running and rendering ---------------------------------------------------------------------

Probe = Callable[[Settings], Awaitable[CheckResult]]
PROBES: tuple[tuple[str, Probe], ...] = (
    ("runbooks", check_runbooks),
    ("logs", check_logs),
    ("mysql", check_mysql),
    ("redis", check_redis),
    ("audit", check_audit),
    ("slack", check_slack),
)


# Imported before probing (see the module docstring); the model probe's only with ``--model``,
# the runbook index's (LlamaIndex, bm25s, jieba) only when there is a runbook folder to read.
_PROBE_MODULES = (
    "sre_diag.tools.logs", "sre_diag.tools.mysql", "aiomysql",
    "redis.asyncio", "slack_sdk.web.async_client", "sre_diag.audit", "sre_diag.audit.jsonl",
    "sre_diag.slack.posting",
)  # fmt: skip
_RUNBOOK_PROBE_MODULES = ("sre_diag.tools.knowledge",)
_MODEL_PROBE_MODULES = (
    "sre_diag.commands.model_probe",
    "sre_diag.harness.agent",
    "sre_diag.harness.model",
)


def _import_probe_modules(settings: Settings, model: bool) -> None:
    runbooks = _RUNBOOK_PROBE_MODULES if settings.knowledge_dir is not None else ()
    for name in _PROBE_MODULES + runbooks + (_MODEL_PROBE_MODULES if model else ()):
        importlib.import_module(name)


async def _bounded(
    name: str, probe: Probe, settings: Settings, limit: float = PROBE_TIMEOUT_SECONDS * 2
) -> CheckResult:
    try:
        async with asyncio.timeout(limit):
            return await probe(settings)
    except TimeoutError:
        return _failed(name, f"no answer within {limit:g} s")
    except Exception as exc:  # a reason without the exception's text (it may carry anything)
        return _failed(name, f"check failed unexpectedly ({failure_reason(exc)})")


async def run_checks(
    settings: Settings, *, model: bool = False, progress: Callable[[str], None] | None = None
) -> list[CheckResult]:
    """Every part, concurrently; the model endpoint only when asked (its three requests are
    each bounded, so the whole is bounded by three times that and a margin; ``progress`` gets
    its lines while it waits). What the probes import is imported first, off the loop, so that
    no probe's clock runs while another imports."""
    await asyncio.to_thread(_import_probe_modules, settings, model)
    checks = [_bounded(n, p, settings) for n, p in PROBES]
    if not settings.model_configured or not model:
        return [*await asyncio.gather(*checks), model_line(settings)]
    limit = 3 * _model_timeout(settings) + CONNECT_SECONDS

    async def model_probe(s: Settings) -> CheckResult:
        return await check_model(s, progress)

    checks.append(_bounded("model", model_probe, settings, limit))
    return list(await asyncio.gather(*checks))


def exit_status(results: Sequence[CheckResult]) -> int:
    return 1 if any(r.status is CheckStatus.FAILED for r in results) else 0


_LABELS = {
    CheckStatus.OK: "ok",
    CheckStatus.FAILED: "FAILED",
    CheckStatus.NOT_CONFIGURED: "not configured",
    CheckStatus.NOT_PROBED: "not probed",
}


def _model_lines(facts: dict[str, Any]) -> list[str]:
    """Under the model line: one line per capability, then the recommended settings and the
    warnings."""
    from sre_diag.commands.model_probe import LABELS, Capability

    lines: list[str] = []
    for name, found in (facts.get("capabilities") or {}).items():
        mark = "yes" if found["supported"] else "MISSING"
        took = f" ({found['seconds']:.2f} s)" if found.get("seconds") is not None else ""
        lines.append(f"{'':<9} {mark:<15} {LABELS[Capability(name)]}: {found['reason']}{took}")
    for key, value in (facts.get("recommended") or {}).items():
        lines.append(f"{'':<9} {'recommended':<15} {key}={value}")
    lines += [f"{'':<9} {'warning':<15} {note}" for note in facts.get("warnings") or ()]
    return lines


def _mysql_lines(facts: dict[str, Any]) -> list[str]:
    """Under the mysql line: the statements that make every secret column unreadable."""
    return [f"{'':<9} {'fix':<15} {line}" for line in facts.get("secret_column_fixes") or ()]


def warnings(settings: Settings) -> list[str]:
    """What works but will not help: no evidence source set at all (each part then reads
    ``not configured``, which alone is not a failure)."""
    return [settings.no_evidence_source] if settings.no_evidence_source else []


def render_text(results: Sequence[CheckResult], notes: Sequence[str] = ()) -> str:
    lines: list[str] = []
    for r in results:
        lines.append(f"{r.name:<9} {_LABELS[r.status]:<15} {r.detail}")
        if r.name == "model":
            lines += _model_lines(r.facts)
        if r.name == "mysql":
            lines += _mysql_lines(r.facts)
    lines += [f"{'warning':<9} {'':<15} {note}" for note in notes]
    return "\n".join(lines)


def render_json(results: Sequence[CheckResult], notes: Sequence[str] = ()) -> str:
    payload: dict[str, Any] = {
        "ok": exit_status(results) == 0,
        "checks": [{**asdict(r), "status": r.status.value} for r in results],
        "warnings": list(notes),
    }
    model = next((r for r in results if r.name == "model"), None)
    if model is not None:
        payload["model"] = {"status": model.status.value, "detail": model.detail, **model.facts}
    return json.dumps(payload, ensure_ascii=False, default=str)
