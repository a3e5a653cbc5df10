"""Prompts are files under ``prompts/``, loaded by name; no prompt text lives in code.

They are read through ``importlib.resources`` (installed as ``plugin.resources.prompts``).
"""

from __future__ import annotations

from functools import cache

from plugin.draft import draft_json_schema
from plugin.resources import prompt_file

__all__ = ["load_prompt", "system_prompt"]

_SCHEMA_SLOT = "{{DRAFT_SCHEMA}}"


@cache
def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.md``."""
    return prompt_file(name).read_text(encoding="utf-8")


@cache
def system_prompt() -> str:
    """The single Chinese system prompt with the Draft's generated schema filled in."""
    template = load_prompt("diagnosis_system.zh")
    if _SCHEMA_SLOT not in template:
        raise RuntimeError("system prompt has no schema slot")
    return template.replace(_SCHEMA_SLOT, draft_json_schema())
