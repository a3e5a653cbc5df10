"""The Slack client's automatic retries, limited to calls that are safe to repeat.

A 429 means Slack did not act: retrying it (after ``Retry-After``) is always safe. A 5xx or a
lost connection says nothing about whether Slack acted: ``chat.update`` may be repeated (the
message ends the same), ``chat.postMessage`` and ``chat.postEphemeral`` may not (a second copy
in the thread). Those are left to their callers, which look before they post again
(:mod:`sre_diag.slack.delivery`).
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

__all__ = ["NOT_IDEMPOTENT", "IdempotentOnly", "guard_retry_handlers"]

NOT_IDEMPOTENT = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.scheduleMessage"})
"""Methods that leave a second copy when repeated after Slack acted on the first call."""


def _method(request: HttpRequest) -> str:
    return request.url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


class IdempotentOnly(AsyncRetryHandler):
    """``inner``'s retries, except for the methods in :data:`NOT_IDEMPOTENT`."""

    def __init__(self, inner: AsyncRetryHandler) -> None:
        super().__init__(inner.max_retry_count, inner.interval_calculator)
        self.inner = inner

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if _method(request) in NOT_IDEMPOTENT:
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
    honouring Retry-After for every method, and 5xx / connection retries only for methods that
    may be repeated."""
    client.retry_handlers[:] = [
        AsyncRateLimitErrorRetryHandler(max_retry_count=2),
        IdempotentOnly(AsyncServerErrorRetryHandler(max_retry_count=2)),
        IdempotentOnly(AsyncConnectionErrorRetryHandler()),
    ]
