"""Every answer an httpx client of the product reads is bounded in bytes and in time.

``bounded_client`` builds an ``httpx.AsyncClient`` whose ``send`` takes each answer as a stream
and wraps its body before it is read (the client's own transport, connection pool and proxy
settings stay as httpx builds them; a transport of our own would turn the proxy settings of
the environment off):

- the body is counted as it arrives, AFTER decoding: ``gzip`` and ``deflate`` (the only
  encodings offered in ``Accept-Encoding``) are inflated here with a bounded output, so a few
  KB of compressed data cannot inflate past the cap. Past ``max_bytes`` (or a declared
  ``Content-Length`` beyond it) the read ends with ``AnswerTooLarge``; the connection is then
  closed, never returned to the pool. An encoding that was not offered, or a compressed body
  that is corrupt or cut short, ends with ``httpx.DecodingError``.
- one exchange is bounded from the moment it is sent to its last body byte by
  ``total_seconds``, headers included (httpx's own timeouts bound each read only: a peer
  trickling one byte a second stays under any read timeout for ever); past it the exchange
  ends with ``httpx.ReadTimeout``.

A body is never shown: these errors carry the limit, never what was received.

``prepare_tls_context`` / ``take_tls_context``: an ``httpx.AsyncClient`` builds its verifying TLS
context in its constructor (``httpx.create_ssl_context()``: the CA bundle read and parsed,
~40-50 ms), even for an ``http://`` endpoint. A command that will build a client can start that
work in a thread at its start, while its modules load (OpenSSL parses the bundle with the GIL
released); the client then takes the finished context instead of building its own.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import zlib
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import httpx

from sre_diag.errors import AnswerTooLarge

__all__ = [
    "OFFERED_ENCODINGS",
    "AnswerTooLarge",
    "BoundedAsyncClient",
    "bounded_client",
    "prepare_tls_context",
    "take_tls_context",
]

OFFERED_ENCODINGS = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` starts with a zlib header (RFC 1950: deflate method, check bits)."""
    return data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


class _Inflater:
    """Bounded gzip/deflate decoding (``deflate`` with or without its zlib header)."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._z = zlib.decompressobj(_WBITS[encoding])
        self._head = b""
        """``deflate`` only: the first bytes, kept until its two header bytes have arrived."""
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        """Up to ``room + 1`` decoded bytes of ``data`` (one more than ``room``: too large)."""
        if self._encoding == "deflate" and not self._started:
            data, self._head = self._head + data, b""
            if len(data) < 2:  # a split answer parses as if it came in one piece
                self._head = data
                return b""
            if not _zlib_header(data):
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some servers send
        self._started = True
        try:
            out = self._z.decompress(data, room + 1)
        except zlib.error:
            raise httpx.DecodingError("corrupt compressed answer") from None
        if self._z.unused_data:
            raise httpx.DecodingError("data after the end of the compressed answer")
        return out

    def finish(self) -> None:
        """A compressed body must end where its stream says it ends (an empty one is empty)."""
        if self._head or (self._started and not self._z.eof):
            raise httpx.DecodingError("compressed answer cut short")


class _BoundedStream(httpx.AsyncByteStream):
    """The decoded body, counted against ``max_bytes`` and read before ``deadline``."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        inflater: _Inflater | None,
        max_bytes: int,
        deadline: float,
    ) -> None:
        self._inner = inner
        self._inflater = inflater
        self._max_bytes = max_bytes
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        chunks = aiter(self._inner)
        while (raw := await self._next(chunks)) is not None:
            room = self._max_bytes - received
            data = self._inflater.feed(raw, room) if self._inflater is not None else raw
            received += len(data)
            if received > self._max_bytes:
                raise AnswerTooLarge(self._max_bytes)
            if data:
                yield data
        if self._inflater is not None:
            self._inflater.finish()

    async def _next(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await anext(chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise httpx.ReadTimeout("whole answer not received in time") from None

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedAsyncClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` whose ``send`` bounds every answer (see the module)."""

    def __init__(self, *, max_bytes: int, total_seconds: float, **options: Any) -> None:
        super().__init__(**options)
        self.max_bytes = max_bytes
        self.total_seconds = total_seconds

    async def send(
        self, request: httpx.Request, *, stream: bool = False, **options: Any
    ) -> httpx.Response:
        """Send ``request``; its answer's headers and body must all come within the bound."""
        request.headers["Accept-Encoding"] = OFFERED_ENCODINGS
        deadline = asyncio.get_running_loop().time() + self.total_seconds
        try:
            async with asyncio.timeout_at(deadline):
                response = await super().send(request, stream=True, **options)
        except TimeoutError:
            raise httpx.ReadTimeout("no answer in time", request=request) from None
        try:
            self._bound(response, deadline)
            if not stream:
                await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response

    def _bound(self, response: httpx.Response, deadline: float) -> None:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise AnswerTooLarge(self.max_bytes)
        inflater = _inflater_for(response)
        if not isinstance(response.stream, httpx.AsyncByteStream):
            raise httpx.DecodingError("not an asynchronous answer")
        response.stream = _BoundedStream(response.stream, inflater, self.max_bytes, deadline)


def _inflater_for(response: httpx.Response) -> _Inflater | None:
    """Take the decoding over from httpx (so that it is bounded); refuse what was not offered."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in {"", "identity"}:
        return None
    if encoding not in _WBITS:
        raise httpx.DecodingError("answer in an encoding that was not offered")
    del response.headers["content-encoding"]
    response.headers.pop("content-length", None)  # it counted the encoded bytes
    return _Inflater(encoding)


def bounded_client(*, max_bytes: int, total_seconds: float, **options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` (``options`` as httpx takes them: timeout, limits, headers…)
    whose every answer is read whole within ``max_bytes`` decoded bytes and ``total_seconds``
    from the request's start."""
    return BoundedAsyncClient(max_bytes=max_bytes, total_seconds=total_seconds, **options)


_prepared: list[Future[ssl.SSLContext]] = []
_prepared_lock = threading.Lock()


def prepare_tls_context() -> None:
    """Start building httpx's default TLS context (``httpx.create_ssl_context()``, exactly what
    a client built with ``verify=True`` builds) in a thread; a no-op while one is waiting."""
    future: Future[ssl.SSLContext] = Future()
    with _prepared_lock:
        if _prepared:
            return
        _prepared.append(future)
    threading.Thread(target=_build_tls, args=(future,), name="tls-context", daemon=True).start()


def _build_tls(future: Future[ssl.SSLContext]) -> None:
    try:
        future.set_result(httpx.create_ssl_context())
    except BaseException as exc:  # handed to the client that takes it, raised there
        future.set_exception(exc)


def take_tls_context() -> ssl.SSLContext | bool:
    """For ONE client's ``verify``: the context :func:`prepare_tls_context` started (waited
    for; its error, if building it failed, raised here as the client itself would), else
    ``True`` (the client builds its own, httpx's default)."""
    with _prepared_lock:
        future = _prepared.pop() if _prepared else None
    return True if future is None else future.result()
