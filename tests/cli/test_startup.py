"""``sre_diag.commands.startup``: imports run with the collector paused, and it runs again after."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path

from sre_diag.commands.startup import imports_without_gc


def test_the_collector_is_paused_inside_and_running_after() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with imports_without_gc():
        assert not gc.isenabled()
        kept = [object() for _ in range(10)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(kept)
    gc.unfreeze()  # give this test process its objects back


def test_a_collector_already_off_is_left_off() -> None:
    gc.disable()
    frozen = gc.get_freeze_count()
    try:
        with imports_without_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.enable()


def test_the_command_line_runs_with_the_collector_on(tmp_path: Path) -> None:
    """``python -m sre_diag`` loads its modules frozen, then collects as usual."""
    code = (
        "import gc, runpy, sys; sys.argv = ['sre_diag', '--help']\n"
        "try:\n    runpy.run_module('sre_diag', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)"
    )
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == "True True"


def test_garbage_from_before_the_block_is_freed_not_frozen() -> None:
    """A process that runs commands in-process again and again must not freeze its garbage."""

    class Node:
        pass

    cycle = Node()
    cycle.me = cycle  # type: ignore[attr-defined]
    gone = weakref.ref(cycle)
    del cycle
    try:
        with imports_without_gc():
            pass
        assert gone() is None
    finally:
        gc.unfreeze()
