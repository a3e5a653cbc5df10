"""An OpenAI-compatible chat-completions endpoint on a real socket that writes like a real one.

It is the fragmenting fake Loki's server (``tests/tools/fake_loki.py``: answers in writes of
1–100 bytes, chunked, gzip; on demand a trickle, an endless body, a reset mid-body) answering
``POST /v1/chat/completions`` with the next scripted reply instead of Loki's API, so that the
model requests of a run and of ``check --model`` are read the way a real endpoint (or a proxy in
front of it) sends them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.tools.fake_loki import FakeLoki, Reply, json_reply, text_reply

__all__ = ["FakeModel", "chat_reply", "tool_call_reply"]


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-wire",
        "object": "chat.completion",
        "created": 1,
        "model": "wire-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def chat_reply(content: str) -> Reply:
    """A final text answer."""
    return json_reply(_completion({"role": "assistant", "content": content}, "stop"))


def tool_call_reply(call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
    """One tool call."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return json_reply(_completion(message, "tool_calls"))


@dataclass
class FakeModel(FakeLoki):
    """Answers each chat-completions request with the next of ``script`` (404 elsewhere)."""

    script: list[Reply] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.url + "v1"

    def answer(self, path: str, query: dict[str, str]) -> Reply:
        if path != "/v1/chat/completions":
            return text_reply("404 page not found", 404)
        if not self.script:
            return json_reply({"error": {"code": "script_exhausted"}}, 500)
        return self.script.pop(0)
