"""The per-tool whitelist projection (``sre_diag.harness.whitelist``) field by field, pure.

What a tool's whitelist reads (only its own fields, from a model or a mapping), how each field
is bounded (text at exactly its bound and one past it, numbers finite and in range, lists cut),
what it refuses (another tool's item, a missing or mistyped field, an object that is no item),
and that what the shipped adapters produce passes unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from sre_diag.harness.whitelist import (
    BOUNDS,
    MAX_FIRST_ITEMS,
    MAX_ITEMS,
    TRUNCATION_MARK,
    Unprojectable,
    project,
)
from sre_diag.tools.base import Ready, ToolName
from sre_diag.tools.schemas import (
    KnowledgeItem,
    LogBuckets,
    LogItem,
    LogPattern,
    LogSummary,
    MysqlRow,
)

KB, LOGS, SQL = ToolName.LOOKUP_KNOWLEDGE, ToolName.QUERY_LOGS, ToolName.QUERY_MYSQL
KNOWLEDGE = {"title": "t", "heading": "h", "path": "p.md", "score": 1.5, "snippet": "s"}
LINE = {"ts": "2026-11-28T10:05:00.000Z", "service": "api", "level": "ERROR", "message": "m"}
ROW = {"cells": {"status": "FAILED", "n": 40, "ratio": 0.5, "ok": True, "gone": None}}
SHAPES: dict[ToolName, dict[str, Any]] = {KB: KNOWLEDGE, LOGS: LINE, SQL: ROW}
MODELS: dict[ToolName, type[BaseModel]] = {KB: KnowledgeItem, LOGS: LogItem, SQL: MysqlRow}


class Anything(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


def summary(**changes: Any) -> LogSummary:
    values: dict[str, Any] = {
        "matched": 3, "exact": True, "first_ts": "a", "last_ts": "b",
        "buckets": LogBuckets(start="s", width_seconds=60, counts=[1, 2]),
        "top_messages": [LogPattern(pattern="p <*>", count=3, first_ts="a", last_ts="b")],
    }  # fmt: skip
    values.update(changes)
    return LogSummary(**values)


@pytest.mark.parametrize("tool", list(ToolName))
def test_a_well_formed_result_passes_unchanged(tool: ToolName) -> None:
    item = MODELS[tool](**SHAPES[tool])
    projected = project(tool, Ready(items=[item, SHAPES[tool]], truncated=True))
    assert projected.items == (item, item) and projected.truncated is True
    assert all(type(i) is MODELS[tool] for i in projected.items)
    assert project(tool, Ready(items=[])).items == ()
    assert project(tool, Ready(items=[item])).truncated is False


@pytest.mark.parametrize("tool", list(ToolName))
def test_only_the_tools_fields_are_read(tool: ToolName) -> None:
    extra = {"password": "hunter2", "raw_response": "Traceback"}
    for item in (Anything(**SHAPES[tool], **extra), {**SHAPES[tool], **extra}):
        [projected] = project(tool, Ready(items=[item])).items
        assert projected.model_dump() == MODELS[tool](**SHAPES[tool]).model_dump()


@pytest.mark.parametrize("tool", list(ToolName))
@pytest.mark.parametrize("other", list(ToolName))
def test_another_tools_item_is_refused(tool: ToolName, other: ToolName) -> None:
    if other is tool:
        return
    foreign = MODELS[other](**SHAPES[other])
    with pytest.raises(Unprojectable, match="another tool's item"):
        project(tool, Ready(items=[MODELS[tool](**SHAPES[tool]), foreign]))
    with pytest.raises(Unprojectable):  # its fields, as a mapping, are not this tool's either
        project(tool, Ready(items=[SHAPES[other]]))


@pytest.mark.parametrize("tool", list(ToolName))
def test_a_summary_model_is_no_item(tool: ToolName) -> None:
    for model in (summary(), LogPattern(pattern="p", count=1, first_ts="a", last_ts="b")):
        with pytest.raises(Unprojectable):
            project(tool, Ready(items=[model]))


def test_an_item_of_the_right_shape_with_foreign_fields_too_is_projected() -> None:
    # Not an instance of another tool's item: the tool's own fields are read, the rest dropped.
    both = Anything(**KNOWLEDGE, **LINE)
    [projected] = project(LOGS, Ready(items=[both])).items
    assert projected == LogItem(**LINE)


@pytest.mark.parametrize(
    ("tool", "field", "value"),
    [
        (KB, "score", math.nan), (KB, "score", math.inf), (KB, "score", -math.inf),
        (KB, "score", True), (KB, "score", "1.5"), (KB, "score", None),
        (KB, "title", 1), (KB, "title", None), (KB, "title", b"t"),
        (LOGS, "message", ["m"]), (LOGS, "ts", 1_700_000_000),
        (SQL, "cells", [("status", "FAILED")]), (SQL, "cells", "status=FAILED"),
    ],
)  # fmt: skip
def test_a_mistyped_field_is_refused(tool: ToolName, field: str, value: object) -> None:
    with pytest.raises(Unprojectable, match=field if field != "cells" else "cells"):
        project(tool, Ready(items=[{**SHAPES[tool], field: value}]))


@pytest.mark.parametrize("tool", list(ToolName))
def test_a_missing_field_is_refused_and_named_without_a_value(tool: ToolName) -> None:
    for name in SHAPES[tool]:
        partial = {k: v for k, v in SHAPES[tool].items() if k != name}
        with pytest.raises(Unprojectable) as refused:
            project(tool, Ready(items=[{**partial, "secret": "hunter2"}]))
        assert refused.value.reason == f"field {name} missing"
        assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("thing", [object(), "text", 3, None, ["title", "t"], (1, 2)])
def test_what_is_no_item_is_refused(thing: object) -> None:
    with pytest.raises(Unprojectable):
        project(KB, Ready(items=[thing]))  # type: ignore[list-item]


@pytest.mark.parametrize("items", ["abc", b"abc", 3, None])
def test_items_that_are_no_list_are_refused(items: object) -> None:
    with pytest.raises(Unprojectable, match="items"):
        project(KB, Ready(items=items))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tool", "field", "bound"),
    [
        (KB, "title", "label"), (KB, "heading", "label"), (KB, "path", "path"),
        (KB, "snippet", "snippet"), (LOGS, "ts", "ts"), (LOGS, "service", "log_label"),
        (LOGS, "level", "log_label"), (LOGS, "message", "message"),
    ],
)  # fmt: skip
def test_each_text_is_cut_past_its_bound_with_a_mark(
    tool: ToolName, field: str, bound: str
) -> None:
    limit = BOUNDS[bound]
    at = project(tool, Ready(items=[{**SHAPES[tool], field: "池" * limit}])).items[0]
    assert getattr(at, field) == "池" * limit  # exactly at the bound: kept whole
    past = project(tool, Ready(items=[{**SHAPES[tool], field: "池" * (limit + 1)}])).items[0]
    text = getattr(past, field)
    assert len(text) == limit and text.endswith(TRUNCATION_MARK)
    assert text == "池" * (limit - len(TRUNCATION_MARK)) + TRUNCATION_MARK


def test_a_text_subclass_comes_out_a_plain_text() -> None:
    class Sneaky(str):
        def __str__(self) -> str:
            return "hunter2"

    [item] = project(LOGS, Ready(items=[{**LINE, "message": Sneaky("m")}])).items
    assert type(item.message) is str and item.message == "m"  # type: ignore[attr-defined]


def test_cells_are_bounded_in_number_name_and_value() -> None:
    many = {f"c{n}": n for n in range(BOUNDS["cells"] + 5)}
    [row] = project(SQL, Ready(items=[{"cells": many}])).items
    assert list(row.cells) == [f"c{n}" for n in range(BOUNDS["cells"])]  # type: ignore[attr-defined]
    name = "k" * (BOUNDS["column"] + 1)
    value = "v" * (BOUNDS["cell"] + 1)
    [row] = project(SQL, Ready(items=[{"cells": {name: value, "k" * BOUNDS["column"]: 1}}])).items
    cells = row.cells  # type: ignore[attr-defined]
    cut_name = "k" * (BOUNDS["column"] - len(TRUNCATION_MARK)) + TRUNCATION_MARK
    assert cells[cut_name] == "v" * (BOUNDS["cell"] - len(TRUNCATION_MARK)) + TRUNCATION_MARK
    assert cells["k" * BOUNDS["column"]] == 1


@pytest.mark.parametrize("value", [2**64, -(2**64), 0, -1, 2**53 + 1, 1.25, -0.0, False, None])
def test_a_cell_number_within_range_passes(value: object) -> None:
    [row] = project(SQL, Ready(items=[{"cells": {"x": value}}])).items
    assert row.cells["x"] == value  # type: ignore[attr-defined]
    assert type(row.cells["x"]) is type(value)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "value", [2**64 + 1, -(2**64) - 1, math.nan, math.inf, [1], {"a": 1}, b"x"]
)
def test_a_cell_that_is_no_bounded_scalar_is_refused(value: object) -> None:
    with pytest.raises(Unprojectable):
        project(SQL, Ready(items=[{"cells": {"x": value}}]))


def test_items_past_the_bound_are_left_out_and_say_so() -> None:
    item = LogItem(**LINE)
    at = project(LOGS, Ready(items=[item] * MAX_ITEMS))
    assert len(at.items) == MAX_ITEMS and at.truncated is False
    past = project(LOGS, Ready(items=[item] * (MAX_ITEMS + 1)))
    assert len(past.items) == MAX_ITEMS and past.truncated is True


def test_first_items_are_the_logs_only_bounded_and_of_the_items_shape() -> None:
    item = LogItem(**LINE)
    at = project(LOGS, Ready(items=[item], first_items=[item] * MAX_FIRST_ITEMS))
    assert at.first_items == (item,) * MAX_FIRST_ITEMS and at.truncated is False
    past = project(LOGS, Ready(items=[item], first_items=[Anything(**LINE, pw="x")] * 4))
    assert past.first_items == (item,) * MAX_FIRST_ITEMS and past.truncated is True
    with pytest.raises(Unprojectable):
        project(LOGS, Ready(items=[item], first_items=[KnowledgeItem(**KNOWLEDGE)]))
    # Another tool's result carrying them has them dropped, like any unknown field.
    knowledge = KnowledgeItem(**KNOWLEDGE)
    dropped = project(KB, Ready(items=[knowledge], first_items=[item], summary=summary()))
    assert dropped.first_items == () and dropped.summary is None and dropped.truncated is False


def test_the_summary_is_read_field_by_field_and_bounded() -> None:
    hostile = Anything(
        matched=5, exact=False, first_ts=None, last_ts="t" * 100, raw="Traceback",
        buckets={"start": "s", "width_seconds": 300, "counts": list(range(70)), "x": 1},
        top_messages=[{"pattern": "p" * 500, "count": 2, "first_ts": "a", "last_ts": "b",
                       "sample": "hunter2"}] * 9,
    )  # fmt: skip
    projected = project(LOGS, Ready(items=[], summary=hostile)).summary
    assert projected is not None
    assert (projected.matched, projected.exact, projected.first_ts) == (5, False, None)
    assert projected.last_ts == "t" * (BOUNDS["ts"] - len(TRUNCATION_MARK)) + TRUNCATION_MARK
    assert projected.buckets.counts == list(range(BOUNDS["buckets"]))
    assert len(projected.top_messages) == BOUNDS["top_messages"]
    assert len(projected.top_messages[0].pattern) == BOUNDS["pattern"]
    assert "hunter2" not in projected.model_dump_json() and "Traceback" not in str(projected)
    assert project(LOGS, Ready(items=[], summary=summary())).summary == summary()


@pytest.mark.parametrize(
    "changes",
    [
        {"matched": -1}, {"matched": True}, {"matched": 2**64}, {"matched": 1.0},
        {"exact": 1}, {"exact": "true"}, {"first_ts": 5},
        {"buckets": {"start": "s", "width_seconds": -60, "counts": []}},
        {"buckets": {"start": "s", "width_seconds": 60, "counts": [1, -1]}},
        {"buckets": {"start": "s", "width_seconds": 60, "counts": "12"}},
        {"top_messages": [{"pattern": "p", "count": "3", "first_ts": "a", "last_ts": "b"}]},
        {"top_messages": "p"},
    ],
)  # fmt: skip
def test_a_summary_outside_its_shape_is_refused(changes: dict[str, Any]) -> None:
    values = {**summary().model_dump(), **changes}
    with pytest.raises(Unprojectable):
        project(LOGS, Ready(items=[], summary=Anything(**values)))


@pytest.mark.parametrize("count", [0, 2**64 - 1])
def test_a_count_from_zero_to_its_range(count: int) -> None:
    values = {**summary().model_dump(), "matched": count}
    projected = project(LOGS, Ready(items=[], summary=Anything(**values))).summary
    assert projected is not None and projected.matched == count


def test_the_bounds_are_at_least_what_the_shipped_adapters_produce() -> None:
    from sre_diag.tools.knowledge import LABEL_CHARS, SNIPPET_CHARS
    from sre_diag.tools.logs import LABEL_CHARS as LOG_LABEL_CHARS
    from sre_diag.tools.logs import MESSAGE_CHARS
    from sre_diag.tools.logs.summary import MAX_BUCKETS, PATTERN_CHARS, TOP_MESSAGES
    from sre_diag.tools.mysql.rows import TRUNCATION_MARK as CELL_MARK

    assert BOUNDS["label"] >= LABEL_CHARS and BOUNDS["snippet"] >= SNIPPET_CHARS
    assert BOUNDS["log_label"] >= LOG_LABEL_CHARS and BOUNDS["message"] >= MESSAGE_CHARS
    assert BOUNDS["pattern"] >= PATTERN_CHARS and BOUNDS["buckets"] >= MAX_BUCKETS
    assert BOUNDS["top_messages"] >= TOP_MESSAGES
    assert BOUNDS["cell"] >= 200 + len(CELL_MARK)  # the MySQL adapter's default cell bound
    assert BOUNDS["column"] >= 256 + len("#1000")  # MySQL's longest alias, made unique
    assert MAX_ITEMS >= 1000  # DIAG_MYSQL_MAX_ROWS at most
