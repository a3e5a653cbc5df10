"""A fake Loki that speaks HTTP/1.1 on a real socket the way a real Loki (or a proxy in front of
it) does: answers split over many small TCP writes, ``Transfer-Encoding: chunked``,
``Content-Encoding: gzip``/``deflate`` — and, on demand, the faults of FAULTS.md: a slow
trickle, a body that never ends, a connection reset or closed mid-body, a peer that accepts
and never answers.

It is written on bare ``asyncio`` streams rather than an HTTP framework so that every byte and
every write is under the test's control (a framework writes an answer in one piece, which is
what hid the partial-read bug). Requests are parsed just enough for Loki's API: the request
line, the headers, the query string and a ``Content-Length`` body; keep-alive is honoured.

With a :class:`LokiStore`, the fake answers from stored lines as Loki evaluates them: the
LogQL the source builds (a stream selector, ``| json``/``| logfmt``, label matchers, line
filters, ``sum(count_over_time(... [range]))``) is parsed, anything else is a 400 parse error
as Loki answers it; a log query returns the lines with ``start <= t < end`` (``direction``,
``limit``), a metric query one point per step ``t`` from ``start`` to ``end`` counting the
lines with ``t - range < ts <= t`` (a step with none has no point, as in Loki).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import re
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = [
    "FakeLoki",
    "LokiStore",
    "Reply",
    "Wire",
    "json_reply",
    "start_fake_loki",
    "text_reply",
]


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
    store: LokiStore | None = None
    """Stored lines: query_range is answered from them (see module docs)."""
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
        if self.store is not None:
            return self.store.answer(query)
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


# --------------------------------------------------------------------------------------------
# Stored lines, answered as Loki evaluates LogQL


class _ParseError(ValueError):
    pass


_STRING = r'"((?:[^"\\]|\\.)*)"'
_SELECTOR = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)=" + _STRING + r"\}")
_METRIC = re.compile(r"sum\(count_over_time\((.*) \[([0-9]+)(ms|s|m|h)\]\)\)", re.DOTALL)
_UNITS_NS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_STAGE = re.compile(
    r"\s*(?:\|\s*(?P<parser>json|logfmt)\b"
    r"|\|~\s*" + _STRING.replace("(", "(?P<line>", 1) + r""
    r"|\|\s*(?P<label>[A-Za-z_]+)(?P<op>=~|=)" + _STRING.replace("(", "(?P<value>", 1) + r""
    r"|\|\s*\(msg=~"
    + _STRING.replace("(", "(?P<msg>", 1)
    + r' or \(msg="" and message=~'
    + _STRING.replace("(", "(?P<msg2>", 1)
    + r"\)\))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _go_string(body: str) -> str:
    """A LogQL (Go) string literal's body, unescaped."""
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        code = body[i + 1]
        if code == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        else:
            raise _ParseError(f"bad escape \\{code}")
    return "".join(out)


def _re2(pattern: str) -> re.Pattern[str]:
    """An RE2 pattern as Python's ``re`` reads it (``\\x{HHHH}`` → the character)."""
    python = re.sub(r"\\x\{([0-9a-fA-F]+)\}", lambda m: re.escape(chr(int(m[1], 16))), pattern)
    return re.compile(python)


