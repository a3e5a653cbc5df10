"""A command's start: its modules load with the cyclic garbage collector paused.

Importing LlamaIndex, the OpenAI SDK and the product builds some 400,000 objects (pydantic
models, their schemas and validators), nearly all of them alive until the process ends. With
the collector running, every full collection during the imports walks all the objects built so
far: measured on ``diagnose`` (2 cores, issue 23), that was ~0.45 s of its ~2.5 s from process
start to the first model request. :func:`imports_without_gc` pauses the collector for the
imports and then freezes what they built (``gc.freeze``: moved out of the collected
generations, so later collections never walk it again); the collector runs as before for
everything built afterwards. The cost: the few cyclic leftovers of the imports themselves are
never freed (about 6 MB of maximum RSS measured). Garbage from BEFORE the block is collected
first (cheap where it matters: at a command's start little exists that is not frozen yet), so
a host or a test process that runs commands in-process again and again does not freeze its
own garbage for good each time.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["imports_without_gc"]


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """Run the block (module imports) with the collector paused, then freeze what it built.

    Does nothing when the collector is already off (an outer block, or a caller that manages
    the collector itself).
    """
    if not gc.isenabled():
        yield
        return
    gc.collect()  # what is garbage already is freed, never frozen
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
