"""``first_items`` (CONTRACTS §4): a ``query_logs`` observation carries the oldest matches (the
onset, up to three, oldest first) beside the newest, from both sources, within the same cap."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from sre_diag.contract.observations import ready_observation
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter, LokiLogSource
from sre_diag.tools.logs.parts import merge_parts, plan_parts, scan_parts, window_files
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.schemas import LogItem, LogLevel
from sre_diag.tools.threads import Stop
from tests.tools.fake_loki import json_reply, start_fake_loki
from tests.tools.test_logs import _at, _input, _line, _loki_body, _write

NEVER = Stop(None)


def _incident(folder: Path) -> list[tuple[str, str, str]]:
    """Three hours of lines, the errors starting at 10:05 with ties on their first second;
    returns (ts, level, message) of every line in the order a scan reads them."""
    read: list[tuple[str, str, str]] = []
    for hour in (12, 11, 10):  # files are read newest hour first
        rows = []
        for i in range(600):
            ts = (_at(hour) + timedelta(seconds=6 * i)).isoformat()
            level = "ERROR" if (hour, i) >= (10, 50) and i % 3 == 0 else "INFO"
            message = f"pool exhausted #{hour}-{i}" if level == "ERROR" else f"ok {i}"
            rows.append(_line(ts, message, level, "payment-api"))
            read.append((ts, level, message))
        tie = (_at(hour, 5)).isoformat()
        for k in range(3):  # the same instant as line 50: ties, in the order written
            rows.append(_line(tie, f"tie {hour}-{k}", "ERROR", "payment-api"))
            read.append((tie, "ERROR", f"tie {hour}-{k}"))
        _write(folder, f"payment-api/2026-11-28/{hour}.jsonl", rows)
    return read


def _oldest(read: list[tuple[str, str, str]], level: str | None, start: str) -> list[str]:
    """The independent reading: matches sorted by time, stable (ties in the order read)."""
    matches = [r for r in read if (level is None or r[1] == level) and r[0] >= start]
    return [message for _, _, message in sorted(matches, key=lambda r: r[0])[:3]]


def test_folder_first_items_are_the_oldest_matches(tmp_path: Path) -> None:
    read = _incident(tmp_path)
    for q, level in (
        (_input(_at(10), _at(13), level=LogLevel.ERROR), "ERROR"),
        (_input(_at(10, 0, 6), _at(12, 30), limit=2), None),
    ):
        whole = scan_window(NEVER, tmp_path, q, 5.0)
        assert whole.page is not None
        first = [r.message for r in whole.page.first_items]
        assert first == _oldest(read, level, q.start.isoformat())
        assert len(first) == 3 and whole.page.items[0].message != first[0]
        # A window scanned in parts (child processes) gives the same onset.
        plan = plan_parts(window_files(tmp_path, q), 4)
        merged = merge_parts(NEVER, q, [scan_parts(NEVER, tmp_path, q, p) for p in plan], 5.0)
        assert merged.page is not None and merged.page.first_items == whole.page.first_items


async def test_folder_adapter_projects_first_items(tmp_path: Path) -> None:
    _incident(tmp_path)
    adapter = LogsAdapter(JsonlLogSource(tmp_path))
    q = _input(_at(10), _at(13), level=LogLevel.ERROR, limit=5)
    result = await adapter.invoke(AdapterCall("call-1", "run-1", q))
    assert isinstance(result, Ready) and result.first_items is not None
    first = [item.message for item in result.first_items if isinstance(item, LogItem)]
    assert first == ["tie 10-0", "tie 10-1", "tie 10-2"]  # ties in the order written
    assert {item.ts for item in result.first_items} == {"2026-11-28T10:05:00.000Z"}
    await adapter.aclose()


async def test_loki_first_items_from_the_sample_and_from_the_oldest_query() -> None:
    labels = {"service": "payment-api"}
    lines = [(_at(10, 5, s), _line("x", f"err {s}", "ERROR")) for s in range(0, 60, 2)]
    async with start_fake_loki() as loki:
        loki.reply = lambda: json_reply(_loki_body([(labels, list(reversed(lines)))]))
        source = LokiLogSource(loki.url, timeout_seconds=2, sample_lines=100)
        page = await source.search(_input(_at(10), _at(11), limit=5))
        assert [r.message for r in page.first_items] == ["err 0", "err 2", "err 4"]
        assert [r.message for r in page.items][:2] == ["err 58", "err 56"]
        # The sample (10 lines) does not hold every match: the onset comes from a forward
        # query for the oldest three, streams merged by time.
        source.sample_lines = 10
        loki.reply = lambda: json_reply(_loki_body([(labels, list(reversed(lines))[:10])]))
        older = [(labels, [lines[2], lines[0]]), ({"service": "payment-api", "pod": "b"},
                 [lines[1]])]  # fmt: skip
        loki.oldest = lambda: json_reply(_loki_body(older))
        page = await source.search(_input(_at(10), _at(11), limit=5))
        assert [r.message for r in page.first_items] == ["err 0", "err 2", "err 4"]
        forward = [r for r in loki.log_requests if r["direction"] == "forward"]
        assert forward and forward[-1]["limit"] == "3"
        assert page.summary is not None and page.summary.first_ts == "2026-11-28T10:05:00.000Z"
        await source.aclose()


def _item(ts: str, message: str) -> LogItem:
    return LogItem(ts=ts, service="payment-api", level="ERROR", message=message)


def _observation(items: list[BaseModel], first: list[BaseModel], cap: int) -> dict[str, object]:
    text, count, _ = ready_observation(
        "call-1", "query_logs", items, truncated=False, max_bytes=cap, first_items=first
    )
    assert len(text.encode()) <= cap
    observation = json.loads(text)
    assert observation["item_count"] == count == len(observation["items"])
    return dict(observation)


def test_first_items_share_the_byte_cap_and_both_ends_stay_in_view() -> None:
    items: list[BaseModel] = [
        _item(f"2026-11-28T10:29:{59 - i:02d}Z", "x" * 200) for i in range(20)
    ]
    first: list[BaseModel] = [
        _item(f"2026-11-28T10:05:0{i}Z", "onset " + "y" * 200) for i in range(3)
    ]
    roomy = _observation(items, first, 1 << 20)
    assert len(roomy["items"]) == 20 and len(roomy["first_items"]) == 3  # type: ignore[arg-type]
    for cap in (4096, 1500, 900, 600):
        shown = _observation(items, first, cap)
        newest, oldest = shown["items"], shown["first_items"]
        assert isinstance(newest, list) and isinstance(oldest, list)
        assert oldest == roomy["first_items"][: len(oldest)]  # type: ignore[index]
        assert newest == roomy["items"][: len(newest)]  # type: ignore[index]
        assert abs(len(newest) - len(oldest)) <= 1 or len(oldest) == 3
        if cap >= 900:
            assert newest and oldest
    plain, _, _ = ready_observation("c", "query_mysql", items[:1], truncated=False, max_bytes=4096)
    assert "first_items" not in json.loads(plain)
