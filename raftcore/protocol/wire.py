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
        value = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise ProtocolError(f"truncated unsigned varint at {self.pos}")
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise ProtocolError(f"unsigned varint too long at {self.pos}")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def take(self, n: int, what: str) -> memoryview:
        pos = self._need(n, what)
        return self.buf[pos : pos + n]

    def remaining(self) -> int:
        return self.end - self.pos


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


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
        if 0 <= value < 0x80:  # most lengths and counts: one byte, made once
            self.put(_ONE_BYTE[value])
            return
        if value < 0:
            raise ProtocolError(f"unsigned varint of a negative value {value}")
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.put(bytes(out))

    def varint(self, value: int) -> None:
        self.uvarint((value << 1) ^ (value >> 63))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)
