"""Prompts are files under ``prompts/``, loaded by name; no model-facing text lives in code.

A prompt set is three files in one language: ``diagnosis_system.<lang>.md`` (the system prompt,
with the ``{{DRAFT_SCHEMA}}`` slot), ``tools.<lang>.md`` (the tool descriptions, each with a
``{{CATALOGUE}}`` slot, and the catalogue texts) and ``hints.<lang>.md`` (one observation hint
per code). ``DIAG_PROMPT`` picks the set: ``zh`` (default), ``en``, or the path of a system
prompt file with the same slot; for a path ``<dir>/<name>.<x>.md`` the tool descriptions and
hints come from ``<dir>/tools.<x>.md`` / ``<dir>/hints.<x>.md`` when they exist, else from
``zh``. Each set is read and checked once per process.

The bundled files are read through ``importlib.resources`` (installed as
``sre_diag.resources.prompts``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

from sre_diag.contract.draft import draft_json_schema
from sre_diag.contract.errors import PromptError
from sre_diag.log import failure_reason
from sre_diag.resources import prompt_file

__all__ = [
    "BUNDLED_LANGUAGES",
    "CATALOGUE_SLOT",
    "ENTRIES_SLOT",
    "FIELD_SLOT",
    "HINT_CODES",
    "PromptError",
    "PromptSet",
    "load_prompt",
    "prompt_set",
    "system_prompt",
]

BUNDLED_LANGUAGES = ("zh", "en")
DEFAULT_LANGUAGE = "zh"
SCHEMA_SLOT = "{{DRAFT_SCHEMA}}"
CATALOGUE_SLOT = "{{CATALOGUE}}"
ENTRIES_SLOT = "{{ENTRIES}}"
FIELD_SLOT = "{{FIELD}}"

TOOL_NAMES = ("lookup_knowledge", "query_logs", "query_mysql")
HINT_CODES = (
    "INVALID_ENVELOPE",
    "PREVIOUS_OBSERVATION_REQUIRED",
    "PREVIOUS_OBSERVATION_MISMATCH",
    "DUPLICATE_CALL",
    "ONE_TOOL_PER_ROUND",
    "UNKNOWN_TOOL",
    "NOTHING_PENDING",
    "STOP_REQUIRED",
)
_TOOL_KEYS = (
    *TOOL_NAMES,
    *(f"{name}.catalogue" for name in TOOL_NAMES),
    *(f"{name}.unavailable" for name in TOOL_NAMES),
    "masked",
    "cut",
)
# A custom prompt file larger than this is refused (the bundled ones are ~5 KB).
_MAX_PROMPT_FILE_BYTES = 64 * 1024
_SECTION = re.compile(r"^## (\S+)[ \t]*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


@dataclass(frozen=True, slots=True)
class PromptSet:
    """The model-facing texts of one language: system prompt, tool texts, hints."""

    name: str
    system: str
    tools: Mapping[str, str]
    hints: Mapping[str, str]

    def description(self, tool: str, catalogue: str = "") -> str:
        """The tool's description with ``catalogue`` (already rendered) in its slot."""
        return self.tools[tool].replace(CATALOGUE_SLOT, catalogue).strip()


@cache
def load_prompt(name: str) -> str:
    """The text of the bundled ``prompts/<name>.md``."""
    return prompt_file(name).read_text(encoding="utf-8")


def system_prompt(choice: str = DEFAULT_LANGUAGE) -> str:
    """The system prompt of ``choice`` (see :func:`prompt_set`) with the Draft schema filled in."""
    return prompt_set(choice).system


@cache
def prompt_set(choice: str = DEFAULT_LANGUAGE) -> PromptSet:
    """The prompt set ``DIAG_PROMPT`` names: ``zh``, ``en`` or a system prompt file's path.

    Raises :class:`PromptError` when a file is missing, unreadable, too large, or lacks a slot
    or a section.
    """
    if choice in BUNDLED_LANGUAGES:
        return _assemble(
            choice,
            load_prompt(f"diagnosis_system.{choice}"),
            load_prompt(f"tools.{choice}"),
            load_prompt(f"hints.{choice}"),
        )
    path = Path(choice).expanduser()
    system = _read_custom(path)
    tools, hints = (
        load_prompt(f"tools.{DEFAULT_LANGUAGE}"),
        load_prompt(f"hints.{DEFAULT_LANGUAGE}"),
    )
    parts = path.name.split(".")
    if len(parts) >= 3 and parts[-1] == "md":
        language = parts[-2]
        if (path.parent / f"tools.{language}.md").is_file():
            tools = _read_custom(path.parent / f"tools.{language}.md")
        if (path.parent / f"hints.{language}.md").is_file():
            hints = _read_custom(path.parent / f"hints.{language}.md")
    return _assemble(str(path), system, tools, hints)


def _read_custom(path: Path) -> str:
    try:
        if not path.is_file():
            raise PromptError(f"DIAG_PROMPT: no prompt file at {path.name!r} (zh, en or a file)")
        if path.stat().st_size > _MAX_PROMPT_FILE_BYTES:
            raise PromptError(f"DIAG_PROMPT: {path.name!r} is larger than 64 KiB")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(
            f"DIAG_PROMPT: {path.name!r} unreadable ({failure_reason(exc)})"
        ) from None


def _assemble(name: str, system: str, tools_text: str, hints_text: str) -> PromptSet:
    if SCHEMA_SLOT not in system:
        raise PromptError(f"DIAG_PROMPT: the system prompt has no {SCHEMA_SLOT} slot")
    tools = _sections(tools_text, _TOOL_KEYS, "tools")
    for tool in TOOL_NAMES:
        if CATALOGUE_SLOT not in tools[tool]:
            raise PromptError(f"DIAG_PROMPT: the {tool} description has no {CATALOGUE_SLOT} slot")
        if ENTRIES_SLOT not in tools[f"{tool}.catalogue"]:
            raise PromptError(f"DIAG_PROMPT: {tool}.catalogue has no {ENTRIES_SLOT} slot")
    hints = _sections(hints_text, HINT_CODES, "hints")
    if any("\n" in hint for hint in hints.values()):
        raise PromptError("DIAG_PROMPT: every hint must be one line")
    return PromptSet(
        name=name,
        system=system.replace(SCHEMA_SLOT, draft_json_schema()),
        tools=MappingProxyType(tools),
        hints=MappingProxyType(hints),
    )


def _sections(text: str, keys: tuple[str, ...], what: str) -> dict[str, str]:
    """``## key`` sections of ``text`` (HTML comments dropped), each body stripped."""
    text = _COMMENT.sub("", text)
    found: dict[str, str] = {}
    heads = list(_SECTION.finditer(text))
    for head, following in zip(heads, [*heads[1:], None], strict=True):
        end = following.start() if following is not None else len(text)
        found[head.group(1)] = text[head.end() : end].strip()
    missing = [key for key in keys if not found.get(key)]
    if missing:
        raise PromptError(f"DIAG_PROMPT: the {what} file lacks section(s) {', '.join(missing)}")
    return {key: found[key] for key in keys}
