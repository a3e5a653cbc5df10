"""The generated reference pages match the code: regenerated in memory, they must equal the
committed pages (a setting, an option or a code added without running
``scripts/gen_reference.py`` fails here), and the user text names no setting that does not exist.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from enum import StrEnum
from pathlib import Path
from types import ModuleType

import pytest

from sre_diag.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", REPO / "scripts/gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reference", module)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("name", sorted(GEN.PAGES))
def test_committed_page_matches_the_code(name: str) -> None:
    page = REPO / "docs" / "reference" / name
    expected = GEN.PAGES[name]()
    assert page.is_file(), f"{page} missing: run .venv/bin/python scripts/gen_reference.py"
    assert page.read_text(encoding="utf-8") == expected, (
        f"docs/reference/{name} differs from the code: run "
        ".venv/bin/python scripts/gen_reference.py and commit the result"
    )


def test_every_setting_is_on_the_configuration_page() -> None:
    page = (REPO / "docs/reference/configuration.md").read_text(encoding="utf-8")
    for name, info in Settings.model_fields.items():
        env = GEN._env_name(info, name)
        assert f"| `{env}` |" in page, f"{env} ({name}) is not in the configuration reference"


def _documented_in_code() -> dict[str, str]:
    """Environment name → the field's own description or docstring (empty when it has none)."""
    docstrings = GEN._attribute_docstrings(Settings)
    return {
        GEN._env_name(i, n): i.description or docstrings.get(n, "")
        for n, i in Settings.model_fields.items()
    }


def test_every_setting_has_a_meaning() -> None:
    missing = [
        env
        for env, doc in _documented_in_code().items()
        if not (doc or GEN.texts.SETTINGS.get(env))
    ]
    assert not missing, f"settings without a description: {missing}"


def test_setting_meanings_are_kept_in_one_place() -> None:
    """A meaning in reference_texts.SETTINGS is only for a real setting whose field has no
    docstring: once the field gets one (or the setting goes), the entry must go."""
    code = _documented_in_code()
    stale = sorted(env for env in GEN.texts.SETTINGS if env not in code or code[env])
    assert not stale, f"remove from scripts/reference_texts.py SETTINGS: {stale}"


_SETTING_NAME = re.compile(r"\b((?:DIAG|OPENAI|SLACK)_[A-Z0-9_]+)\b")
# Names a user text may use that are not settings of the product (the test runner's).
_NOT_SETTINGS = {"DIAG_TEST_WORKERS"}
# Settings the product's contract names that other branches are adding while these pages are
# written. Each must become a real setting: once it is one, this test fails until the name is
# removed from here (and the configuration page regenerated).
_CONTRACT_PENDING: set[str] = set()


def _user_texts() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _code_values() -> set[str]:
    """Codes that look like setting names (``SLACK_RETRY``)."""
    values: set[str] = set()
    for _title, _intro, path, _texts in GEN._ENUMS + GEN._LATER_ENUMS:
        enum = GEN._enum(path)
        values |= {str(m.value) for m in enum} if enum is not None else set()
    return values


def _settings() -> set[str]:
    return {GEN._env_name(i, n) for n, i in Settings.model_fields.items()}


def test_pending_settings_are_still_pending() -> None:
    landed = sorted(_CONTRACT_PENDING & _settings())
    assert not landed, f"now real settings, remove them from _CONTRACT_PENDING: {landed}"


def test_user_text_names_only_real_settings() -> None:
    known = _settings() | _NOT_SETTINGS | _code_values() | _CONTRACT_PENDING
    for path in _user_texts():
        named = set(_SETTING_NAME.findall(path.read_text(encoding="utf-8")))
        unknown = sorted(n for n in named - known if not n.endswith("_"))
        assert not unknown, f"{path.relative_to(REPO)} names settings that do not exist: {unknown}"


def test_the_scan_for_setting_names_finds_them() -> None:
    """The check above reads real names (not an empty match)."""
    named = set(_SETTING_NAME.findall((REPO / "docs/reference/configuration.md").read_text()))
    assert {"DIAG_MAX_MODEL_CALLS", "OPENAI_BASE_URL", "SLACK_BOT_TOKEN"} <= named


def test_a_setting_without_a_description_stops_the_generator() -> None:
    class Grown(Settings):
        brand_new: int = 1

    docstrings = GEN._attribute_docstrings(Grown)
    with pytest.raises(GEN.ReferenceError, match="brand_new"):
        GEN._meaning(Grown.model_fields["brand_new"], "brand_new", docstrings)


def test_a_code_without_a_meaning_stops_the_generator() -> None:
    class Grown(StrEnum):
        CANCELLED = "CANCELLED"
        BRAND_NEW = "BRAND_NEW"

    with pytest.raises(GEN.ReferenceError, match="BRAND_NEW"):
        GEN._rows([m.value for m in Grown], GEN.texts.STOP_REASONS, "Grown")


def test_every_code_enum_is_documented_with_every_member() -> None:
    page = (REPO / "docs/reference/codes.md").read_text(encoding="utf-8")
    for _title, _intro, path, _texts in GEN._ENUMS + GEN._LATER_ENUMS:
        enum = GEN._enum(path)
        assert enum is not None, path
        for member in enum:
            assert f"| `{member.value}` |" in page, f"{path}.{member.name} not in codes.md"


def test_every_command_and_option_is_on_the_cli_page() -> None:
    page = (REPO / "docs/reference/cli.md").read_text(encoding="utf-8")
    for name, _help, sub in GEN._subcommands(GEN._build_parser()):
        assert f"## `{name}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in {"-h", "--help"} and action.help != "==SUPPRESS==":
                    assert f"`{option}" in page, f"{name} {option} not in cli.md"


def test_the_parsers_own_options_are_documented() -> None:
    """``--version`` (the parser's own option) gets a row; help stays out."""
    parser = argparse.ArgumentParser(prog="sre-diag")
    parser.add_argument("--version", action="version", version="1")
    rows = [GEN._argument_row("sre-diag", a) for a in GEN._options(parser)]
    expected = [["`--version`", "print the version and exit", "-"]]
    assert [r for r in rows if r is not None] == expected
