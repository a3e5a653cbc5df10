"""``check --model``: what the configured OpenAI-compatible endpoint can do (CONTRACTS §3).

Three small chat-completion requests, sent in this order, each bounded by one timeout (from
its own start to its whole answer; ``check`` gives it ``DIAG_MODEL_TIMEOUT_SECONDS``, at most
``MAX_PROBE_SECONDS``: a local model on CPU may need tens of seconds for its first answer), no
retries, a small ``max_tokens`` and ``temperature`` 0. While a probe waits, a progress line is
given every few seconds; each finding says how long its request took:

1. ``tool_calling`` — one tiny tool (``probe_echo``) and ``tool_choice`` naming it: a tool call
   must come back, naming that tool, whose arguments parse as a JSON object.
2. ``parallel_tool_calls`` — the same request plus ``parallel_tool_calls: false``: accepted
   unless the endpoint refuses it (any answer but 2xx). Every diagnosis request carries it
   (``sre_diag.harness.model.DiagnosisLLM``), so a refusal makes the model unusable here.
3. ``json_schema_with_tools`` — the real strict tool definitions (``tool_definitions(True)``, as
   the harness sends them under ``DIAG_STRUCTURED_OUTPUT=json_schema``) with the real Draft
   ``response_format`` (``draft_response_format()``) and ``tool_choice: "none"`` so that the
   answer is text: accepted, and the answer's content parses as JSON.

``usage`` is read from every 2xx answer of those requests (no request of its own): prompt and
completion tokens present as non-negative integers in each. ``max_tokens`` likewise: every
probe carries it, as every diagnosis request does (the completion tokens the run has left, at
most ``DIAG_MAX_DRAFT_BYTES``); it is accepted when a probe carrying it was answered, and
refused when the endpoint names it as the parameter it refuses — then no diagnosis can run.

A refused key (401/403), a 404 (wrong base URL path or unknown model), a timeout or an
unreachable endpoint stops the probing: the capabilities not reached are reported as not
probed. Endpoint errors are summarised as the HTTP status and a short code (the error body's
``code`` or ``type`` when it looks like an identifier, and its ``param`` when that names a key
of the request) — never the error message or the raw body. The API key only goes into the
``Authorization`` header.

Every answer (error bodies too) is read whole, decoded, within ``MAX_ANSWER_BYTES`` and within
the probe's bound from its start to its last byte (``sre_diag.http_bounds``): a larger answer
stops the probing with "answered more than N bytes", a body that cannot be decoded with
"answered a body that cannot be decoded" — never the body itself.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from sre_diag.http_bounds import AnswerTooLarge, bounded_client
from sre_diag.log import failure_reason

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_PROBE_SECONDS",
    "Capability",
    "Finding",
    "ModelReport",
    "probe_bodies",
    "probe_model",
    "probe_seconds",
    "progress_every",
]

MAX_PROBE_SECONDS = 120.0
"""The longest one probe request may wait, whatever ``DIAG_MODEL_TIMEOUT_SECONDS`` says."""
MAX_ANSWER_BYTES = 1024 * 1024
"""The most one probe answer may carry, decoded (the answers asked for are a few hundred bytes:
``max_tokens`` is small)."""
_PROGRESS_EVERY_SECONDS = (1.0, 5.0)  # between progress lines: bound/10, within these

PROBE_TOOL = "probe_echo"
TOOL_MAX_TOKENS = 64
DRAFT_MAX_TOKENS = 300
_FATAL_STATUSES = frozenset({401, 403, 404})
_SHORT_CODE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_PARAM = re.compile(r"[A-Za-z0-9_.\[\]]{1,80}")


class Capability(StrEnum):
    TOOL_CALLING = "tool_calling"
    PARALLEL_TOOL_CALLS = "parallel_tool_calls"
    JSON_SCHEMA_WITH_TOOLS = "json_schema_with_tools"
    USAGE = "usage"
    MAX_TOKENS = "max_tokens"


LABELS = {
    Capability.TOOL_CALLING: "tool calling with JSON arguments",
    Capability.PARALLEL_TOOL_CALLS: "parallel_tool_calls: false accepted",
    Capability.JSON_SCHEMA_WITH_TOOLS: "response_format json_schema (strict) with tools",
    Capability.USAGE: "usage reported",
    Capability.MAX_TOKENS: "max_tokens accepted",
}


@dataclass(frozen=True, slots=True)
class Finding:
    supported: bool
    reason: str
    seconds: float | None = None
    """How long the probe's request took (None: no request of its own, or not sent)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One probe request's outcome: a 2xx JSON body, or a safe one-line summary of why not."""

    body: dict[str, Any] | None
    problem: str = ""
    fatal: bool = False
    refused_param: str = ""
    """The request key the endpoint named in its refusal (its error's ``param``), if any."""


@dataclass
class ModelReport:
    endpoint: str
    model: str
    structured_output: str
    capabilities: dict[Capability, Finding] = field(default_factory=dict)
    stopped: str = ""
    """Why probing stopped early (unreachable, refused key, …); empty when every probe ran."""
    requests: int = 0

    def supports(self, capability: Capability) -> bool:
        found = self.capabilities.get(capability)
        return found is not None and found.supported

    @property
    def usable(self) -> bool:
        """The model can run diagnoses here (with the recommended settings)."""
        return self.supports(Capability.TOOL_CALLING) and self.supports(
            Capability.PARALLEL_TOOL_CALLS
        )

    @property
    def failure(self) -> str:
        """Why the model part fails (exit 1), or '' when it does not."""
        if self.stopped:
            return self.stopped
        refused = self.capabilities.get(Capability.MAX_TOKENS)
        if refused is not None and refused.reason.startswith(_MAX_TOKENS_REFUSED):
            return (
                "max_tokens refused: every diagnosis request carries it (the completion tokens"
                " the run has left), so the model is unusable here"
            )
        if not self.supports(Capability.TOOL_CALLING):
            return "tool calling missing: the model is unusable for diagnoses"
        if not self.supports(Capability.PARALLEL_TOOL_CALLS):
            return (
                "parallel_tool_calls: false refused: every diagnosis request carries it, so the"
                " model is unusable here"
            )
        if self.structured_output == "json_schema" and not self.supports(
            Capability.JSON_SCHEMA_WITH_TOOLS
        ):
            return (
                "DIAG_STRUCTURED_OUTPUT=json_schema is set but the endpoint cannot do it: every"
                " run would fail; set DIAG_STRUCTURED_OUTPUT=off"
            )
        return ""

    @property
    def recommended(self) -> dict[str, str]:
        if not self.usable:
            return {}
        value = "json_schema" if self.supports(Capability.JSON_SCHEMA_WITH_TOOLS) else "off"
        return {"DIAG_STRUCTURED_OUTPUT": value}

    @property
    def warnings(self) -> list[str]:
        notes: list[str] = []
        if self.stopped:
            return notes
        if not self.usable:
            notes.append(
                "the model is unusable for diagnoses: it must return native tool calls with JSON"
                " arguments and accept parallel_tool_calls: false (choose another model or"
                " serving option)"
            )
        if not self.supports(Capability.USAGE):
            notes.append(
                "usage not reported: token budgets (DIAG_MAX_TOTAL_TOKENS) will be estimated"
                " from text size"
            )
        if self.usable and not self.supports(Capability.JSON_SCHEMA_WITH_TOOLS):
            notes.append(
                "no structured output: the strict Draft parser alone decides (a fenced or"
                " prefixed answer fails closed)"
            )
        return notes

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "usable": self.usable and not self.stopped,
            "failure": self.failure or None,
            "requests": self.requests,
            "capabilities": {
                c.value: {
                    "supported": f.supported,
                    "reason": f.reason,
                    "seconds": round(f.seconds, 3) if f.seconds is not None else None,
                }
                for c, f in self.capabilities.items()
            },
            "recommended": self.recommended,
            "warnings": self.warnings,
        }


