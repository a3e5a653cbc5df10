"""Where the runs happen, the process warms up before it says ready; a queueing front does not.

A worker's first job would otherwise build the runbook index and import the framework's lazy
parts on its event loop, stalling the heartbeats of its other runs; a ``serve --workers 0``
front runs no diagnosis, so warming a harness there only costs start-up time and memory.
Real processes, an own redis-server, the bundled runbooks copied under the test's folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sre_diag.doubles.recording_slack import RecordingSlackApi
from sre_diag.resources import BUNDLED_KNOWLEDGE
from tests.slack.redis_server import own_redis
from tests.slack.serve_support import ServeProcess, free_port, serve_env, wait_status
from tests.slack.support import MANIFEST_SCOPES


def _index_files(cache: Path) -> list[Path]:
    root = cache / "knowledge"
    return [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


async def test_a_worker_builds_its_runbook_index_before_it_is_ready(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    shutil.copytree(BUNDLED_KNOWLEDGE, runbooks)
    async with own_redis(tmp_path) as redis, RecordingSlackApi(scopes=MANIFEST_SCOPES) as slack:
        env = serve_env(
            tmp_path,
            DIAG_SLACK_API_URL=slack.base_url,
            DIAG_REDIS_URL=redis.url,
            DIAG_KNOWLEDGE_DIR=str(runbooks),
            DIAG_CACHE_DIR=str(tmp_path / "worker-cache"),
            OPENAI_BASE_URL="http://127.0.0.1:9/v1",  # never asked: no job is queued
        )
        worker = await ServeProcess.start(env, tmp_path, command=["worker"])
        try:
            await worker.wait_for_log("ready: up to")
            assert _index_files(tmp_path / "worker-cache"), worker.stderr[-3000:]
            port = free_port()
            front_env = {**env, "DIAG_CACHE_DIR": str(tmp_path / "front-cache")}
            front = await ServeProcess.start(
                front_env, tmp_path, http=True, port=port, extra=["--workers", "0"]
            )
            try:
                await wait_status(f"http://127.0.0.1:{port}/readyz", 200)
                assert not _index_files(tmp_path / "front-cache"), front.stderr[-3000:]
            finally:
                await front.aclose()
        finally:
            await worker.aclose()
    assert "Traceback" not in worker.stderr
