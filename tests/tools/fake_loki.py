"""A fake Loki that speaks HTTP/1.1 on a real socket the way a real Loki (or a proxy in front of
it) does: answers split over many small TCP writes, ``Transfer-Encoding: chunked``,
``Content-Encoding: gzip``/``deflate`` — and, on demand, the faults of FAULTS.md: a slow
trickle, a body that never ends, a connection reset or closed mid-body, a peer that accepts
and never answers.

It is written on bare ``asyncio`` streams rather than an HTTP framework so that every byte and
every write is under the test's control (a framework writes an answer in one piece, which is
what hid the partial-read bug). Requests are parsed just enough for Loki's API: the request
line, the headers, the query string and a ``Content-Length`` body; keep-alive is honoured.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = ["FakeLoki", "Reply", "Wire", "json_reply", "start_fake_loki", "text_reply"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, body and content type."""

    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def json_reply(value: Any, status: int = 200) -> Reply:
    """A JSON answer (as Loki writes them)."""
    return Reply(status, json.dumps(value).encode(), "application/json")


def text_reply(text: str, status: int = 200) -> Reply:
    """A plain-text answer (as Loki writes its errors)."""
    return Reply(status, text.encode(), "text/plain; charset=utf-8")


@dataclass(frozen=True)
class Wire:
    """How an answer goes out on the socket.

    The default is what a real Loki behind a proxy sends: chunked, gzip, in writes of 1–100
    bytes. ``pause`` sleeps after every ``pause_every`` writes (``1``: a slow trickle);
    ``reset_after`` resets the connection (RST) after that many body bytes, ``close_after``
    closes it cleanly there;
    ``endless`` sends body bytes until the client hangs up; ``silent`` accepts and says
    nothing at all.
    """

    chunked: bool = True
    encoding: str | None = "gzip"  # "gzip", "deflate", "deflate-raw" or None
    write_sizes: tuple[int, int] = (1, 100)
    pause: float = 0.001  # a real network: the client reads before the answer is complete
    pause_every: int = 20  # writes between two pauses
    reset_after: int | None = None
    close_after: int | None = None
    endless: bool = False
    silent: bool = False
    seed: int = 20


ONE_PIECE = Wire(chunked=False, encoding=None, write_sizes=(1 << 30, 1 << 30))


