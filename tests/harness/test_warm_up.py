"""``warm_up`` (serve, worker): the framework's lazy parts loaded, the adapters warmed, and the
start's objects frozen so that no full collection walks them during a run (issue 23)."""

from __future__ import annotations

import gc
from pathlib import Path

import llama_index.core

from sre_diag.wiring import warm_up
from tests.conftest import StartServer
from tests.harness.support import harness


async def test_warm_up_primes_and_freezes_the_start(
    model_server: StartServer, tmp_path: Path
) -> None:
    built = harness(await model_server([]), tmp_path)
    try:
        gc.unfreeze()
        await warm_up(built)
        assert gc.get_freeze_count() > 0
        assert llama_index.core.global_tokenizer is not None  # a long history needs no load
    finally:
        gc.unfreeze()  # the test process's objects are collected again
