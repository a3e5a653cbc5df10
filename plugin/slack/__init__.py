"""The Slack Bolt plugin: ``register(app)`` mounts the diagnosis listeners on an existing AsyncApp.

::

    app = AsyncApp(token=..., signing_secret=...)
    handle = sre_diag.slack.register(app)        # or sre_diag.register(app)
    ...
    await handle.drain()                        # on shutdown: finish runs, post their outcome
    await handle.close()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sre_diag.slack.listeners import REPLAY_CALLBACK_ID
    from sre_diag.slack.messages import DIAGNOSE_CALLBACK_ID
    from sre_diag.slack.mount import (
        PluginHandle,
        add_retry_handlers,
        register,
        require_admin_channels,
    )
    from sre_diag.slack.progress import StatusBudget

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
# package (``sre_diag.slack.metrics`` for the ops endpoints, ``sre_diag.slack.gate``) does not load
# the harness and LlamaIndex behind ``register``.
_HOMES = {
    "DIAGNOSE_CALLBACK_ID": "sre_diag.slack.messages",
    "REPLAY_CALLBACK_ID": "sre_diag.slack.listeners",
    "PluginHandle": "sre_diag.slack.mount",
    "StatusBudget": "sre_diag.slack.progress",
    "add_retry_handlers": "sre_diag.slack.mount",
    "register": "sre_diag.slack.mount",
    "require_admin_channels": "sre_diag.slack.mount",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
