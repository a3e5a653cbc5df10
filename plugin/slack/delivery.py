"""Posting a run's final answer exactly once, whatever Slack does.

``chat.postMessage`` is not idempotent: a post whose answer never came back (a timeout, a 5xx,
a dropped connection) may be in the thread already. So nothing here re-posts blindly:

- a **429** means Slack did not act: wait its ``Retry-After`` and post again;
- an **ambiguous failure** (timeout, 5xx, connection lost): read the thread
  (``conversations.replies`` with ``include_all_metadata``) for the run id the answer carries;
  found → it is delivered; verifiably absent → post again; the thread unreadable → read again;
- any other ``ok: false`` (``invalid_blocks``, ``msg_too_long``…) is a refusal: nothing was
  stored, the caller may post its plain fallback (through this same function).

All of it within ``deadline`` (a ``time.monotonic()`` instant): past it, the outcome is
``GAVE_UP`` (never a second post on a guess). ``confirm``, asked right before each attempt,
can stop it (``FENCED``: another owner answers the run). The client's own retry handlers
never repeat a non-idempotent call (:func:`sre_diag.slack.retries.guard_retry_handlers`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sre_diag.slack.lane import NotSent, Priority, lanes
from sre_diag.slack.posting import failure_name
from sre_diag.slack.turns import answered_in_thread

__all__ = ["Delivery", "DeliveryOutcome", "post_once", "retry_after_seconds"]

_log = logging.getLogger(__name__)

_FIRST_PAUSE = 0.5
_MAX_PAUSE = 5.0


class Delivery(enum.Enum):
    POSTED = "posted"
    """Slack confirmed it, or the thread shows it after an ambiguous failure."""
    REFUSED = "refused"
    """Slack answered ``ok: false`` (not a rate limit): nothing was stored."""
    GAVE_UP = "gave_up"
    """The deadline passed before the post was confirmed or verifiably absent."""
    FENCED = "fenced"
    """``confirm`` said the run's answer is no longer ours: nothing more was posted."""


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    delivery: Delivery
    error: BaseException | None = None
    """The last failure (the refusal, or why it gave up)."""
    attempts: int = 0


def retry_after_seconds(exc: SlackApiError) -> float:
    """Slack's ``Retry-After`` of a 429, in seconds (1 when absent or unreadable)."""
    headers = exc.response.headers if exc.response is not None else {}
    for name, value in (headers or {}).items():
        if str(name).lower() == "retry-after":
            raw = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(str(raw)))
            except ValueError:
                return 1.0
    return 1.0


def _status(exc: SlackApiError) -> int:
    return int(exc.response.status_code) if exc.response is not None else 0


def _ambiguous(exc: BaseException) -> bool:
    """The call may have taken effect although no answer said so."""
    if isinstance(exc, SlackApiError):
        return _status(exc) >= 500
    return isinstance(exc, TimeoutError | aiohttp.ClientError | ConnectionError)


@dataclass(slots=True)
class _Attempts:
    client: AsyncWebClient
    kwargs: dict[str, Any]
    run_id: str
    deadline: float
    clock: Callable[[], float]
    confirm: Callable[[], Awaitable[bool]] | None = None
    attempts: int = 0
    pause: float = _FIRST_PAUSE
    last: BaseException | None = None

    def left(self) -> float:
        return self.deadline - self.clock()

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` if the deadline allows it; False when it does not."""
        if seconds >= self.left():
            return False
        await asyncio.sleep(seconds)
        return True

    async def backoff(self) -> bool:
        pause, self.pause = self.pause, min(self.pause * 2, _MAX_PAUSE)
        return await self.sleep(pause)

    async def post(self) -> None:
        """One attempt in the answer's turn of the channel's lane (:class:`NotSent` when the
        deadline passed while it waited: nothing was sent)."""

        async def send() -> None:
            self.attempts += 1
            async with asyncio.timeout(max(self.left(), 0.001)):
                await self.client.chat_postMessage(**self.kwargs)

        channel = str(self.kwargs["channel"])
        await lanes().call(
            self.client, channel, Priority.ANSWER, "chat.postMessage", send, deadline=self.deadline
        )

    async def in_thread(self) -> bool | None:
        """Whether the thread holds the run's answer; None when it could not be read."""
        try:
            async with asyncio.timeout(max(self.left(), 0.001)):
                return await answered_in_thread(
                    self.client,
                    str(self.kwargs["channel"]),
                    str(self.kwargs["thread_ts"]),
                    self.run_id,
                )
        except Exception as exc:
            _log.warning("thread of run %s not readable: %s", self.run_id, failure_name(exc))
            return None


async def post_once(
    client: AsyncWebClient,
    run_id: str,
    kwargs: dict[str, Any],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    confirm: Callable[[], Awaitable[bool]] | None = None,
) -> DeliveryOutcome:
    """Post ``kwargs`` (``chat.postMessage`` arguments with ``channel`` and ``thread_ts``; the
    message names ``run_id`` in its metadata or its text) at most once in effect; ``confirm``
    is asked right before each attempt. Until it returns, nothing of less value is sent into
    the channel (:mod:`sre_diag.slack.lane`)."""
    async with lanes().answering(client, str(kwargs["channel"])):
        return await _deliver(_Attempts(client, kwargs, run_id, deadline, clock, confirm))


async def _deliver(state: _Attempts) -> DeliveryOutcome:
    run_id = state.run_id
    verify = False  # once a post may have taken effect, every later one looks first
    while True:
        found = await state.in_thread() if verify else False
        if found:
            return DeliveryOutcome(Delivery.POSTED, state.last, state.attempts)
        outcome = None if found is None else await _attempt(state)
        if outcome is not None:
            return outcome
        verify = verify or (state.last is not None and _ambiguous(state.last))
        if not await _wait_before_next(state, found is None):
            break
    _log.error(
        "answer of run %s given up at its deadline: %s",
        run_id,
        failure_name(state.last) if state.last else "deadline",
    )
    return DeliveryOutcome(Delivery.GAVE_UP, state.last, state.attempts)


async def _wait_before_next(state: _Attempts, unreadable: bool) -> bool:
    """Slack's Retry-After after a 429, else a growing pause; False past the deadline."""
    last = state.last
    if not unreadable and isinstance(last, SlackApiError) and _status(last) == 429:
        return await state.sleep(retry_after_seconds(last))
    return await state.backoff()


async def _attempt(state: _Attempts) -> DeliveryOutcome | None:
    """One post: its final outcome, or None to go on (``state.last`` says why)."""
    if state.left() <= 0:
        state.last = state.last or TimeoutError()
        return DeliveryOutcome(Delivery.GAVE_UP, state.last, state.attempts)
    if state.confirm is not None and not await state.confirm():
        return DeliveryOutcome(Delivery.FENCED, state.last, state.attempts)
    try:
        await state.post()
    except NotSent:
        state.last = state.last or TimeoutError()
        return DeliveryOutcome(Delivery.GAVE_UP, state.last, state.attempts)
    except SlackApiError as exc:
        state.last = exc
        if _status(exc) == 429 or _ambiguous(exc):
            _log.warning("answer of run %s not confirmed: %s", state.run_id, failure_name(exc))
            return None
        return DeliveryOutcome(Delivery.REFUSED, exc, state.attempts)
    except Exception as exc:
        state.last = exc
        if _ambiguous(exc):
            _log.warning("answer of run %s not confirmed: %s", state.run_id, failure_name(exc))
            return None
        return DeliveryOutcome(Delivery.REFUSED, exc, state.attempts)
    return DeliveryOutcome(Delivery.POSTED, state.last, state.attempts)
