"""How one check's observation reads in the Evidence view: a count that says what was matched,
the log summary, the oldest and the newest matching lines (labelled), database rows and runbook
sections, each line escaped and inert.

Everything in an observation is evidence, hence attacker text: it goes through ``mrkdwn``
(identifiers byte-identical, nothing formats). The labels (``_First matching lines_``) are ours.
A time the bot shows — a log line's timestamp, the first and last match, the start of the
per-minute counts — is read by our parser and shown as a Slack date token (each reader's time
zone, a UTC fallback); a timestamp that does not parse stays text. A runbook snippet's Markdown
table (its lines folded into one by the knowledge adapter) reads as one row a line,
``header: cell · header: cell``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sre_diag.contract.text import one_line
from sre_diag.slack.mrkdwn import (
    QUOTE,
    fit,
    inert_unit,
    line,
    markdown_code,
    slack_date,
    spaced,
)

__all__ = ["CheckLines", "check_lines", "parse_time", "table_rows"]

_LINE_MAX = 600
_CELL_MAX = 200
_TIME_MAX = 40
_SPARKS = "▁▂▃▄▅▆▇█"
_SEPARATOR = re.compile(r"\|(?:\s*:?-{3,}:?\s*\|)+")
_ROWS_MAX = 20


@dataclass(frozen=True, slots=True)
class CheckLines:
    """One check's evidence: ``count`` for its title (``10 of 1,167 matching lines``) and its
    lines, each already mrkdwn."""

    count: str
    lines: list[str]


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp with a zone, or None (never raises)."""
    if not isinstance(value, str) or not 0 < len(value) <= _TIME_MAX:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def _time(value: object, *, seconds: bool = False, with_date: bool = True) -> str:
    moment = parse_time(value)
    if moment is None:
        return line(_plain(value))
    return slack_date(moment, with_date=with_date, seconds=seconds)


