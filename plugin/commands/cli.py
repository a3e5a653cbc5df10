"""Command line: ``sre-diag`` (``python -m sre_diag``) and its commands.

stdout carries exactly one JSON object (the Execution Result, or an ``error`` object) — except
``patterns``, ``check`` and ``demo``, which print text; logs go to stderr. Exit codes: 0 a Draft
or a controlled stop, 2 input rejected before any model call, 1 failed closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from sre_diag.commands.exits import EXIT_FAILED, EXIT_OK, EXIT_REJECTED, exit_code, load_settings
from sre_diag.commands.setup_mysql import add_arguments as add_setup_arguments
from sre_diag.commands.startup import imports_without_gc
from sre_diag.contract.request import (
    DiagnosisRequest,
    PreviousTurn,
    parse_asked_at,
    parse_previous_turn,
)
from sre_diag.errors import ConfigError, InputRejected, InputRejection
from sre_diag.http_bounds import prepare_tls_context
from sre_diag.log import configure_logging, log_failure
from sre_diag.settings import Settings

__all__ = ["main"]

_log = logging.getLogger(__name__)

_USAGE_CHARS = 500
_DESCRIPTION = (
    "Evidence-bound incident diagnosis for SREs: one agent, three evidence tools (runbooks,"
    " logs, a read-only business database), hard budgets, and answers that cite what they"
    " checked. Run 'sre-diag demo' to see it work offline."
)
_EPILOG = (
    "Settings come from the environment (or a .env file): OPENAI_BASE_URL / OPENAI_API_KEY and"
    " DIAG_MODEL for the model, DIAG_KNOWLEDGE_DIR, DIAG_LOGS_SOURCE and DIAG_MYSQL_DSN for the"
    " evidence, SLACK_* for Slack. Exit codes: 0 a diagnosis or a controlled stop, 1 failed"
    " closed, 2 refused before any model call."
)
_MODEL_NOT_CONFIGURED = (
    "no model endpoint is configured: set OPENAI_BASE_URL (any OpenAI-compatible endpoint) and/or"
    " OPENAI_API_KEY, and DIAG_MODEL; 'sre-diag demo' shows a diagnosis without a model"
)


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _error(code: str, message: str) -> int:
    _emit({"error": {"code": code, "message": message}})
    return EXIT_REJECTED


def _without_model(settings: Settings) -> int | None:
    """``MODEL_NOT_CONFIGURED`` (exit 2) when no model endpoint is set, before any request."""
    if settings.model_configured:
        return None
    return _error(InputRejection.MODEL_NOT_CONFIGURED.value, _MODEL_NOT_CONFIGURED)


def _read_previous_turn(path: str | None) -> PreviousTurn | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputRejected(InputRejection.INVALID_PREVIOUS_TURN) from exc
    return parse_previous_turn(text)


async def _diagnose(args: argparse.Namespace) -> int:
    prepare_tls_context()  # built while the modules below load; the model client takes it
    with imports_without_gc():
        from sre_diag.wiring import build_harness, import_framework
    try:
        settings = load_settings()
        if (refused := _without_model(settings)) is not None:
            return refused
        request = DiagnosisRequest(
            args.query, _read_previous_turn(args.previous_turn), asked_at=args.asked_at
        )
        with imports_without_gc():  # what the run would import on its way (not for a refusal)
            import_framework()
        harness = build_harness(settings)
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
    except InputRejected as exc:
        return _error(exc.code.value, "input rejected before any model call")
    if settings.no_evidence_source:
        _log.warning("%s", settings.no_evidence_source)
    try:
        result = await harness.diagnose(request, session_id=args.session_id)
    except InputRejected as exc:
        return _error(exc.code.value, str(exc))
    else:
        _emit(result.to_json_dict())  # the answer first: the audit write never delays it
        return exit_code(result)
    finally:
        # Drains the audit writer (at most DIAG_AUDIT_TIMEOUT_SECONDS) before the process exits.
        await harness.aclose()


async def _serve(args: argparse.Namespace) -> int:
    from sre_diag.service.ops import stop_on_signals

    stop = stop_on_signals()  # before the Slack app is imported: a signal at any moment
    from sre_diag.service.serve import serve

    try:
        settings = load_settings()
        if (refused := _without_model(settings)) is not None:
            return refused
        return await serve(
            settings, http=args.http, port=args.port, stop=stop, workers=args.workers
        )
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))


async def _worker(args: argparse.Namespace) -> int:
    from sre_diag.service.ops import restore_signals, stop_on_signals, stop_when_orphaned

    stop = stop_on_signals()
    orphaned = None
    if args.front_pid is not None:
        orphaned = asyncio.create_task(stop_when_orphaned(args.front_pid, stop))
    from sre_diag.service.worker import run_worker

    try:
        settings = load_settings()
        if (refused := _without_model(settings)) is not None:
            return refused
        return await run_worker(settings, stop)
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
    finally:
        if orphaned is not None:
            orphaned.cancel()
        restore_signals()


async def _replay(args: argparse.Namespace) -> int:
    from sre_diag.commands.replay import ReplayError, replay_envelope

    try:
        settings = load_settings()
        if args.cassette is None and (refused := _without_model(settings)) is not None:
            return refused
        output = await replay_envelope(Path(args.file), settings, cassette=args.cassette)
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
    except ReplayError as exc:
        return _error(exc.code, str(exc))
    for post in output.posts:
        sys.stdout.write(post + "\n\n")
    _emit(output.result.to_json_dict())
    return exit_code(output.result)


def _check_progress(line: str) -> None:
    """A model probe's progress, on stderr (stdout carries only the report)."""
    sys.stderr.write(f"{'model':<9} {line}\n")
    sys.stderr.flush()


