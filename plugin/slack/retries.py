"""The Slack client's automatic retries, limited to calls that are safe to repeat.

A 429 means Slack did not act: retrying it (after ``Retry-After``) is always safe. A 5xx or a
lost connection says nothing about whether Slack acted: ``chat.update`` may be repeated (the
message ends the same), ``chat.postMessage`` and ``chat.postEphemeral`` may not (a second copy
in the thread). Those are left to their callers, which look before they post again
(:mod:`sre_diag.slack.delivery`).

The calls that go through a channel's lane (:mod:`sre_diag.slack.lane`: ``chat.postMessage``,
``chat.update``) are not retried on a 429 here either: the lane waits their ``Retry-After`` and
sends them again in their turn, so that a retried pointer never jumps ahead of an answer, and an
answer is confirmed against its fence before each attempt.
"""

from __future__ import annotations

from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["LANED", "NOT_IDEMPOTENT", "IdempotentOnly", "guard_retry_handlers"]

NOT_IDEMPOTENT = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.scheduleMessage"})
"""Methods that leave a second copy when repeated after Slack acted on the first call."""
LANED = frozenset({"chat.postMessage", "chat.update"})
"""Methods whose 429s the channel lanes retry, in order (never the client on its own)."""


def _method(request: HttpRequest) -> str:
    return request.url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


class IdempotentOnly(AsyncRetryHandler):
    """``inner``'s retries, except for ``methods`` (default: :data:`NOT_IDEMPOTENT`)."""

    def __init__(self, inner: AsyncRetryHandler, methods: frozenset[str] = NOT_IDEMPOTENT) -> None:
        super().__init__(inner.max_retry_count, inner.interval_calculator)
        self.inner = inner
        self.methods = methods

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if _method(request) in self.methods:
            return False
        return await self.inner.can_retry_async(
            state=state, request=request, response=response, error=error
        )

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        await self.inner.prepare_for_next_attempt_async(
            state=state, request=request, response=response, error=error
        )


def guard_retry_handlers(client: AsyncWebClient) -> None:
    """Give ``client`` (in place: Bolt copies the list into each request's client) 429 retries
    honouring Retry-After for every method but the :data:`LANED` ones, and 5xx / connection
    retries only for methods that may be repeated."""
    client.retry_handlers[:] = [
        IdempotentOnly(AsyncRateLimitErrorRetryHandler(max_retry_count=2), LANED),
        IdempotentOnly(AsyncServerErrorRetryHandler(max_retry_count=2)),
        IdempotentOnly(AsyncConnectionErrorRetryHandler()),
    ]
