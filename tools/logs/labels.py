"""A Loki label-values answer read as a stream: the first names in sorted order, any size.

``/loki/api/v1/label/<name>/values`` answers ``{"status": "success", "data": ["a", "b", …]}``;
a busy Loki holds thousands of values (a megabyte and more). :class:`LabelValues` is fed the
decoded body chunk by chunk and keeps only what the catalogue shows: the ``keep`` smallest
values that ``accept`` takes (the names ``query_logs`` accepts), so memory is bounded by
``keep`` and by :data:`MAX_VALUE_BYTES` (a longer value is skipped without being held, it could
never be a service name), whatever the size of the answer. Structural characters are found with
one regular-expression search each and a string's end with ``bytes.find``, so a chunk costs C
loops, not a Python step per byte. Anything that is not one JSON object with ``status`` and a
``data`` array of strings at its top is :class:`ValueError`.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable

__all__ = ["MAX_VALUE_BYTES", "LabelValues"]

MAX_VALUE_BYTES = 1024  # of one value as written (escapes included); longer ones are skipped
_STRUCTURE = re.compile(rb'[{}\[\]:,"]|[^\s{}\[\]:,"]+')
_STRING_END = re.compile(rb'["\\]')


class LabelValues:
    """Fed a label-values answer in chunks; :meth:`result` is the kept names, sorted."""

    def __init__(self, keep: int, accept: Callable[[str], bool]) -> None:
        self.keep = keep
        self.accept = accept
        self.kept: list[str] = []
        self.stack = ""  # "{" / "[" of the containers we are in
        self.keys: list[bytes | None] = []  # per container: the key its next value belongs to
        self.expect_key = False
        self.in_string = False
        self.escaped = False
        self.value = bytearray()
        self.too_long = False
        self.status: str | None = None
        self.data_seen = False
        self.values_read = 0

    def feed(self, chunk: bytes) -> None:
        """One more piece of the body (any cut, inside a string or an escape included)."""
        at = 0
        while at < len(chunk):
            at = self._string(chunk, at) if self.in_string else self._structure(chunk, at)

    def result(self) -> list[str]:
        """The kept names; :class:`ValueError` if the answer was not complete and well formed."""
        if self.in_string or self.stack or self.status != "success" or not self.data_seen:
            raise ValueError("not a complete label-values answer")
        return list(self.kept)

    def _string(self, chunk: bytes, at: int) -> int:
        if self.escaped:  # the character after a backslash, whatever it is
            self._hold(chunk[at : at + 1])
            self.escaped = False
            return at + 1
        found = _STRING_END.search(chunk, at)
        end = len(chunk) if found is None else found.start()
        self._hold(chunk[at:end])
        if found is None:
            return end
        if chunk[end] == 0x5C:  # backslash
            self._hold(b"\\")
            self.escaped = True
            return end + 1
        self.in_string = False
        self._string_done()
        return end + 1

    def _hold(self, piece: bytes) -> None:
        if self.too_long:
            return
        if len(self.value) + len(piece) > MAX_VALUE_BYTES:
            self.too_long = True
            self.value.clear()
            return
        self.value += piece

    def _structure(self, chunk: bytes, at: int) -> int:
        token = _STRUCTURE.search(chunk, at)
        if token is None:
            return len(chunk)  # whitespace only
        char = token.group()
        if char == b'"':
            self.in_string, self.value, self.too_long = True, bytearray(), False
        elif char in (b"{", b"["):
            self._open(char)
        elif char in (b"}", b"]"):
            self._close(char)
        elif char == b",":
            self.expect_key = self.stack[-1:] == "{"
        elif char == b":":
            self.expect_key = False
        else:  # a number or literal: a value, never a name
            self._scalar_done()
        return token.end()

    def _open(self, char: bytes) -> None:
        if self.stack == "{" and self.keys[-1] == b"data":
            if char != b"[":
                raise ValueError("data is not an array")
            self.data_seen = True
        self.stack += char.decode()
        self.keys.append(None)
        self.expect_key = char == b"{"

    def _close(self, char: bytes) -> None:
        if not self.stack or self.stack[-1] != ("{" if char == b"}" else "["):
            raise ValueError("unbalanced answer")
        self.stack = self.stack[:-1]
        self.keys.pop()
        self.expect_key = False
        self._scalar_done()

    def _scalar_done(self) -> None:
        if self.stack == "{[" and self.keys[0] == b"data":
            raise ValueError("a data value that is not a string")

    def _string_done(self) -> None:
        raw = bytes(self.value)
        if self.stack[-1:] == "{" and self.expect_key:
            self.keys[-1] = None if self.too_long else raw
            return
        if self.stack == "{" and self.keys[0] == b"status":
            self.status = None if self.too_long else json.loads(b'"' + raw + b'"')
        elif self.stack == "{[" and self.keys[0] == b"data":
            self.values_read += 1
            if not self.too_long:
                self._offer(json.loads(b'"' + raw + b'"'))

    def _offer(self, value: str) -> None:
        if not self.accept(value):
            return
        at = bisect.bisect_left(self.kept, value)
        if at >= self.keep or (at < len(self.kept) and self.kept[at] == value):
            return
        self.kept.insert(at, value)
        del self.kept[self.keep :]
