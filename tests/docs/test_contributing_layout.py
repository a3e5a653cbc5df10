"""CONTRIBUTING's Layout section matches the tree: every package under ``plugin/`` has a line, each
line starts with the first paragraph of its package's docstring, and every module or folder it
names exists. A renamed module or a reworded package docstring fails here until
CONTRIBUTING.md follows.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
_ENTRY = re.compile(r"^- `(?P<path>[^`]+/)` — (?P<text>.*)$")
_NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
_NOTE = re.compile(r"\([^()]*\)")


@dataclass(frozen=True)
class Entry:
    """One bullet of the Layout section: its folder and its text (continuation lines joined)."""

    path: str
    text: str

    @property
    def modules(self) -> list[str]:
        """The names after ``Modules:`` written as `name`, outside parentheses (notes)."""
        _, marker, rest = self.text.partition("Modules:")
        while _NOTE.search(rest):
            rest = _NOTE.sub("", rest)
        return _NAME.findall(rest) if marker else []


def _layout_lines() -> list[str]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.splitlines()


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    for line in _layout_lines():
        match = _ENTRY.match(line)
        if match:
            entries.append(Entry(match["path"], match["text"]))
        elif line.startswith("  ") and entries:
            last = entries.pop()
            entries.append(Entry(last.path, f"{last.text} {line.strip()}"))
    return entries


def _summary(package: Path) -> str:
    """The first paragraph of the package docstring, one line, RST ``x`` written as `x`."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"{package} has no docstring"
    paragraph = doc.split("\n\n", 1)[0]
    return " ".join(paragraph.split()).replace("``", "`")


def _packages() -> set[str]:
    found = {"plugin/"}
    for init in PLUGIN.rglob("__init__.py"):
        rel = init.parent.relative_to(REPO).as_posix()
        if "__pycache__" not in rel and not rel.startswith("plugin/resources/"):
            found.add(f"{rel}/")
    found.update(f"plugin/{p.name}/" for p in PLUGIN.iterdir() if p.is_symlink() and p.is_dir())
    return found


def test_every_package_has_a_line() -> None:
    listed = {entry.path for entry in _entries()}
    missing = sorted(_packages() - listed)
    assert not missing, f"CONTRIBUTING Layout lacks a line for {missing}"


def test_every_listed_folder_exists() -> None:
    for entry in _entries():
        assert (REPO / entry.path).is_dir(), (
            f"CONTRIBUTING Layout names {entry.path}: no such folder"
        )


def test_each_package_line_starts_with_its_docstring() -> None:
    for entry in _entries():
        folder = REPO / entry.path
        if entry.path.startswith("plugin/") and (folder / "__init__.py").is_file():
            summary = _summary(folder)
            assert entry.text.startswith(summary), (
                f"CONTRIBUTING Layout, {entry.path}: must start with its docstring's first"
                " paragraph\n"
                f"  docstring:    {summary}\n  CONTRIBUTING: {entry.text[: len(summary) + 20]}"
            )


def test_every_named_module_exists() -> None:
    for entry in _entries():
        folder = REPO / entry.path
        for name in entry.modules:
            exists = (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()
            assert exists, f"CONTRIBUTING Layout, {entry.path}: no module {name}"


def test_the_package_lines_name_modules() -> None:
    """The check above has something to check: each package line lists its modules."""
    packages = [e for e in _entries() if e.path.startswith("plugin/")]
    assert len(packages) >= 10
    assert all(entry.modules for entry in packages), [e.path for e in packages if not e.modules]