async def _check(args: argparse.Namespace) -> int:
    from sre_diag.commands.check import exit_status, render_json, render_text, run_checks, warnings

    try:
        settings = load_settings()
    except ConfigError as exc:
        if args.json:
            return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
        sys.stdout.write(f"{'settings':<9} {'FAILED':<15} {exc}\n")
        return EXIT_REJECTED
    results = await run_checks(settings, model=args.model, progress=_check_progress)
    notes = warnings(settings)
    rendered = render_json(results, notes) if args.json else render_text(results, notes)
    sys.stdout.write(rendered + "\n")
    return exit_status(results)


async def _patterns(args: argparse.Namespace) -> int:
    """Each input line's ``query_logs`` pattern, one line out per line in, in order; with
    ``--counts``, one line per pattern: ``count<TAB>pattern<TAB>example``, most frequent first."""
    return _print_patterns(args.file, counts=args.counts)


def _print_patterns(file: str | None, *, counts: bool = False) -> int:
    # Plain blocking reads: this command runs nothing else on its loop. The input is one
    # window, as the summary sees a query's matches: read as a stream, in bounded memory.
    from sre_diag.commands.patterns_input import PatternsInputError

    if sys.stdout is None:  # started with standard output closed: nowhere to print
        print("patterns: no standard output", file=sys.stderr)
        return EXIT_FAILED
    if file is None and sys.stdin is None:  # started with standard input closed
        return _error("INVALID_ARGUMENTS", "no FILE and no standard input to read")
    source: str | int = file if file is not None else sys.stdin.fileno()
    try:
        _write_patterns(source, counts)
    except PatternsInputError as exc:
        return _error(exc.code.value, exc.message)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:  # a full disk, a closed descriptor: stdout cannot carry the error
        print(f"patterns: output not written ({exc.__class__.__name__})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _write_patterns(source: str | int, counts: bool) -> None:
    """The output of ``patterns`` (a pattern is the message's own text: a terminal control, a
    bidi override or a line separator in it is shown escaped, never acted on, never a second
    line; in ``--counts`` a tab is shown escaped too, the column separator)."""
    from sre_diag.commands.patterns_input import pattern_counts, pattern_lines
    from sre_diag.tools.plain import visible_controls

    if not counts:
        sys.stdout.writelines(visible_controls(p) + "\n" for p in pattern_lines(source))
        sys.stdout.flush()
        return
    window = pattern_counts(source)
    for count, pattern, example in window.counted():
        cells = (visible_controls(pattern), example)
        sys.stdout.write("\t".join([str(count), *(c.replace("\t", "\\x09") for c in cells)]))
        sys.stdout.write("\n")
    sys.stdout.flush()
    if window.uncounted:
        print(
            f"patterns: {window.uncounted} lines of further patterns not counted", file=sys.stderr
        )


async def _setup_mysql(args: argparse.Namespace) -> int:
    from sre_diag.commands.setup_mysql import execute, prepared_arguments, state_dir_of

    try:
        settings = load_settings()
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
    prepared = prepared_arguments(
        args, settings.mysql_allowed_tables, settings.mysql_secret_columns,
        state_dir_of(settings),
    )  # fmt: skip
    return await asyncio.to_thread(execute, prepared)


async def _demo(args: argparse.Namespace) -> int:
    from sre_diag.commands.demo import run_demo

    return await run_demo(show_json=not args.text_only)


async def _eval(args: argparse.Namespace) -> int:
    from sre_diag.commands.eval import EvalUsageError, run_eval

    try:
        settings = load_settings()
        if not args.replay and (refused := _without_model(settings)) is not None:
            return refused
        return await run_eval(
            args.paths,
            settings=settings,
            replay=args.replay,
            repeat=args.repeat,
            out=args.out,
            admin_dsn=args.mysql_admin_dsn,
        )
    except ConfigError as exc:
        return _error(InputRejection.INVALID_SETTINGS.value, str(exc))
    except EvalUsageError as exc:
        return _error(InputRejection.INVALID_ARGUMENTS.value, str(exc))


class _Parser(argparse.ArgumentParser):
    """Usage errors end like every other refusal: one JSON ``error`` object on stdout, exit 2
    (the usage text goes to stderr)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        _error(InputRejection.INVALID_ARGUMENTS.value, f"{self.prog}: {message}"[:_USAGE_CHARS])
        sys.exit(EXIT_REJECTED)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sre-diag",
        description=_DESCRIPTION,
        epilog=_EPILOG,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}",
        help="print the version and exit",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _add_diagnose(commands)
    _add_serve(commands)
    worker = commands.add_parser("worker", help="run the diagnoses queued on Redis")
    # Set by ``serve --workers N`` for its local workers only: they stop when the front dies.
    worker.add_argument("--front-pid", type=int, default=None, help=argparse.SUPPRESS)
    worker.set_defaults(run=_worker)
    replay = commands.add_parser("replay", help="replay a recorded Slack event envelope")
    replay.add_argument("file", metavar="FILE", help="the event envelope (JSON, as Slack sends it)")
    replay.add_argument(
        "--cassette", type=Path, metavar="FILE",
        help="take the model's turns from this recorded file (offline, no model needed)",
    )  # fmt: skip
    replay.set_defaults(run=_replay)
    demo = commands.add_parser("demo", help="diagnose the bundled incident offline (no model)")
    demo.add_argument("--text-only", action="store_true", help="omit the result JSON")
    demo.set_defaults(run=_demo)
    check = commands.add_parser("check", help="check the settings and reach every backend")
    check.add_argument("--model", action="store_true", help="also probe the model endpoint")
    check.add_argument("--json", action="store_true", help="one JSON object for scripts")
    check.set_defaults(run=_check)
    patterns = commands.add_parser(
        "patterns", help="print the query_logs pattern of each log message read, one a line"
    )
    patterns.add_argument("file", nargs="?", metavar="FILE", help="UTF-8 text (default: stdin)")
    patterns.add_argument(
        "--counts",
        action="store_true",
        help="one line per pattern instead: count, pattern and an example, most frequent first",
    )
    patterns.set_defaults(run=_patterns)
    setup = commands.add_parser(
        "setup-mysql", help="create the read-only MySQL account (column-level SELECT grants)"
    )
    add_setup_arguments(setup)
    setup.set_defaults(run=_setup_mysql)
    _add_eval(commands)
    return parser


def _add_diagnose(commands: Any) -> None:
    diagnose = commands.add_parser("diagnose", help="run one diagnosis, print the result JSON")
    diagnose.add_argument("query", metavar="QUERY", help="the question, as the on-call asks it")
    diagnose.add_argument(
        "--previous-turn", metavar="FILE",
        help="JSON of the previous turn: {query, conclusion, missing_info}",
    )  # fmt: skip
    diagnose.add_argument(
        "--session-id", metavar="ID", help="groups runs of one conversation in the audit"
    )
    diagnose.add_argument(
        "--asked-at",
        metavar="TIME",
        type=_asked_at,
        help="when the question was asked, RFC 3339 with a zone (default: the run's start)",
    )
    diagnose.set_defaults(run=_diagnose)


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run the Slack app (Socket Mode or HTTP)")
    serve.add_argument("--http", action="store_true", help="HTTP mode even with SLACK_APP_TOKEN")
    serve.add_argument(
        "--port", type=int, default=3000, metavar="N",
        help="HTTP port for Slack events and the health endpoints (default: 3000)",
    )  # fmt: skip
    serve.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help="queue runs on Redis and start N local workers (0: workers run elsewhere)",
    )
    serve.set_defaults(run=_serve)


def _add_eval(commands: Any) -> None:
    evaluate = commands.add_parser("eval", help="run evaluation cases on the model, score them")
    evaluate.add_argument("paths", nargs="+", metavar="PATH", help="case folder(s)")
    evaluate.add_argument(
        "--replay", action="store_true", help="use each case's recorded cassette (no model)"
    )
    evaluate.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="run each case N times (default: 1)"
    )
    evaluate.add_argument("--out", type=Path, metavar="FILE", help="write the JSON report")
    evaluate.add_argument(
        "--mysql-admin-dsn", metavar="DSN",
        help="an admin account to create throwaway databases for cases that need MySQL",
    )  # fmt: skip
    evaluate.set_defaults(run=_eval)


def _version() -> str:
    """The installed distribution's version (single-sourced from the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sre-diag")
    except PackageNotFoundError:  # a checkout imported without installing
        return "unknown"


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError("must be a whole number from 0 to 64")
    return value


def _asked_at(text: str) -> datetime:
    try:
        return parse_asked_at(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            "must be an RFC 3339 time with a zone, e.g. 2026-11-28T10:20:00Z"
        ) from None


def _configure_logging() -> None:
    """DIAG_LOG_FORMAT / DIAG_LOG_LEVEL; invalid settings log in the defaults (the command then
    refuses them with INVALID_SETTINGS)."""
    try:
        settings = load_settings()
    except ConfigError:
        configure_logging()
    else:
        configure_logging(settings.log_level, settings.log_format)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare ``sre-diag``: the usage, for a person
        parser.print_help(sys.stderr)
        return EXIT_REJECTED
    _configure_logging()
    try:
        code: int = asyncio.run(args.run(args))
    except KeyboardInterrupt:
        return EXIT_FAILED
    except Exception as exc:
        log_failure(_log, logging.ERROR, "unexpected failure: %s", exc=exc)
        _emit({"failure": {"code": "AGENT_ERROR", "detail": "UNCLASSIFIED"}})
        return EXIT_FAILED
    return code
