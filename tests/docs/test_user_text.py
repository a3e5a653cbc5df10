"""What a user reads (README, SECURITY.md, every page under docs/) carries no development history
and no internal vocabulary: no issue numbers, no "stop N", no measurement diaries, no pointer to
a document that does not ship; and no line over 300 characters outside code blocks. Developer
material belongs in CONTRIBUTING.md, history in CHANGELOG.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINE = 300

# Each pattern names a class of process wording, matched case-insensitively.
PROCESS_WORDS: dict[str, str] = {
    "issue number": r"\bissues?\s*#?\s*\d+",
    "pull request number": r"\b(?:pr|pull request)\s*#?\s*\d+",
    "stop number": r"\bstop\s+#?\d+\b",
    "measurement diary": r"\bre-?measured\b|\bre-?ran\b|\bre-run on\b",
    "machine state": r"\bquiet machine\b|\bload average\b|\bloaded machine\b|\bshared cores\b",
    "work session": r"(?<![\w-])sessions?(?![\w-])",
    "unshipped document": r"\bCONTRACTS\b|§\s*\d+|\bDESIGN\.md\b|\bFAULTS\.md\b|\bspec/",
    "placeholder": r"\bTODO\b|\bFIXME\b|\bXXX\b|\bTBD\b",
}
_FENCE = re.compile(r"^\s*(```|~~~)")


def user_texts() -> list[Path]:
    """The files a user of the product reads."""
    return [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            found.append((number, line))
    return found


def process_words(text: str) -> list[str]:
    """Every process word in the text, code blocks included (a code block is read too)."""
    hits = []
    for kind, pattern in PROCESS_WORDS.items():
        for match in re.finditer(pattern, text, flags=re.IGNORECASE):
            hits.append(f"{kind}: {match.group(0)!r}")
    return hits


def long_lines(text: str) -> list[str]:
    return [
        f"line {n}: {len(line)} characters" for n, line in prose_lines(text) if len(line) > MAX_LINE
    ]


@pytest.mark.parametrize("path", user_texts(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_process_words(path: Path) -> None:
    hits = process_words(path.read_text(encoding="utf-8"))
    assert not hits, f"{path.relative_to(REPO)}: {hits}"


@pytest.mark.parametrize("path", user_texts(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_long_lines_outside_code(path: Path) -> None:
    found = long_lines(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(REPO)}: {found}"


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"


def test_user_text_is_found() -> None:
    """The scans above read real files: the README and a dozen pages."""
    paths = user_texts()
    assert all(p.is_file() for p in paths)
    assert len(paths) >= 15


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Suite time (issue 23): 8 min", "issue number"),
        ("as of Issue #7 this holds", "issue number"),
        ("fixed in stop 31", "stop number"),
        ("Re-measured on 2026-12-03", "measurement diary"),
        ("on a quiet machine it passes", "machine state"),
        ("under a load average of 2", "machine state"),
        ("in this session we changed", "work session"),
        ("names and defaults are in CONTRACTS §2", "unshipped document"),
        ("see §9 for the format", "unshipped document"),
    ],
)
def test_the_scan_catches_each_kind(text: str, kind: str) -> None:
    assert any(hit.startswith(kind) for hit in process_words(text)), (text, kind)


@pytest.mark.parametrize(
    "text",
    [
        "`--session-id ID` groups runs; `session_id` is in the result",
        "columns such as sessionid are secret",
        "the stop reason is INFORMATION_SATURATED",
        "an issue with the token: see Troubleshooting",
    ],
)
def test_the_scan_leaves_product_words_alone(text: str) -> None:
    assert process_words(text) == []


def test_long_lines_in_code_blocks_are_allowed() -> None:
    text = "prose\n```json\n" + "x" * 400 + "\n```\n" + "y" * 301 + "\n"
    assert long_lines(text) == ["line 5: 301 characters"]