def _plain(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "NULL"
    return json.dumps(value, ensure_ascii=False, default=str)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _items(observation: Mapping[str, Any], key: str) -> list[Any]:
    items = observation.get(key)
    return list(items) if isinstance(items, list) else []


# --------------------------------------------------------------------------- logs


def _log_line(item: Mapping[str, Any], previous: datetime | None) -> tuple[str, datetime | None]:
    """``10:29:59  ERROR payment-api  message``; the date only when it changes."""
    moment = parse_time(item.get("ts"))
    if moment is None:
        when = fit(_plain(item.get("ts")), 60)
    else:
        new_day = previous is None or previous.date() != moment.date()
        when = slack_date(moment, with_date=new_day, seconds=True)
    level = fit(_plain(item.get("level")), 20)
    service = f" {fit(_plain(item['service']), 80)}" if item.get("service") else ""
    message = fit(_plain(item.get("message")), _LINE_MAX)
    return f"{QUOTE}{when} · {level}{service} · {message}", moment or previous


def _chronological(items: Sequence[Any]) -> list[Any]:
    """Oldest first when every line's time parses (the adapter keeps the newest first)."""
    times = [parse_time(i.get("ts")) if isinstance(i, Mapping) else None for i in items]
    if any(t is None for t in times):
        return list(items)
    order = sorted(range(len(items)), key=lambda n: times[n] or datetime.min.replace(tzinfo=UTC))
    return [items[n] for n in order]


def _log_lines(items: Sequence[Any]) -> list[str]:
    lines: list[str] = []
    previous: datetime | None = None
    for item in _chronological(items):
        if isinstance(item, Mapping) and {"ts", "level", "message"} <= item.keys():
            text, previous = _log_line(item, previous)
        else:
            text = QUOTE + _generic(item)
        lines.append(text)
    return lines


def _sparkline(counts: Sequence[int]) -> str:
    peak = max(counts, default=0)
    if peak <= 0:
        return _SPARKS[0] * len(counts)
    top = len(_SPARKS) - 1
    return "".join(_SPARKS[min(c * top // peak, top)] for c in counts)


def _per(width_seconds: int) -> str:
    names = {60: "minute", 3600: "hour"}
    return names.get(width_seconds, f"{width_seconds // 60} minutes" if width_seconds % 60 == 0
                     else f"{width_seconds} s")  # fmt: skip


def _summary_lines(summary: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    first, last = parse_time(summary.get("first_ts")), parse_time(summary.get("last_ts"))
    if first is not None and last is not None:
        same_day = first.date() == last.date()
        lines.append(
            f"_First match_ {slack_date(first, seconds=True)} · "
            f"_last_ {slack_date(last, with_date=not same_day, seconds=True)}"
        )
    buckets = summary.get("buckets")
    if isinstance(buckets, Mapping):
        counts = [c for c in buckets.get("counts") or [] if (_int(c) or 0) >= 0]
        width = _int(buckets.get("width_seconds"))
        if counts and width and width > 0:
            lines.append(
                f"_Per {_per(width)} from_ {_time(buckets.get('start'))}: "
                f"{_sparkline(counts)} _(peak {max(counts):,} a {_per(width)})_"
            )
    tops = [t for t in summary.get("top_messages") or [] if isinstance(t, Mapping)]
    if tops:
        lines.append("_Most frequent messages_")
    for top in tops:
        count = _int(top.get("count")) or 0
        lines.append(f"{QUOTE}*{count:,}×* {fit(_plain(top.get('pattern')), _LINE_MAX, _pattern)}")
    return lines


_VARIABLE = "<*>"
"""How a message pattern marks a variable part (``patterns``); shown as a code span of ours."""


def _pattern(text: str) -> str:
    """A message pattern: its text escaped, each variable part as `` `<*>` ``."""
    pieces = one_line(text).split(_VARIABLE)
    shown = "`&lt;*&gt;`".join(spaced(p) for p in pieces).strip()
    return shown or line(text)


def _log_check(observation: Mapping[str, Any]) -> CheckLines:
    summary = observation.get("summary")
    summary = summary if isinstance(summary, Mapping) else {}
    first = _items(observation, "first_items")
    latest = [i for i in _items(observation, "items") if i not in first]
    lines = _summary_lines(summary)
    if first:
        lines += ["_First matching lines_", *_log_lines(first)]
    if latest:
        lines += ["_Latest matching lines_", *_log_lines(latest)]
    shown = len(first) + len(latest)
    matched = _int(summary.get("matched"))
    if matched is None:
        more = " (more were left out)" if observation.get("truncated") is True else ""
        return CheckLines(f"{shown:,} matching lines{more}", lines)
    if matched == 0 and not shown:
        return CheckLines("no matching lines", [])
    about = "" if summary.get("exact") is True else "about "
    return CheckLines(f"{shown:,} of {about}{matched:,} matching lines", lines)


# --------------------------------------------------------------------------- rows, runbooks


def _cell(key: str, value: object) -> str:
    return inert_unit(f"{one_line(key)}={one_line(_plain(value))}", _CELL_MAX)


def _row(cells: Mapping[str, Any]) -> str:
    return QUOTE + " · ".join(_cell(str(k), v) for k, v in cells.items())


def _generic(item: object) -> str:
    if isinstance(item, Mapping):
        return " · ".join(_cell(str(k), v) for k, v in item.items())
    return fit(_plain(item), _LINE_MAX)


def table_rows(text: str) -> list[tuple[str, list[list[tuple[str, str]]]]]:
    """``text`` (one line) split into (prose, rows) parts: each Markdown table becomes its rows,
    each row the (header, cell) pairs; prose without a table is one part with no rows."""
    parts: list[tuple[str, list[list[tuple[str, str]]]]] = []
    rest = text
    while (sep := _SEPARATOR.search(rest)) is not None:
        columns = sep.group(0).count("|") - 1
        head = re.search(rf"\|((?:[^|]*\|){{{columns}}})\s*$", rest[: sep.start()])
        if head is None:
            break
        names = [c.strip() for c in head.group(1).split("|")[:columns]]
        rows: list[list[tuple[str, str]]] = []
        tail = rest[sep.end() :]
        while (row := re.match(rf"\s*\|((?:[^|]*\|){{{columns}}})", tail)) is not None:
            cells = [c.strip() for c in row.group(1).split("|")[:columns]]
            rows.append(list(zip(names, cells, strict=True)))
            tail = tail[row.end() :]
        parts.append((rest[: head.start()].strip(), rows))
        rest = tail
    parts.append((rest.strip(), []))
    return [(prose, rows) for prose, rows in parts if prose or rows]


def _table_row(pairs: Sequence[tuple[str, str]]) -> str:
    shown = [
        f"{fit(h, _CELL_MAX, markdown_code)}: {fit(v, _CELL_MAX, markdown_code)}"
        if h else fit(v, _CELL_MAX, markdown_code)
        for h, v in pairs if v
    ]  # fmt: skip
    return QUOTE + "• " + (" · ".join(shown) or "—")


def _section_lines(item: Mapping[str, Any]) -> list[str]:
    title = fit(_plain(item.get("title")), 160)
    heading = f" › {fit(_plain(item['heading']), 160)}" if item.get("heading") else ""
    where = f" · {fit(_plain(item['path']), 160)}" if item.get("path") else ""
    lines = [f"{QUOTE}{title}{heading}{where}"]
    for prose, rows in table_rows(one_line(_plain(item.get("snippet")))):
        if prose:
            lines.append(QUOTE + fit(prose, _LINE_MAX, markdown_code))
        lines += [_table_row(r) for r in rows[:_ROWS_MAX]]
    return lines


def _other_check(observation: Mapping[str, Any]) -> CheckLines:
    items = _items(observation, "items")
    lines: list[str] = []
    rows = sections = 0
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("cells"), Mapping) and len(item) == 1:
            lines.append(_row(item["cells"]))
            rows += 1
        elif isinstance(item, Mapping) and {"title", "snippet"} <= item.keys():
            lines += _section_lines(item)
            sections += 1
        else:
            lines.append(QUOTE + _generic(item))
    more = " (more were left out)" if observation.get("truncated") is True else ""
    if rows and rows == len(items):
        noun = "row" if rows == 1 else "rows"
    elif sections and sections == len(items):
        noun = "runbook section" if sections == 1 else "runbook sections"
    else:
        noun = "item" if len(items) == 1 else "items"
    return CheckLines(f"{len(items):,} {noun}{more}", lines)


def check_lines(observation: Mapping[str, Any]) -> CheckLines:
    """The evidence of one READY observation, as the Evidence view shows it."""
    items = _items(observation, "items")
    logs = bool(items) and all(
        isinstance(i, Mapping) and {"ts", "level", "message"} <= i.keys() for i in items
    )
    if logs or isinstance(observation.get("summary"), Mapping) or "first_items" in observation:
        return _log_check(observation)
    return _other_check(observation)