# --- the request bodies -------------------------------------------------------------------------


def _echo_tool() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": PROBE_TOOL,
            "description": "Echo one word back.",
            "parameters": {
                "type": "object",
                "properties": {"word": {"type": "string"}},
                "required": ["word"],
                "additionalProperties": False,
            },
        },
    }


def strict_tool_specs() -> list[dict[str, Any]]:
    """The three tool definitions exactly as a ``json_schema`` run sends them (LlamaIndex marks
    each ``strict`` and closes its parameters)."""
    from sre_diag.harness.agent import tool_definitions

    specs: list[dict[str, Any]] = []
    for tool in tool_definitions(True):
        spec: dict[str, Any] = tool.metadata.to_openai_tool(skip_length_check=True)
        spec["function"]["strict"] = True
        spec["function"]["parameters"]["additionalProperties"] = False
        specs.append(spec)
    return specs


def probe_bodies(model: str) -> dict[Capability, dict[str, Any]]:
    """The request body of each probe, in the order they are sent."""
    from sre_diag.harness.model import draft_response_format

    tool_call: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": f"Capability probe. Call {PROBE_TOOL} with word 'ok'."},
            {"role": "user", "content": f"Call {PROBE_TOOL} now."},
        ],
        "tools": [_echo_tool()],
        "tool_choice": {"type": "function", "function": {"name": PROBE_TOOL}},
        "max_tokens": TOOL_MAX_TOKENS,
        "temperature": 0,
    }
    draft: dict[str, Any] = {
        "model": model,
        "messages": [
            {
                "role": "system",
                "content": "Capability probe. Call no tool. Answer with one JSON object: a"
                " diagnosis draft with conclusion null, empty analysis, action_plan,"
                ' recommendations and checked_scope, and missing_info ["probe"].',
            },
            {"role": "user", "content": "Answer now."},
        ],
        "tools": strict_tool_specs(),
        "tool_choice": "none",
        "response_format": draft_response_format(),
        "max_tokens": DRAFT_MAX_TOKENS,
        "temperature": 0,
    }
    return {
        Capability.TOOL_CALLING: tool_call,
        Capability.PARALLEL_TOOL_CALLS: {**tool_call, "parallel_tool_calls": False},
        Capability.JSON_SCHEMA_WITH_TOOLS: draft,
    }


