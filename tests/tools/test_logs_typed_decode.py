"""The folder scan's typed decode (msgspec, four fields) reads exactly what ``json.loads`` reads.

msgspec skips the attributes a scan does not need without building them — and without checking
the UTF-8 of their strings or whether ``int()`` would take their integers, where ``json.loads``
refuses the whole line. So a batch holding such a line must not be taken by the typed decode.
Each case writes an hour file of regular lines with lines of one hostile shape spread through
it, scans it, and compares the summary, the newest
items and the malformed count with a plain ``json.loads`` reading of the same bytes.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sre_diag.tools.logs.summary import Grid, Tally
from sre_diag.tools.logs.window import scan_window
from sre_diag.tools.schemas import LogsInput
from sre_diag.tools.threads import NEVER

HOUR = datetime(2026, 11, 28, 10, tzinfo=UTC)
BIG_INT = b"9" * 4301  # one digit over int()'s default limit: json.loads refuses the line
FINE_INT = b"9" * 4000

# Attributes beside the four fields, as raw JSON: each either refused by json.loads (the line
# is malformed) or accepted (the line counts); the typed decode must agree line by line.
EXTRAS: list[bytes] = [
    b'"x":"\xff\xfe"',  # invalid UTF-8 in a skipped string: refused
    b'"x":"\xc0\xaf"',  # overlong UTF-8: refused
    b'"x":"\xed\xa0\x80"',  # a surrogate's UTF-8 bytes: json.loads takes it (surrogatepass)
    b'"x":"\\ud800"',  # an escaped lone surrogate: accepted
    b'"x":' + BIG_INT,  # refused (ValueError from int())
    b'"x":-' + BIG_INT,
    b'"x":[1,' + BIG_INT + b"]",
    b'"x":' + FINE_INT,  # accepted
    b'"x":NaN',  # accepted by json.loads, refused by msgspec and orjson
    b'"x":Infinity',
    b'"x":1e999',
    b'"x":"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x94\xa5"',  # valid UTF-8
    b'"x":"a\x01b"',  # a raw control character: refused
    b'"x":"\\q"',  # a bad escape: refused
    b'"x":01',  # a leading zero: refused
    b'"x":' + b"[" * 3000 + b"]" * 3000,  # too deep for json.loads: refused
    b'"x":' + b"[" * 1100 + b"]" * 1100,  # too deep for all three, short enough for msgspec
    b'"x":' + b"[" * 900 + b"]" * 900,  # deep but accepted
    b'"x":{"y":[null,true,false,{"z":""}]}',
    b'"message":"the second message wins"',  # a duplicate key: the last one counts
    b'"mess\\u0061ge":"escaped key"',
    b'"level":7',  # a field that is not a string: malformed
    b'"service":null',
]


_Q = LogsInput.model_validate(
    {"service": "svc", "start": HOUR, "end": HOUR + timedelta(hours=1), "limit": 9},
    strict=False,
)


def _line(ts: datetime, message: bytes, extra: bytes | None) -> bytes:
    stamp = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode()
    head = b'{"ts":"' + stamp + b'","service":"svc","level":"ERROR","message":"' + message + b'"'
    return head + (b"," + extra if extra else b"") + b',"trace_id":"' + b"ab" * 16 + b'"}'


def _lines(rng: random.Random, count: int, extra: bytes) -> list[bytes]:
    """Regular lines with ``extra`` in a few of them: a batch's only irregular lines are of
    that one shape, so the typed decode meets it alone (any other refusal would send the
    whole batch line by line and hide it)."""
    lines = []
    for n in range(count):
        ts = HOUR + timedelta(milliseconds=rng.randrange(3_600_000))
        message = f"charge {n % 7} failed for pay_{rng.randrange(10**6):06d}".encode()
        lines.append(_line(ts, message, extra if rng.random() < 0.002 else None))
    lines[rng.randrange(len(lines))] = _line(HOUR, b"hostile", extra)  # at least once
    return lines


def _reference(lines: list[bytes], q: LogsInput) -> tuple[Tally, list[tuple[datetime, str]], int]:
    tally, kept, malformed = Tally(Grid.for_window(q.start, q.end)), [], 0
    for raw in lines:
        try:
            obj = json.loads(raw)
            fields = [obj[k] for k in ("ts", "service", "level", "message")]
        except (ValueError, KeyError, RecursionError):
            malformed += 1
            continue
        if not all(isinstance(v, str) for v in fields):
            malformed += 1
            continue
        ts = datetime.fromisoformat(fields[0]).astimezone(UTC)
        tally.add(ts, fields[3])
        kept.append((ts, fields[3]))
    return tally, kept, malformed


@pytest.mark.parametrize("extra", EXTRAS, ids=range(len(EXTRAS)))
def test_hostile_attributes_are_read_as_json_loads_reads_them(extra: bytes, tmp_path: Path) -> None:
    rng = random.Random(extra)
    lines = _lines(rng, 4_000, extra)
    path = tmp_path / "svc" / "2026-11-28" / "10.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    scanned = scan_window(NEVER, tmp_path, _Q, 30.0)
    reference, kept, malformed = _reference(lines, _Q)
    assert scanned.page is not None
    assert scanned.malformed == malformed
    assert scanned.page.summary == reference.summary(exact=True)
    newest = sorted(kept, key=lambda row: row[0], reverse=True)[:9]
    assert [(r.ts, r.message) for r in scanned.page.items] == newest


def test_the_cases_hold_both_kinds_of_line() -> None:
    """The shapes above are not all refused nor all accepted (the test would prove little)."""
    verdicts = {len(_reference([_line(HOUR, b"m", extra)], _Q)[1]) for extra in EXTRAS}
    assert verdicts == {0, 1}
