"""Audit: one record per started run, written after the answer by a bounded background writer.

::

    record.py   audit_record(ctx, result): identity, usage, rounds, ledger; sanitised, <= 64 KB
    trail.py    AuditTrail: the harness's RunAudit port (record building + the writer); wiring
                injects it
    writer.py   AuditWriter: the harness hands records over; its own thread and loop write them,
                each within DIAG_AUDIT_TIMEOUT_SECONDS; lost records counted and logged
    jsonl.py    JsonlAuditSink: regular files only, links not followed, whole lines or nothing
    mysql.py    MysqlAuditSink: diag_audit, recreated when missing, columns bounded
    trigger.py  Trigger (mention, shortcut, alert, replay): what started a Slack run, carried
                to the record and to diag_runs_total by a context variable
    base.py     AuditSink (protocol), AuditWriteError (a reason safe to log)

``DIAG_AUDIT_SINK`` picks the sink: ``jsonl:DIR`` (``~`` expanded) or a ``mysql://`` DSN.
"""

from __future__ import annotations

from pathlib import Path

from sre_diag.audit.base import AuditSink, AuditWriteError
from sre_diag.audit.jsonl import JsonlAuditSink
from sre_diag.audit.mysql import MysqlAuditSink
from sre_diag.audit.record import MAX_RECORD_BYTES, audit_record, encode_record
from sre_diag.audit.trail import AuditTrail
from sre_diag.audit.trigger import Trigger, current_trigger, run_triggered
from sre_diag.audit.writer import AuditWriter
from sre_diag.errors import ConfigError

__all__ = [
    "MAX_RECORD_BYTES",
    "AuditSink",
    "AuditTrail",
    "AuditWriteError",
    "AuditWriter",
    "JsonlAuditSink",
    "MysqlAuditSink",
    "Trigger",
    "audit_record",
    "build_audit_sink",
    "current_trigger",
    "encode_record",
    "run_triggered",
]


def build_audit_sink(spec: str, *, timeout_seconds: float = 5.0) -> AuditSink:
    """``jsonl:DIR`` or a ``mysql://`` DSN; anything else is an operator error."""
    kind, _, target = spec.partition(":")
    if kind == "jsonl" and target:
        return JsonlAuditSink(Path(target).expanduser())
    if kind in {"mysql", "mariadb"}:
        return MysqlAuditSink(spec, timeout_seconds=timeout_seconds)
    raise ConfigError("DIAG_AUDIT_SINK must be jsonl:DIR or mysql://user:password@host:port/db")
