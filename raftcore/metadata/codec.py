"""The primitives of Kafka's flexible message encoding that the metadata records use.

Compact strings and arrays carry an unsigned varint of length + 1 (0 is null); every struct
ends with a tagged-field section: a count, then (tag, size, bytes) for each field, tags in
increasing order. A reader that meets a tag it does not know skips it, as Kafka's do.

Every read is bounded by the bytes there are: a short or damaged value raises
:class:`~raftcore.errors.CorruptRecordError` naming the record and the byte, never an
assertion or an IndexError.
"""

from __future__ import annotations

import struct

from raftcore.errors import CorruptRecordError

__all__ = ["Reader", "Writer"]

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")

# A compact array of node ids longer than this is damage, not a cluster (Kafka's node ids are
# int32, but no cluster has a partition with more replicas than this).
MAX_ARRAY = 1 << 16


class Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def int8(self, n: int) -> None:
        self.out += _I8.pack(n)

    def int32(self, n: int) -> None:
        self.out += _I32.pack(n)

    def uvarint(self, n: int) -> None:
        while n >= 0x80:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def string(self, text: str | None) -> None:
        """A compact (nullable) string."""
        if text is None:
            self.uvarint(0)
            return
        data = text.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.out += data

    def raw(self, data: bytes) -> None:
        self.out += data

    def int32s(self, values: tuple[int, ...] | None) -> None:
        """A compact (nullable) array of int32."""
        if values is None:
            self.uvarint(0)
            return
        self.uvarint(len(values) + 1)
        for n in values:
            self.int32(n)

    def tags(self, fields: dict[int, bytes] | None = None) -> None:
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self.out += fields[tag]

    def value(self) -> bytes:
        return bytes(self.out)


class Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, problem: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.what}: {problem} at byte {self.pos}", self.pos)

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise self.fail(f"{n} bytes wanted, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int8(self) -> int:
        return _I8.unpack(self.take(1))[0]

    def int32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if shift > 28:
                raise self.fail("an unsigned varint longer than 5 bytes")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def _length(self, unit: int) -> int | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        if n * unit > len(self.data) - self.pos:
            raise self.fail(f"a length of {n} past the end")
        return n

    def string(self) -> str | None:
        n = self._length(1)
        if n is None:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string not in UTF-8") from None

    def int32s(self) -> tuple[int, ...] | None:
        n = self._length(4)
        if n is None:
            return None
        if n > MAX_ARRAY:
            raise self.fail(f"an array of {n} node ids")
        return struct.unpack(f">{n}i", self.take(4 * n))

    def tags(self) -> dict[int, bytes]:
        """The tagged fields, by tag; tags must increase, as Kafka writes them."""
        fields: dict[int, bytes] = {}
        last = -1
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if tag <= last:
                raise self.fail(f"tag {tag} after tag {last}")
            last = tag
            size = self.uvarint()
            fields[tag] = self.take(size)
        return fields

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} bytes after the end")
