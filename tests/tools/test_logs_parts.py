"""A window scanned in parts gives the page of one whole scan (issue 20 item 2: large scans are
cut over child processes): :func:`range_blocks` gives every line to exactly one part whatever the
cuts, and the merge of the parts' tallies and newest matches is the single scan's page — tried
in this process, part by part, on files whose lines cross the cuts."""

from __future__ import annotations

import io
import itertools
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sre_diag.tools.logs.jsonl import CHUNK_BYTES, range_blocks
from sre_diag.tools.logs.parts import (
    Part,
    merge_packed,
    merge_parts,
    plan_parts,
    scan_packed,
    scan_parts,
    window_files,
)
from sre_diag.tools.logs.source import MAX_LINE_BYTES
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.schemas import LogLevel
from sre_diag.tools.threads import NEVER
from tests.tools.test_logs import _at, _input, _line, _write


def _lines_of(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(data)]
    out = b""
    for start, end in itertools.pairwise(bounds):
        out += b"".join(range_blocks(io.BytesIO(data), len(data), start, end))
    return out.split(b"\n")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\n\n", b"x" * 300]), max_size=40),
    st.lists(st.integers(min_value=0, max_value=12_000), max_size=6),
)
def test_ranges_that_tile_a_file_give_every_byte_once(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    cuts = [c for c in cuts if 0 < c < len(data)]
    assert _lines_of(data, cuts) == data.split(b"\n")


def test_ranges_cut_inside_long_lines_and_blocks() -> None:
    data = b"".join(b"y" * n + b"\n" for n in (10, CHUNK_BYTES + 7, 3, 2 * CHUNK_BYTES, 0, 5))
    for cut in (1, 11, 12, CHUNK_BYTES, CHUNK_BYTES + 18, CHUNK_BYTES + 19, len(data) - 2):
        assert _lines_of(data, [cut]) == data.split(b"\n")
    assert _lines_of(data + b"tail", [len(data) + 1]) == (data + b"tail").split(b"\n")
    assert b"".join(range_blocks(io.BytesIO(data), 0, 0, None)) == b""  # said empty: nothing


def _history(folder: Path) -> None:
    for hour, count in ((10, 2_500), (11, 1_200), (12, 40)):
        rows: list[str] = []
        for i in range(count):
            ts = (_at(hour) + timedelta(seconds=(i // 4) * 3)).isoformat()  # ties of 4
            message, level = f"call {i % 7} to psp-{i % 3} took {i}ms", ("INFO", "ERROR")[i % 2]
            rows.append(_line(ts, message, level, "payment-api" if i % 13 else "other"))
            if i % 300 == 7:
                rows.extend(["", "{bad", "z" * (MAX_LINE_BYTES + 10), "  "])
        _write(folder, f"payment-api/2026-11-28/{hour}.jsonl", rows)
    with (folder / "payment-api/2026-11-28/12.jsonl").open("ab") as handle:
        handle.write(b'{"ts": "2026-11-28T12:59:00+00:00", "service": "payment-api"')  # no newline


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 40])
@pytest.mark.parametrize(
    "query",
    [
        _input(_at(10), _at(13)),
        _input(_at(10, 30), _at(12, 0, 1), limit=3),
        _input(_at(10), _at(13), level=LogLevel.ERROR, limit=50),
        _input(_at(11), _at(13), contains="PSP-2"),
    ],
    ids=["all", "partial", "errors", "contains"],
)
def test_parts_merge_to_the_single_scan(tmp_path: Path, n: int, query: object) -> None:
    _history(tmp_path)
    q = query  # a LogsInput
    whole = scan_window(NEVER, tmp_path, q, 5.0)  # type: ignore[arg-type]
    plan = plan_parts(window_files(tmp_path, q), n)  # type: ignore[arg-type]
    assert 1 <= len(plan) <= n
    partials = [scan_parts(NEVER, tmp_path, q, part) for part in plan]  # type: ignore[arg-type]
    assert merge_parts(NEVER, q, partials, 5.0) == whole  # type: ignore[arg-type]
    assert whole.page is not None and whole.malformed > 0


def test_a_plan_tiles_the_files_in_read_order() -> None:
    files = [("b", 100), ("a", 0), ("c", 50)]
    for n in range(1, 12):
        plan = plan_parts(files, n)
        flat = [p for part in plan for p in part]
        assert all(part for part in plan) and len(plan) <= n
        for rel, size in files:
            spans = [(p.start, p.end) for p in flat if p.rel == rel]
            assert spans[0][0] == 0 and spans[-1][1] == size  # an empty file is one empty span
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        assert [p.rel for p in flat] == sorted([p.rel for p in flat], key="bac".index)
    assert plan_parts([], 3) == [] and plan_parts([("a", 0)], 3) == [[Part("a", 0, 0)]]


def test_an_empty_hour_file_counts_as_opened_in_parts(tmp_path: Path) -> None:
    _history(tmp_path)
    (tmp_path / "payment-api/2026-11-28/11.jsonl").write_bytes(b"")
    q = _input(_at(10), _at(13))
    whole = scan_window(NEVER, tmp_path, q, 5.0)
    for n in (2, 3):
        partials = [
            scan_parts(NEVER, tmp_path, q, part)
            for part in plan_parts(window_files(tmp_path, q), n)
        ]
        assert merge_parts(NEVER, q, partials, 5.0) == whole
    assert "payment-api/2026-11-28/11.jsonl" in whole.files


def test_parts_cross_the_parent_packed_and_merge_to_the_single_scan(tmp_path: Path) -> None:
    """What a part's child sends back is bytes the parent passes on unread (unpickling a
    tally of 20k keys held the parent's GIL, so its event loop, for ~100 ms; re-pickling it
    for the merge as long again): the merge of the packed parts is still the single scan."""
    _history(tmp_path)
    q = _input(_at(10), _at(13), limit=7)
    packed = [
        scan_packed(NEVER, tmp_path, q, part) for part in plan_parts(window_files(tmp_path, q), 3)
    ]
    assert len(packed) == 3 and all(isinstance(part, bytes) for part in packed)
    assert merge_packed(NEVER, q, packed, 5.0) == scan_window(NEVER, tmp_path, q, 5.0)