# --- sending, and summarising what came back ----------------------------------------------------


def _error_code(response: httpx.Response, sent: Mapping[str, Any]) -> str:
    """A short, safe code from an error body: ``code``/``type``, and ``param`` if it names a
    key of the request. Nothing else of the body is ever shown."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError, RecursionError):  # nesting deeper than json can parse
        return ""
    if not isinstance(error, dict):
        return ""
    parts: list[str] = []
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, int | str) and _SHORT_CODE.fullmatch(str(value)):
            parts.append(str(value))
            break
    param = error.get("param")
    if isinstance(param, str) and _PARAM.fullmatch(param):
        if re.split(r"[.\[]", param, maxsplit=1)[0] in sent:
            parts.append(f"({param})")
    return " ".join(parts)


def _http_problem(response: httpx.Response, sent: Mapping[str, Any]) -> Answer:
    status = response.status_code
    code = _error_code(response, sent)
    summary = f"HTTP {status}" + (f" {code}" if code else "")
    if status in {401, 403}:
        return Answer(None, f"refused the key ({summary})", fatal=True)
    if status == 404:
        return Answer(
            None, f"{summary}: wrong OPENAI_BASE_URL path or unknown DIAG_MODEL", fatal=True
        )
    param = code.rsplit("(", 1)[-1].rstrip(")") if code.endswith(")") else ""
    return Answer(None, f"refused ({summary})", refused_param=param)


def probe_seconds(model_timeout_seconds: float) -> float:
    """One probe request's bound: the model timeout, at most ``MAX_PROBE_SECONDS``."""
    return min(model_timeout_seconds, MAX_PROBE_SECONDS)


def progress_every(bound_seconds: float) -> float:
    """Seconds between two "still waiting" lines of a probe bounded by ``bound_seconds``."""
    low, high = _PROGRESS_EVERY_SECONDS
    return min(max(bound_seconds / 10, low), high)


Progress = Callable[[str], None]


