"""Data the product ships: prompts, Slack app manifest, demo incident, eval suite, sample event.

In the repository they stay at the top level (``prompts/``, ``examples/incident/``,
``examples/evals/``, ``examples/slack/``, ``manifest.yaml``, ``manifest.http.yaml``); the build
maps them into this package (``[tool.setuptools.package-dir]`` in pyproject:
``sre_diag.resources.prompts`` is ``prompts/``, ``sre_diag.resources.incident`` is
``examples/incident/``, ``sre_diag.resources.evals`` is ``examples/evals/``,
``sre_diag.resources.slack`` is ``examples/slack/``; the manifests here link to the top-level
files), so a wheel, an sdist build and the editable install all find them through
``importlib.resources``, never through a path relative to the source tree.
``python -m sre_diag.resources NAME`` prints where one of them is installed (for shell use:
``sre-diag eval --replay "$(python -m sre_diag.resources evals)"``).

The bundled incident is demo data: only ``demo`` (and ``eval``) point the tools at it. Unset
``DIAG_KNOWLEDGE_DIR`` / ``DIAG_LOGS_SOURCE`` mean ``NOT_CONFIGURED``, never the demo data.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = [
    "BUNDLED_CASSETTES",
    "BUNDLED_INCIDENT",
    "BUNDLED_KNOWLEDGE",
    "BUNDLED_LOGS",
    "BUNDLED_MYSQL",
    "bundled_evals",
    "manifest_path",
    "manifest_text",
    "prompt_file",
    "sample_slack_event",
]

_PROMPTS = "sre_diag.resources.prompts"
_INCIDENT = "sre_diag.resources.incident"
_EVALS = "sre_diag.resources.evals"
_SLACK = "sre_diag.resources.slack"


def _on_disk(resource: Traversable, what: str) -> Path:
    """The resource as a real folder (the tools read folders); installs are unpacked on disk."""
    if isinstance(resource, Path) and resource.is_dir():
        return resource
    raise RuntimeError(f"the bundled {what} is not an unpacked folder: {resource}")


def prompt_file(name: str) -> Traversable:
    """``prompts/<name>.md`` as installed."""
    return files(_PROMPTS) / f"{name}.md"


def manifest_path(http: bool = False) -> Path:
    """The Slack app manifest as installed: ``manifest.yaml`` (Socket Mode), or with ``http``
    ``manifest.http.yaml`` (``serve --http``: request URLs instead of Socket Mode)."""
    resource = files(__name__) / ("manifest.http.yaml" if http else "manifest.yaml")
    if isinstance(resource, Path) and resource.is_file():
        return resource
    raise RuntimeError(f"the bundled Slack app manifest is not an unpacked file: {resource}")


def manifest_text(http: bool = False) -> str:
    """The text of :func:`manifest_path`."""
    return manifest_path(http).read_text(encoding="utf-8")


BUNDLED_INCIDENT: Path = _on_disk(files(_INCIDENT), "incident")
BUNDLED_KNOWLEDGE: Path = BUNDLED_INCIDENT / "runbooks"
BUNDLED_LOGS: Path = BUNDLED_INCIDENT / "logs"
BUNDLED_CASSETTES: Path = BUNDLED_INCIDENT / "cassettes"
BUNDLED_MYSQL: Path = BUNDLED_INCIDENT / "mysql"


def bundled_evals() -> Path:
    """The bundled eval suite's folder (``examples/evals/``), as installed."""
    return _on_disk(files(_EVALS), "eval suite")


def sample_slack_event() -> Path:
    """The sample Slack event envelope (``examples/slack/app_mention.json``), as installed."""
    return _on_disk(files(_SLACK), "sample Slack event") / "app_mention.json"
