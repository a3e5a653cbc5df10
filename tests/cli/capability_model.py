"""Test helpers for ``check --model``: a scripted model server that refuses request features.

``CapabilityModelServer`` is the shipped :class:`ScriptedModelServer` plus one knob: ``refuse``
looks at each request body and, when it names a request key, the server answers that request
``400`` (an OpenAI-style error body, with a canary in its message that must never be printed)
WITHOUT using a script step. Every other request is served by the script as usual, so
``assert_complete`` still means "every step used, nothing beyond". ``received`` holds every
request body in arrival order (refused ones included) and ``authorizations`` the
``Authorization`` header of each.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from sre_diag.doubles.scripted_model import ScriptedModelServer

REPO = Path(__file__).resolve().parents[2]
RAW_ERROR_CANARY = "RAWBODY-CANARY-7731"

Refusal = Callable[[Mapping[str, Any]], str | None]


def never(body: Mapping[str, Any]) -> str | None:
    return None


def refuse_parallel_tool_calls(body: Mapping[str, Any]) -> str | None:
    """Like servers that do not know ``parallel_tool_calls``."""
    return "parallel_tool_calls" if "parallel_tool_calls" in body else None


def refuse_response_format_with_tools(body: Mapping[str, Any]) -> str | None:
    """Like servers that cannot combine structured output with tools."""
    return "response_format" if "response_format" in body and body.get("tools") else None


@dataclass
class CapabilityModelServer(ScriptedModelServer):
    refuse: Refusal = never
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()  # aiohttp keeps the body: the base handler reads it again
        self.received.append(body)
        self.authorizations.append(request.headers.get("Authorization", ""))
        param = self.refuse(body)
        if param is None:
            return await super()._handle(request)
        self.refused.append(body)
        error = {
            "message": f"Unrecognized request argument supplied: {param} {RAW_ERROR_CANARY}",
            "type": "invalid_request_error",
            "param": param,
            "code": "unsupported_parameter",
        }
        return web.json_response({"error": error}, status=400)


@dataclass
class Checked:
    code: int
    out: str
    err: str

    @property
    def report(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed

    @property
    def model(self) -> dict[str, Any]:
        found: dict[str, Any] = self.report["model"]
        return found

    def supported(self) -> dict[str, bool]:
        return {k: v["supported"] for k, v in self.model["capabilities"].items()}


async def run_check_model(
    tmp_path: Path, *flags: str, secrets: tuple[str, ...] = (), **env: str
) -> Checked:
    """``check --model`` as a process in a clean environment (nothing but the model configured
    besides a throwaway audit folder); no secret and no raw error body may reach its output."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "OPENAI_", "SLACK_"))
    }
    settings = {
        "DIAG_AUDIT_SINK": f"jsonl:{tmp_path / 'audit'}",
        "DIAG_CACHE_DIR": str(tmp_path / "cache"),
        **env,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sre_diag", "check", "--model", *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**clean, "PYTHONPATH": str(REPO), **settings}, cwd=tmp_path,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    result = Checked(process.returncode, out.decode(), err.decode())
    for secret in (*secrets, RAW_ERROR_CANARY):
        assert secret not in result.out + result.err
    assert "Traceback" not in result.out + result.err
    return result
