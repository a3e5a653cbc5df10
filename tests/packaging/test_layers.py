"""The layers of ``sre_diag`` (the ``plugin/`` folder) read bottom-up; imports point down.

Every import counts: module level, inside functions, and under ``TYPE_CHECKING``. A module may
import its own layer or a lower one, never a higher one, and no two modules may import each other
through any chain (no cycles). ``plugin/__init__.py`` (the public facade) and ``__main__`` sit
above everything and are not checked as importers.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "plugin"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "aio", "log", "http_bounds", "resources", "doubles"),
    ("contract",),
    ("settings",),
    ("tools",),
    ("harness",),
    ("audit",),
    ("wiring",),
    ("slack",),
    ("service",),
    ("commands",),
)
"""Bottom first. ``settings`` sits above ``contract`` because it checks ``DIAG_PROMPT`` against
the bundled prompt files; ``tools`` import nothing of the product but ``errors``/``contract``-free
values of their own."""

RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules() -> Iterator[tuple[str, Path]]:
    """Every module of the installed layout, ``sre_diag.tools`` included (a link to ``tools/``)."""
    for folder, _dirs, files in os.walk(PACKAGE, followlinks=True):
        for file in sorted(files):
            if file.endswith(".py"):
                path = Path(folder) / file
                parts = ["sre_diag", *path.relative_to(PACKAGE).with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
                yield ".".join(parts), path


MODULES = dict(_modules())


def _is_package_of(parent: str, child: str) -> bool:
    return child.startswith(parent + ".")


def _imports(module: str, path: Path) -> set[str]:
    """The product modules ``module`` imports, anywhere in its file."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {
        name
        for name in found
        if name in MODULES and name != module and not _is_package_of(name, module)
    }


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*parts, *([node.module] if node.module else [])])


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _rank(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def test_every_product_module_has_a_layer() -> None:
    top = ("sre_diag", "sre_diag.__main__")
    unplaced = [m for m in MODULES if m not in top and _rank(m) is None]
    assert unplaced == []


def test_nothing_imports_a_top_level_tools_package() -> None:
    """The evidence adapters are ``sre_diag.tools``; a host's own ``tools`` must never be ours."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [(module, n) for n in names if n == "tools" or n.startswith("tools.")]
    assert offenders == []


def test_imports_only_point_down() -> None:
    upward = sorted(
        (importer, imported)
        for importer, imports in GRAPH.items()
        for imported in imports
        if _rank(importer) is not None
        and _rank(imported) is not None
        and _rank(imported) > _rank(importer)  # type: ignore[operator]
    )
    assert upward == []


def _reachable(start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for imported in GRAPH[todo.pop()]:
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen


def _cycles() -> list[tuple[str, str]]:
    """Every import ``a -> b`` where ``b`` leads back to ``a``."""
    return sorted((a, b) for a, imports in GRAPH.items() for b in imports if a in _reachable(b))


def test_no_import_cycles() -> None:
    """A package importing its submodules and a submodule importing its package's facade are
    the one allowed pair (Python resolves them), so edges to a module's own parent packages
    are left out; any other chain back is a cycle."""
    assert _cycles() == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_is(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{module} has no module docstring"
