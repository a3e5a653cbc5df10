"""``eval`` cases: a folder with ``case.json`` (:class:`CaseSpec`, what to ask and what to
expect) and its own evidence (``runbooks/``, ``logs/``, ``mysql.sql``), and its cassettes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from sre_diag.commands.errors import EvalUsageError
from sre_diag.contract.request import PreviousTurn
from sre_diag.log import failure_reason

__all__ = [
    "CASE_FILE",
    "DEFAULT_CASSETTE",
    "MYSQL_FILE",
    "Case",
    "CaseSpec",
    "EvalUsageError",
    "Expect",
    "discover_cases",
]


CASE_FILE = "case.json"
DEFAULT_CASSETTE = "cassette.json"
MYSQL_FILE = "mysql.sql"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Phrase = Annotated[str, Field(min_length=1, max_length=200)]
ToolLiteral = Literal["lookup_knowledge", "query_logs", "query_mysql"]


class Expect(_Strict):
    """What a case scores; an absent key is not scored."""

    outcome: Literal["DRAFT", "STOPPED", "ANY"] | None = None
    conclusion: Literal["REQUIRED", "NULL", "ANY"] | None = None
    root_cause_any: tuple[Phrase, ...] | None = None
    root_cause_all: tuple[Phrase, ...] | None = None
    must_not_mention: tuple[Phrase, ...] | None = None
    must_cite_tools: tuple[ToolLiteral, ...] | None = None
    max_tool_calls: Annotated[int, Field(ge=0)] | None = None


class CaseSpec(_Strict):
    """``case.json`` (CONTRACTS §9); ``note`` is free text for humans, never scored."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    query: Annotated[str, Field(min_length=1)]
    asked_at: AwareDatetime | None = None
    previous_turn: PreviousTurn | None = None
    expect: Expect = Expect()
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Case:
    folder: Path
    spec: CaseSpec | None
    problem: str | None = None
    """Why the case cannot run (its ``case.json`` is unreadable or invalid)."""

    @property
    def case_id(self) -> str:
        return self.spec.id if self.spec is not None else self.folder.name

    @property
    def needs_mysql(self) -> bool:
        return (self.folder / MYSQL_FILE).is_file()

    def optional_dir(self, name: str) -> str:
        """The folder as a setting value, or ``""`` (unset: that tool is NOT_CONFIGURED)."""
        path = self.folder / name
        return str(path.resolve()) if path.is_dir() else ""

    def cassettes(self) -> list[tuple[str | None, Path]]:
        """``cassette.json`` (variant None) first, then ``cassette.<variant>.json`` by name."""
        found: list[tuple[str | None, Path]] = []
        if (self.folder / DEFAULT_CASSETTE).is_file():
            found.append((None, self.folder / DEFAULT_CASSETTE))
        for path in sorted(self.folder.glob("cassette.*.json")):
            found.append((path.name[len("cassette.") : -len(".json")], path))
        return found


def _load_case(folder: Path) -> Case:
    try:
        text = (folder / CASE_FILE).read_text(encoding="utf-8")
        return Case(folder, CaseSpec.model_validate_json(text))
    except (OSError, UnicodeDecodeError) as exc:
        return Case(folder, None, f"case.json unreadable ({failure_reason(exc)})")
    except ValidationError as exc:
        where = ", ".join(
            ".".join(str(part) for part in error["loc"]) or "case.json" for error in exc.errors()
        )
        return Case(folder, None, f"case.json invalid at: {where}"[:300])


def _case_folders(root: Path) -> list[Path]:
    if (root / CASE_FILE).is_file():
        return [root]
    found: list[Path] = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith((".", "__")):
            found.extend(_case_folders(child))
    return found


def discover_cases(paths: Sequence[str]) -> list[Case]:
    """Each PATH is a case folder or a folder of case folders (searched recursively)."""
    folders: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise EvalUsageError(f"not a folder: {raw}")
        found = _case_folders(path)
        if not found:
            raise EvalUsageError(f"no {CASE_FILE} under {raw}")
        folders.extend(f for f in found if f not in folders)
    return [_load_case(folder) for folder in folders]


# --- scoring ----------------------------------------------------------------------------------
