"""The Slack Bolt plugin: ``register(app)`` mounts the diagnosis listeners on an existing AsyncApp.

::

    app = AsyncApp(token=..., signing_secret=...)
    handle = plugin.slack.register(app)        # or plugin.register(app)
    ...
    await handle.drain()                        # on shutdown: finish runs, post their outcome
    await handle.close()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plugin.slack.listeners import REPLAY_CALLBACK_ID
    from plugin.slack.messages import DIAGNOSE_CALLBACK_ID
    from plugin.slack.mount import (
        PluginHandle,
        add_retry_handlers,
        register,
        require_admin_channels,
    )
    from plugin.slack.progress import StatusBudget

__all__ = [
    "DIAGNOSE_CALLBACK_ID",
    "REPLAY_CALLBACK_ID",
    "PluginHandle",
    "StatusBudget",
    "add_retry_handlers",
    "register",
    "require_admin_channels",
]

# Where each public name lives. They are imported on first use, so importing one module of the
# package (``plugin.slack.metrics`` for the ops endpoints, ``plugin.slack.gate``) does not load
# the harness and LlamaIndex behind ``register``.
_HOMES = {
    "DIAGNOSE_CALLBACK_ID": "plugin.slack.messages",
    "REPLAY_CALLBACK_ID": "plugin.slack.listeners",
    "PluginHandle": "plugin.slack.mount",
    "StatusBudget": "plugin.slack.progress",
    "add_retry_handlers": "plugin.slack.mount",
    "register": "plugin.slack.mount",
    "require_admin_channels": "plugin.slack.mount",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