def _encode(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding == "deflate":
        return zlib.compress(body)
    if encoding == "deflate-raw":  # what some servers send as "deflate": no zlib header
        packer = zlib.compressobj(wbits=-15)
        return packer.compress(body) + packer.flush()
    return body


def _pieces(data: bytes, sizes: tuple[int, int], rng: random.Random) -> Iterator[bytes]:
    at = 0
    while at < len(data):
        step = rng.randint(*sizes)
        yield data[at : at + step]
        at += step


@dataclass
class FakeLoki:
    """The fake's script and what it saw: every request's path, query and headers."""

    url: str = ""
    wire: Wire = Wire()
    requests: list[dict[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    """Every request's body (a POST's; empty for Loki's GETs)."""
    reply: Callable[[], Reply] = field(default=lambda: json_reply({}))
    """The answer to a log query (the sample, the oldest line)."""
    counts: Callable[[dict[str, str]], Reply] = field(
        default=lambda query: json_reply(
            {"status": "success", "data": {"resultType": "matrix", "result": []}}
        )
    )
    """The answer to a metric query (``step`` set), given the request's query parameters."""
    oldest: Callable[[], Reply] | None = None
    """The answer to the oldest-line query (``direction=forward``), if not ``reply``."""
    labels: Callable[[], Reply] = field(
        default=lambda: json_reply({"status": "success", "data": []})
    )
    """The answer to ``/loki/api/v1/label/<name>/values``."""
    delay: float = 0.0
    """Seconds to wait before answering (headers included)."""
    body_bytes_sent: int = 0
    connections: int = 0
    connection_seconds: list[float] = field(default_factory=list)
    """Per ended connection, its lifetime from accept to close (bounds measured at the peer,
    not including a client process's start)."""
    _writes: int = 0

    def answer(self, path: str, query: dict[str, str]) -> Reply:
        """The scripted reply for one request."""
        if path.startswith("/loki/api/v1/label/"):
            return self.labels()
        if path != "/loki/api/v1/query_range":
            return text_reply("404 page not found", 404)
        if "step" in query:
            return self.counts(query)
        if query.get("direction") == "forward" and self.oldest is not None:
            return self.oldest()
        return self.reply()

    @property
    def log_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if "step" not in r and "direction" in r]

    @property
    def count_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if "step" in r]

    # ---------------------------------------------------------------- the server side

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests answered in turn until either side closes."""
        self.connections += 1
        accepted = time.monotonic()
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while await self._one_exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.connection_seconds.append(time.monotonic() - accepted)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        _method, target, _version = lines[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = next((v for k, v in headers.items() if k.lower() == "content-length"), "0")
        self.bodies.append(await reader.readexactly(int(length)))
        parts = urlsplit(target)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.paths.append(parts.path)
        self.requests.append(query)
        self.headers.append(headers)
        if self.wire.silent:
            await asyncio.Event().wait()  # accepts, never greets; ends when cancelled
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = self.answer(parts.path, query)
        return await self._send(reply, writer)

    async def _send(self, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        wire = self.wire
        rng = random.Random(wire.seed + len(self.requests))
        body = _encode(reply.body, wire.encoding)
        head = [f"HTTP/1.1 {reply.status} X", f"Content-Type: {reply.content_type}"]
        head += [f"{name}: {value}" for name, value in reply.headers]
        if wire.encoding is not None:
            head.append(f"Content-Encoding: {wire.encoding.removesuffix('-raw')}")
        framed = wire.chunked or wire.endless
        head.append("Transfer-Encoding: chunked" if framed else f"Content-Length: {len(body)}")
        await self._write(writer, ("\r\n".join(head) + "\r\n\r\n").encode(), rng)
        sent = 0
        for piece in self._body_pieces(body, rng):
            cut = self._cut_at(sent, len(piece))
            if cut is not None:
                await self._write(writer, self._frame(piece[:cut]), rng)
                self._hang_up(writer)
                return False
            await self._write(writer, self._frame(piece), rng)
            sent += len(piece)
            self.body_bytes_sent += len(piece)
        if framed:
            await self._write(writer, b"0\r\n\r\n", rng)
        return True

    def _body_pieces(self, body: bytes, rng: random.Random) -> Iterator[bytes]:
        if not self.wire.endless:
            yield from _pieces(body, self.wire.write_sizes, rng)
            return
        filler = b'{"status":"success","data":{"resultType":"streams","result":[' + b" " * 4096
        yield filler
        while True:
            yield b" " * 4096

    def _cut_at(self, sent: int, size: int) -> int | None:
        limit = self.wire.reset_after
        if limit is None:
            limit = self.wire.close_after
        if limit is None or sent + size <= limit:
            return None
        return max(limit - sent, 0)

    def _frame(self, piece: bytes) -> bytes:
        if not (self.wire.chunked or self.wire.endless) or not piece:
            return piece
        return f"{len(piece):x}\r\n".encode() + piece + b"\r\n"

    def _hang_up(self, writer: asyncio.StreamWriter) -> None:
        if self.wire.reset_after is None:
            writer.close()
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # SO_LINGER 0: closing sends a RST instead of a FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _write(self, writer: asyncio.StreamWriter, data: bytes, rng: random.Random) -> None:
        for piece in _pieces(data, self.wire.write_sizes, rng):
            writer.write(piece)
            await writer.drain()
            self._writes += 1
            if self.wire.pause and self._writes % self.wire.pause_every == 0:
                await asyncio.sleep(self.wire.pause)


@contextlib.asynccontextmanager
async def start_fake_loki(fake: FakeLoki | None = None) -> AsyncIterator[FakeLoki]:
    """Serve ``fake`` on a free 127.0.0.1 port for the duration of the block."""
    fake = fake or FakeLoki()
    tasks: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await fake.serve(reader, writer)
        except asyncio.CancelledError:
            pass  # the fake is shutting down; asyncio logs a cancelled handler as an error
        finally:
            tasks.discard(task)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}/"
    try:
        yield fake
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
