"""The wire primitives of Kafka's protocol: ``ProtocolError``, version ranges, a bounds-checked
``Reader`` and a ``Writer`` that collects pieces (see ``schema`` for the wire rules)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from raftcore.errors import RaftcoreError

__all__ = ["NONE", "ProtocolError", "Reader", "Versions", "Writer", "snake"]


class ProtocolError(RaftcoreError, ValueError):
    """Bytes that do not decode as the message they claim to be (or a value that cannot be
    encoded): truncated, an impossible length, a bad version."""


# ---- versions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int  # inclusive; 32767 for "N+"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), 0x7FFF)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


NONE = Versions(1, 0)


def snake(name: str) -> str:
    """``FetchOffset`` -> ``fetch_offset``; ``ClusterId`` -> ``cluster_id``."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


# ---- reading and writing -----------------------------------------------------------------------

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


class Reader:
    """Reads fields from a buffer, checking every length against what is left."""

    __slots__ = ("buf", "end", "pos")

    def __init__(
        self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
    ) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ProtocolError(f"truncated {what}: need {n} bytes at {pos}, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def unpack(self, s: struct.Struct, what: str) -> Any:
        pos = self._need(s.size, what)
        return s.unpack_from(self.buf, pos)[0]

    def uvarint(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise ProtocolError(f"truncated unsigned varint at {pos}")
        first = self.buf[pos]
        if first < 0x80:
            self.pos = pos + 1
            return first
        value, self.pos = uvarint_tail(self.buf, pos + 1, self.end, first)
        return value

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def take(self, n: int, what: str) -> memoryview:
        pos = self._need(n, what)
        return self.buf[pos : pos + n]

    def remaining(self) -> int:
        return self.end - self.pos


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def uvarint_tail(buf: Any, pos: int, end: int, first: int) -> tuple[int, int]:
    """The rest of an unsigned varint whose first byte (``first``, >= 0x80, at ``pos - 1``)
    is read: (value, position after it). The generated codec reads the first byte inline."""
    start = pos - 1
    value = first & 0x7F
    shift = 7
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated unsigned varint at {start}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError(f"unsigned varint too long at {start}")


def uvarint_bytes(value: int) -> bytes:
    """An unsigned varint; most lengths and counts are one byte, made once."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        raise ProtocolError(f"unsigned varint of a negative value {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Writer:
    """Collects encoded pieces; large byte fields (records) are kept as views, not copied,
    until the frame is joined."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def put(self, data: bytes | memoryview) -> None:
        self.parts.append(data)
        self.size += len(data)

    def uvarint(self, value: int) -> None:
        self.put(uvarint_bytes(value))

    def varint(self, value: int) -> None:
        self.uvarint((value << 1) ^ (value >> 63))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)
