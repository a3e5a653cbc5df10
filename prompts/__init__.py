"""Prompt files. Installed as the data package ``sre_diag.resources.prompts`` (see pyproject)."""
