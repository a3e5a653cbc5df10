"""One exception tree (plugin/errors.py draws it): every exception class of the product is
defined in an ``errors`` module and derives from the one root; only the run-stop signals are not
``Exception``s."""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path

import pytest

from sre_diag.errors import DiagError, RunStop, SreDiagException

PACKAGE = Path(__file__).resolve().parents[2] / "plugin"


def _module_names() -> list[str]:
    names = []
    for folder, _dirs, files in os.walk(PACKAGE, followlinks=True):
        for file in files:
            if file.endswith(".py") and file != "__main__.py":
                path = Path("sre_diag") / (Path(folder) / file).relative_to(PACKAGE)
                parts = list(path.with_suffix("").parts)
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _module_names():
        module = importlib.import_module(name)
        for _attr, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


CLASSES = _exception_classes()


def test_the_tree_has_classes() -> None:
    assert len(CLASSES) > 10


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_defined_in_an_errors_module_under_the_root(name: str) -> None:
    cls = CLASSES[name]
    assert cls.__module__.rpartition(".")[2] == "errors", f"{name} is not in an errors module"
    assert issubclass(cls, SreDiagException), f"{name} does not derive from SreDiagException"
    if issubclass(cls, RunStop):
        assert not issubclass(cls, Exception), "a run stop must not be swallowed as an Exception"
    elif cls is not SreDiagException:
        assert issubclass(cls, DiagError), f"{name} is neither an error nor a run stop"


def test_the_drawing_names_exactly_the_errors_modules() -> None:
    """The tree drawn in ``sre_diag/errors.py`` names every package's ``errors`` module and no
    module that does not exist."""
    import re

    import sre_diag.errors

    drawn = set(re.findall(r"([a-z_.]+)\.errors\.\*", sre_diag.errors.__doc__ or ""))
    real = {
        name.removeprefix("sre_diag.").removesuffix(".errors")
        for name in _module_names()
        if name.endswith(".errors") and name != "sre_diag.errors"
    }
    assert drawn == real
