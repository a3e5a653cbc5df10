"""Evidence-bound incident diagnosis: the harness, the CLI and the Slack Bolt plugin.

``plugin.register(app, settings=None)`` mounts the diagnosis listeners on an existing Bolt
``AsyncApp`` (imported lazily, so the harness alone never loads Slack). ``plugin.Harness`` runs
one diagnosis without Slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plugin.harness.run import Harness
    from plugin.slack import PluginHandle, register

__all__ = ["Harness", "PluginHandle", "register"]


def __getattr__(name: str) -> Any:
    if name in {"register", "PluginHandle"}:
        import plugin.slack

        return getattr(plugin.slack, name)
    if name == "Harness":
        from plugin.harness.run import Harness

        return Harness
    raise AttributeError(name)