def _logfmt(line: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for key, value in re.findall(
        r'(?<!\S)([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)', line
    ):
        pairs.setdefault(key, json.loads(value) if value.startswith('"') else value)
    return pairs


def _json_labels(line: str) -> dict[str, str] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


@dataclass
class _Query:
    label: str
    value: str
    stages: list[tuple[str, object]]

    def keeps(self, labels: dict[str, str], line: str) -> bool:
        if labels.get(self.label) != self.value:
            return False
        fields: dict[str, str] = dict(labels)
        for kind, arg in self.stages:
            if kind == "json":
                parsed = _json_labels(line)
                fields.update(parsed if parsed is not None else {"__error__": "JSONParserErr"})
            elif kind == "logfmt":
                fields.update(_logfmt(line))
            elif kind == "line":
                assert isinstance(arg, re.Pattern)
                if arg.search(line) is None:
                    return False
            elif not self._label_keeps(kind, arg, fields):
                return False
        return True

    @staticmethod
    def _label_keeps(kind: str, arg: object, fields: dict[str, str]) -> bool:
        if kind == "eq":
            name, value = arg  # type: ignore[misc]
            return bool(fields.get(name, "") == value)
        if kind == "match":
            name, pattern = arg  # type: ignore[misc]
            return pattern.fullmatch(fields.get(name, "")) is not None
        pattern = arg
        assert isinstance(pattern, re.Pattern)
        msg = fields.get("msg", "")
        return pattern.fullmatch(msg) is not None or (
            msg == "" and pattern.fullmatch(fields.get("message", "")) is not None
        )


def _parse(text: str) -> _Query:
    selector = _SELECTOR.match(text)
    if selector is None:
        raise _ParseError("parse error: no stream selector")
    query = _Query(selector[1], _go_string(selector[2]), [])
    at = selector.end()
    while at < len(text):
        stage = _STAGE.match(text, at)
        if stage is None or stage.end() == at:
            raise _ParseError(f"parse error at {at}")
        at = stage.end()
        if stage["parser"]:
            query.stages.append((stage["parser"], None))
        elif stage["line"] is not None:
            query.stages.append(("line", _re2(_go_string(stage["line"]))))
        elif stage["label"]:
            value = _go_string(stage["value"])
            if stage["op"] == "=":
                query.stages.append(("eq", (stage["label"], value)))
            else:
                query.stages.append(("match", (stage["label"], _re2(value))))
        else:
            if stage["msg"] != stage["msg2"]:
                raise _ParseError("the fake reads one message pattern")
            query.stages.append(("msg", _re2(_go_string(stage["msg"]))))
    return query


@dataclass
class LokiStore:
    """Lines as Loki holds them: ``(ns, stream labels, raw line)``."""

    lines: list[tuple[int, dict[str, str], str]] = field(default_factory=list)

    def answer(self, params: dict[str, str]) -> Reply:
        try:
            if "step" in params:
                return json_reply(self._metric(params))
            return json_reply(self._logs(params))
        except (_ParseError, re.error, KeyError, ValueError) as exc:
            return text_reply(f"parse error: {exc}", 400)

    def _logs(self, params: dict[str, str]) -> dict[str, Any]:
        query = _parse(params["query"])
        start, end = int(params["start"]), int(params["end"])
        found = [
            (ns, labels, line)
            for ns, labels, line in self.lines
            if start <= ns < end and query.keeps(labels, line)
        ]
        backward = params.get("direction", "backward") == "backward"
        found.sort(key=lambda entry: entry[0], reverse=backward)
        found = found[: int(params.get("limit", "100"))]
        streams: dict[str, dict[str, Any]] = {}
        for ns, labels, line in found:
            key = json.dumps(labels, sort_keys=True)
            stream = streams.setdefault(key, {"stream": labels, "values": []})
            stream["values"].append([str(ns), line])
        result = list(streams.values())
        return {"status": "success", "data": {"resultType": "streams", "result": result}}

    def _metric(self, params: dict[str, str]) -> dict[str, Any]:
        metric = _METRIC.fullmatch(params["query"])
        if metric is None:
            raise _ParseError("parse error: not a count_over_time")
        query = _parse(metric[1])
        span = int(metric[2]) * _UNITS_NS[metric[3]]
        step = int(params["step"].rstrip("s")) * 10**9
        start, end = int(params["start"]), int(params["end"])
        kept = [ns for ns, labels, line in self.lines if query.keeps(labels, line)]
        values = []
        at = start
        while at <= end:
            count = sum(1 for ns in kept if at - span < ns <= at)
            if count:
                values.append([at / 1e9, str(count)])
            at += step
        result = [{"metric": {}, "values": values}] if values else []
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}
