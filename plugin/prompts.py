"""Prompts are files under ``prompts/``, loaded by name; no prompt text lives in code."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from plugin.draft import draft_json_schema

__all__ = ["PROMPTS_DIR", "load_prompt", "system_prompt"]

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
_SCHEMA_SLOT = "{{DRAFT_SCHEMA}}"


@cache
def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.md``."""
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8")


@cache
def system_prompt() -> str:
    """The single Chinese system prompt with the Draft's generated schema filled in."""
    template = load_prompt("diagnosis_system.zh")
    if _SCHEMA_SLOT not in template:
        raise RuntimeError("system prompt has no schema slot")
    return template.replace(_SCHEMA_SLOT, draft_json_schema())
