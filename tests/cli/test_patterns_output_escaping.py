"""What ``sre-diag patterns`` prints cannot steer the terminal (issue 20, found by an attacking
review; FAULTS.md "Hostile text"): a log line's ESC sequences, other C0 controls (tab kept), DEL,
C1 controls, bidi controls and line separators are printed as visible escapes (``\\x1b``,
``\\u202e``: ``sre_diag.tools.plain.visible_controls``), and one input line is always exactly one
output line. Variants per class through the real command, an exhaustive check of the mapping,
and a property over arbitrary text through the same two steps the command takes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sre_diag.tools.logs.summary import window_patterns
from sre_diag.tools.plain import visible_controls
from tests.cli.test_cli import REPO

_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def _unsafe(ch: str) -> bool:
    """A character that must never reach the terminal raw from ``patterns``."""
    code = ord(ch)
    return (
        (code < 0x20 and ch != "\t")
        or 0x7F <= code <= 0x9F
        or code in _BIDI
        or code in {0x2028, 0x2029}
        or 0xD800 <= code <= 0xDFFF
    )


def _run(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "sre_diag", "patterns", *args], input=stdin, capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False,
    )  # fmt: skip


def _printed(done: subprocess.CompletedProcess[bytes], lines_in: int) -> list[str]:
    """The printed lines, after checking: exit 0, no traceback, one line out per line in, no
    unsafe character anywhere in stdout."""
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stdout + done.stderr
    text = done.stdout.decode("utf-8")  # strict: the output is valid UTF-8
    assert [ch for ch in text if _unsafe(ch) and ch != "\n"] == []
    assert text.count("\n") == lines_in and text.endswith("\n")
    printed = text.split("\n")[:-1]
    assert text.splitlines() == printed  # no \r, \x0b, \x0c, \x1c-\x1e, NEL, U+2028/9 left
    return printed


HOSTILE = {
    "osc-title": ("login ok \x1b]0;pwned\x07 user=7", ["\\x1b]", "\\x07"]),
    "osc-title-st": ("login ok \x1b]2;pwned\x1b\\ user=7", ["\\x1b]", "\\x1b\\"]),
    "osc8-link": (
        "see \x1b]8;;http://evil.example/\x1b\\here\x1b]8;;\x1b\\ 3",
        ["\\x1b]", ";;http://evil.example/\\x1b\\here"],
    ),
    "csi-clear": ("\x1b[2J\x1b[H screen cleared 42", ["\\x1b[", "J"]),
    "csi-colour": ("status \x1b[31mRED\x1b[0m end", ["\\x1b[", "m end"]),
    "csi-title-report": ("query \x1b[21t report", ["\\x1b[", "t report"]),
    "dcs": ("dcs \x1bP1$r0m\x1b\\ end", ["\\x1bP"]),
    "c1-csi": ("c1 csi \x9b2J then", ["\\x9b"]),
    "c1-osc-st": ("c1 osc \x9d0;title\x9c end", ["\\x9d", "\\x9c"]),
    "bell-backspace": ("bell\x07 back\x08\x08space", ["\\x07", "\\x08\\x08"]),
    "nul-del": ("nul\x00 del\x7f end", ["\\x00", "\\x7f"]),
    "bidi-override": ("user \u202eevil\u202c granted", ["\\u202e", "\\u202c"]),
    "bidi-embed": ("x \u202aa\u202bb\u202dc\u202c", ["\\u202a", "\\u202b", "\\u202d"]),
    "bidi-isolate": (
        "path \u2066/etc\u2069 \u2067rtl\u2069 \u2068fs\u2069",
        ["\\u2066", "\\u2069"],
    ),
    "bidi-marks": ("mark \u200fright\u200eleft\u061carabic", ["\\u200f", "\\u200e", "\\u061c"]),
    "carriage-return": ("everything ok\rFAILED overwritten", []),
    "vertical-tab-form-feed": ("a\x0bb\x0cc", []),
    "c0-separators": ("fs\x1cgs\x1drs\x1eus\x1f end", []),
    "next-line": ("first\x85second", []),
    "line-paragraph-separators": ("one\u2028two\u2029three", []),
    "escape-only": ("\x1b", ["\\x1b"]),
    "tab-kept": ("tab\tkept 2", []),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_line_is_one_escaped_line(name: str) -> None:
    line, visible = HOSTILE[name]
    stdin = f"before 1\n{line}\nafter 2\n".encode()
    printed = _printed(_run([], stdin), 3)
    assert printed[0] == "before <*>" and printed[2] == "after <*>"
    assert all(form in printed[1] for form in visible), printed[1]


def test_all_hostile_lines_at_once_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "hostile.log"
    path.write_bytes("\r\n".join(line for line, _ in HOSTILE.values()).encode())  # CRLF
    _printed(_run([str(path)]), len(HOSTILE))


def test_binary_input_is_read_with_replacement_and_escaped() -> None:
    noise = random.Random(20).randbytes(256 * 1024)  # NUL, ESC, C1 bytes, invalid UTF-8
    _printed(_run([], noise), noise.count(b"\n") + (not noise.endswith(b"\n")))


def test_every_c1_and_c0_byte_of_utf8_input_is_escaped() -> None:
    lines = [f"code {chr(c)} here" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c != 10]
    _printed(_run([], "\n".join(lines).encode() + b"\n"), len(lines))


@pytest.mark.parametrize(
    ("name", "shown"),
    [("app\x1b]0;pwned\x07.log", "app\\x1b]0;pwned\\x07.log"),
     ("app\u202egol.txt", "app\\u202egol.txt"),
     ("app\u2028.log", "app\\u2028.log"),
     (b"app\xff\xfe.log", "app\\xff\\xfe.log")],
)  # fmt: skip
def test_a_file_name_is_shown_escaped_in_the_refusal(tmp_path: Path, name: Any, shown: str) -> None:
    folder = os.fsencode(tmp_path)
    raw = name if isinstance(name, bytes) else name.encode()
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"sre_diag", b"patterns", folder + b"/" + raw],
        capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert shown in message and not any(_unsafe(ch) for ch in message), message


def test_the_mapping_of_every_code_point() -> None:
    every = "".join(chr(c) for c in range(0x110000))
    escaped = [visible_controls(ch) for ch in every]
    for ch, out in zip(every, escaped, strict=True):
        if not _unsafe(ch):
            assert out == ch
        elif ord(ch) < 0x100:
            assert out == f"\\x{ord(ch):02x}"
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            assert out == f"\\x{ord(ch) - 0xDC00:02x}"
        else:
            assert out == f"\\u{ord(ch):04x}"
    assert not any(_unsafe(ch) for ch in visible_controls(every))


_TEXT = st.text(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x1b", "[", "\x9b", "\r", "\x0b", "\x85", "\u2028", "\u202e", "\t",
                         "\x00", "\x7f", " ", "7", "="]),
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT.filter(lambda t: "\n" not in t), max_size=8))
def test_any_lines_give_one_safe_line_each(lines: list[str]) -> None:
    # The command's own two steps: the summary's patterns, then the output edge.
    printed = [visible_controls(p) for p in window_patterns(lines)]
    assert len(printed) == len(lines)
    joined = "".join(p + "\n" for p in printed)
    assert joined.splitlines() == printed
    assert not any(_unsafe(ch) for ch in joined if ch != "\n")