async def _timed_send(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    bound: float,
    what: Capability,
    progress: Progress,
) -> tuple[Answer, float]:
    """Send one probe, bounded from its start to its whole answer; say so while it waits."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    progress(f"probing {what.value} (waiting up to {bound:g} s)")
    sending = asyncio.ensure_future(_send(client, url, body, bound))
    try:
        while True:
            left = started + bound - loop.time()
            done, _ = await asyncio.wait({sending}, timeout=min(progress_every(bound), left))
            if done:
                answer = sending.result()
                break
            waited = loop.time() - started
            if waited >= bound:
                answer = Answer(None, _no_answer(bound), fatal=True)
                break
            progress(f"still waiting for {what.value}: {waited:.0f} s of at most {bound:g} s")
    finally:
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
    seconds = loop.time() - started
    progress(f"{what.value} took {seconds:.2f} s")
    return answer, seconds


def _no_answer(bound: float) -> str:
    return f"no answer within {bound:g} s"


async def _send(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any], request_seconds: float
) -> Answer:
    try:
        response = await client.post(url, json=body)
    except httpx.TimeoutException:
        return Answer(None, _no_answer(request_seconds), fatal=True)
    except AnswerTooLarge as exc:
        return Answer(None, f"answered more than {exc.limit} bytes", fatal=True)
    except httpx.DecodingError:
        return Answer(None, "answered a body that cannot be decoded", fatal=True)
    except httpx.HTTPError as exc:
        return Answer(None, f"unreachable ({failure_reason(exc)})", fatal=True)
    if not 200 <= response.status_code < 300:
        return _http_problem(response, body)
    try:
        parsed = response.json()
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can parse
        return Answer(None, f"answered HTTP {response.status_code} with a body that is not JSON")
    if not isinstance(parsed, dict):
        return Answer(None, "answered JSON that is not a chat completion")
    return Answer(parsed)


def _message(body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return {}, ""
    message = choices[0].get("message")
    finish = choices[0].get("finish_reason")
    return (message if isinstance(message, dict) else {}), str(finish or "")


def _judge_tool_call(answer: Answer) -> Finding:
    if answer.body is None:
        return Finding(False, answer.problem)
    message, finish = _message(answer.body)
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        what = "text instead" if message.get("content") else "nothing"
        return Finding(False, f"no tool call came back ({what}; finish_reason {finish or '-'})")
    function = calls[0].get("function") if isinstance(calls[0], dict) else None
    if not isinstance(function, dict) or function.get("name") != PROBE_TOOL:
        return Finding(False, f"the tool call does not name the offered tool {PROBE_TOOL}")
    arguments = function.get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return Finding(False, "the tool call's arguments are not a JSON object")
    return Finding(True, f"{PROBE_TOOL} called with JSON arguments")


def _judge_accepted(answer: Answer) -> Finding:
    if answer.body is None:
        return Finding(False, answer.problem)
    return Finding(True, "a request carrying parallel_tool_calls: false was answered")


def _judge_draft(answer: Answer) -> Finding:
    if answer.body is None:
        return Finding(False, answer.problem)
    message, finish = _message(answer.body)
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        return Finding(False, f"accepted, but the answer has no content (finish_reason {finish})")
    try:
        json.loads(content)
    except ValueError:
        cut = " (cut at max_tokens)" if finish == "length" else ""
        return Finding(False, f"accepted, but the answer's content is not JSON{cut}")
    return Finding(True, "accepted with the strict tools; the answer's content is JSON")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _judge_usage(answers: list[Answer]) -> Finding:
    bodies = [a.body for a in answers if a.body is not None]
    if not bodies:
        return Finding(False, "not probed: no request was answered")
    for body in bodies:
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return Finding(False, f"an answer carried no usage ({len(bodies)} answered)")
        if not (
            _is_count(usage.get("prompt_tokens")) and _is_count(usage.get("completion_tokens"))
        ):
            return Finding(
                False, "an answer's usage lacks non-negative prompt_tokens/completion_tokens"
            )
    return Finding(True, f"prompt and completion tokens in each of {len(bodies)} answers")


_MAX_TOKENS_REFUSED = "refused"


def _judge_max_tokens(answers: list[Answer]) -> Finding:
    """Every probe carries ``max_tokens``: refused when an answer names it, else accepted when
    one was answered."""
    for answer in answers:
        if answer.refused_param == "max_tokens":
            return Finding(False, f"{_MAX_TOKENS_REFUSED}: {answer.problem}")
    answered = sum(1 for a in answers if a.body is not None)
    if not answered:
        return Finding(False, "not probed: no request was answered")
    return Finding(True, f"{answered} requests carrying max_tokens were answered")


_JUDGES = {
    Capability.TOOL_CALLING: _judge_tool_call,
    Capability.PARALLEL_TOOL_CALLS: _judge_accepted,
    Capability.JSON_SCHEMA_WITH_TOOLS: _judge_draft,
}


async def probe_model(
    *,
    base_url: str,
    api_key: str | None,
    model: str,
    request_seconds: float,
    endpoint: str,
    structured_output: str = "off",
    progress: Progress | None = None,
) -> ModelReport:
    """Send the probes in order, each bounded by ``request_seconds``; stop at the first fatal
    answer. ``progress`` gets a line when a probe starts, every few seconds while it waits, and
    when it ends."""
    say = progress if progress is not None else _silent
    report = ModelReport(endpoint=endpoint, model=model, structured_output=structured_output)
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    answers: list[Answer] = []
    async with bounded_client(
        max_bytes=MAX_ANSWER_BYTES,
        total_seconds=request_seconds,
        timeout=request_seconds,
        headers=headers,
    ) as client:
        for capability, body in probe_bodies(model).items():
            if report.stopped:
                report.capabilities[capability] = Finding(False, f"not probed: {report.stopped}")
                continue
            answer, seconds = await _timed_send(client, url, body, request_seconds, capability, say)
            report.requests += 1
            answers.append(answer)
            found = _JUDGES[capability](answer)
            report.capabilities[capability] = Finding(found.supported, found.reason, seconds)
            if answer.fatal:
                report.stopped = f"endpoint {endpoint} {answer.problem}"
    report.capabilities[Capability.USAGE] = _judge_usage(answers)
    report.capabilities[Capability.MAX_TOKENS] = _judge_max_tokens(answers)
    return report


def _silent(line: str) -> None:
    """No progress wanted."""
