"""Prompt files. Installed as the data package ``plugin.resources.prompts`` (see pyproject)."""
