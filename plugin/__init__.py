"""Evidence-bound incident diagnosis: the harness, the CLI and the Slack Bolt plugin.

``sre_diag.register(app, settings=None)`` mounts the diagnosis listeners on an existing Bolt
``AsyncApp`` (imported lazily, so the harness alone never loads Slack). ``sre_diag.Harness`` runs
one diagnosis without Slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sre_diag.harness.run import Harness
    from sre_diag.slack import PluginHandle, register

__all__ = ["Harness", "PluginHandle", "register"]


def __getattr__(name: str) -> Any:
    if name in {"register", "PluginHandle"}:
        import sre_diag.slack

        return getattr(sre_diag.slack, name)
    if name == "Harness":
        from sre_diag.harness.run import Harness

        return Harness
    raise AttributeError(name)
