"""Kafka message specs (the JSON format of Kafka's ``clients/src/main/resources/common/message``)
turned into Python classes, with an encoder and a decoder compiled per version.

A spec names the message, its ``validVersions`` and ``flexibleVersions``, and its fields (name,
type, versions, nullableVersions, taggedVersions/tag, default, nested fields, and
``commonStructs``). Each message and each nested struct becomes a class with ``__slots__``
named after the fields in snake_case (``FetchOffset`` -> ``fetch_offset``).

Wire rules (Kafka's MessageDataGenerator):
- fixed-width integers are big-endian; ``uuid`` is 16 bytes; ``bool`` one byte;
- non-flexible versions: strings have an int16 length, bytes/records an int32 length, arrays an
  int32 count; -1 means null;
- flexible versions: strings, bytes, records and arrays are "compact" -- an unsigned varint of
  length + 1, 0 meaning null -- and every struct ends with a tagged-field section: an unsigned
  varint count, then per field its tag, its size and its bytes. Tagged fields equal to their
  default are not written; unknown tags are skipped on read.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from raftcore.errors import RaftcoreError

__all__ = [
    "MessageSpec",
    "ProtocolError",
    "Reader",
    "Writer",
    "load_spec",
    "snake",
]

SPEC_DIR = Path(__file__).with_name("specs")


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


# ---- field types -------------------------------------------------------------------------------


@dataclass(slots=True)
class FieldSpec:
    name: str
    attr: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    flexible_override: Versions | None  # a field-level "flexibleVersions" (e.g. "none")
    struct: StructSpec | None = None  # for struct and array-of-struct fields
    null_default: bool = False  # "default": "null" (a struct or an array that starts as null)
    is_array: bool = field(init=False, default=False)  # decided once: asked per message

    def __post_init__(self) -> None:
        self.is_array = self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass(slots=True)
class StructSpec:
    name: str
    fields: list[FieldSpec]
    cls: type = field(default=object)


_FIXED = {
    "bool": (struct.Struct(">?"), False),
    "int8": (_I8, 0),
    "int16": (_I16, 0),
    "uint16": (_U16, 0),
    "int32": (_I32, 0),
    "uint32": (_U32, 0),
    "int64": (_I64, 0),
    "float64": (_F64, 0.0),
}
_ZERO_UUID = b"\x00" * 16


def _parse_default(ftype: str, text: Any, nullable: bool) -> Any:
    if text is None:
        if ftype.startswith("[]"):
            return []
        if ftype in _FIXED:
            return _FIXED[ftype][1]
        if ftype == "string":
            return ""
        if ftype in ("bytes", "records"):
            return None if ftype == "records" else b""
        if ftype == "uuid":
            return _ZERO_UUID
        return None  # a struct: built on demand
    text = str(text)
    if text == "null":
        return None
    if ftype == "bool":
        return text.lower() == "true"
    if ftype in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(text, 0)
    if ftype == "float64":
        return float(text)
    return text


class MessageSpec:
    """A parsed spec: the message's fields, its versions, and its generated class."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.name: str = data["name"]
        self.api_key: int | None = data.get("apiKey")
        self.type: str = data.get("type", "data")
        self.valid = Versions.parse(data["validVersions"])
        self.flexible = Versions.parse(data.get("flexibleVersions", "none"))
        self._common: dict[str, StructSpec] = {}
        for common in data.get("commonStructs", []):
            self._common[common["name"]] = StructSpec(common["name"], [])
        for common in data.get("commonStructs", []):
            self._common[common["name"]].fields = self._fields(common["fields"])
            self._common[common["name"]].cls = _make_class(
                common["name"], self._common[common["name"]].fields
            )
        self.root = StructSpec(self.name, self._fields(data["fields"]))
        self.root.cls = _make_class(self.name, self.root.fields)
        for spec in self._structs():
            setattr(self.root.cls, spec.name, spec.cls)
        self.root.cls._spec = self  # type: ignore[attr-defined]
        self._codecs: dict[int, tuple[Callable, Callable]] = {}

    def _fields(self, items: list[dict[str, Any]]) -> list[FieldSpec]:
        out = []
        for f in items:
            ftype = f["type"]
            nullable = Versions.parse(f.get("nullableVersions"))
            tagged = Versions.parse(f.get("taggedVersions"))
            spec = FieldSpec(
                name=f["name"],
                attr=snake(f["name"]),
                type=ftype,
                versions=Versions.parse(f.get("versions")),
                nullable=nullable,
                tagged=tagged,
                tag=f.get("tag"),
                default=_parse_default(ftype, f.get("default"), not nullable.empty),
                flexible_override=Versions.parse(f["flexibleVersions"])
                if "flexibleVersions" in f
                else None,
                null_default=str(f.get("default")) == "null",
            )
            element = spec.element
            if "fields" in f:
                struct_spec = StructSpec(element, self._fields(f["fields"]))
                struct_spec.cls = _make_class(element, struct_spec.fields)
                spec.struct = struct_spec
            elif element in self._common:
                spec.struct = self._common[element]
            elif element not in _FIXED and element not in ("string", "bytes", "records", "uuid"):
                raise ValueError(f"{self.name}: unknown type {ftype!r} of field {spec.name}")
            out.append(spec)
        return out

    def _structs(self) -> list[StructSpec]:
        seen: dict[str, StructSpec] = {}

        def walk(fields: list[FieldSpec]) -> None:
            for f in fields:
                if f.struct is not None and f.struct.name not in seen:
                    seen[f.struct.name] = f.struct
                    walk(f.struct.fields)

        walk(self.root.fields)
        return list(seen.values())

    @property
    def cls(self) -> type:
        return self.root.cls

    def codec(self, version: int) -> tuple[Callable, Callable]:
        """(encode(obj, writer), decode(reader) -> obj) for ``version``, compiled once."""
        pair = self._codecs.get(version)
        if pair is None:
            if version not in self.valid:
                raise ProtocolError(
                    f"{self.name} has no version {version} ({self.valid.low}-{self.valid.high})"
                )
            pair = self._codecs[version] = _compile(self.root, version, version in self.flexible)
        return pair

    def encode(self, obj: Any, version: int) -> Writer:
        writer = Writer()
        self.codec(version)[0](obj, writer)
        return writer

    def decode(self, buf: Any, version: int, reader: Reader | None = None) -> Any:
        r = reader if reader is not None else Reader(buf)
        return self.codec(version)[1](r)


def _make_class(name: str, fields: list[FieldSpec]) -> type:
    attrs = tuple(f.attr for f in fields)
    defaults = {f.attr: f for f in fields}

    def __init__(self: Any, **kwargs: Any) -> None:
        for attr, spec in defaults.items():
            value = kwargs.pop(attr) if attr in kwargs else _initial(spec)
            object.__setattr__(self, attr, value)
        if kwargs:
            raise TypeError(f"{name} has no field(s) {', '.join(sorted(kwargs))}")

    def __repr__(self: Any) -> str:
        inner = ", ".join(
            f"{a}={getattr(self, a)!r}"
            for a in attrs
            if not isinstance(getattr(self, a), (bytes, memoryview)) or len(getattr(self, a)) < 64
        )
        return f"{name}({inner})"

    def __eq__(self: Any, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for a in attrs:
            x, y = getattr(self, a), getattr(other, a)
            if isinstance(x, memoryview):
                x = bytes(x)
            if isinstance(y, memoryview):
                y = bytes(y)
            if x != y:
                return False
        return True

    return type(
        name,
        (),
        {
            "__slots__": attrs,
            "__init__": __init__,
            "__repr__": __repr__,
            "__eq__": __eq__,
            "__hash__": None,
            "_fields": attrs,
        },
    )


# ---- compiling a codec for one version -------------------------------------------------------


def _compile(spec: StructSpec, version: int, flexible: bool) -> tuple[Callable, Callable]:
    regular: list[tuple[FieldSpec, Callable, Callable]] = []
    tagged: list[tuple[FieldSpec, Callable, Callable]] = []
    for f in spec.fields:
        if version not in f.versions:
            continue
        compact = flexible if f.flexible_override is None else version in f.flexible_override
        nullable = version in f.nullable
        enc, dec = _field_codec(f, version, compact, nullable, flexible)
        if flexible and version in f.tagged:
            tagged.append((f, enc, dec))
        else:
            regular.append((f, enc, dec))
    cls = spec.cls
    tagged.sort(key=lambda t: t[0].tag)  # written in tag order
    tag_index = {f.tag: (f, dec) for f, _, dec in tagged}
    # the fields a decode does not read in this version start at their defaults (decided
    # once here, not per message)
    decoded = {f.attr for f, _, _ in regular}
    unread = [f for f in spec.fields if f.attr not in decoded]

    def encode(obj: Any, w: Writer) -> None:
        for f, enc, _ in regular:
            enc(getattr(obj, f.attr), w)
        if flexible:
            present = []
            for f, enc, _ in tagged:
                value = getattr(obj, f.attr)
                if not _is_default(f, value):
                    sub = Writer()
                    enc(value, sub)
                    present.append((f.tag, sub))
            w.uvarint(len(present))
            for tag, sub in present:
                w.uvarint(tag)
                w.uvarint(sub.size)
                for part in sub.parts:
                    w.put(part)

    def decode(r: Reader) -> Any:
        obj = cls.__new__(cls)
        for f, _, dec in regular:
            object.__setattr__(obj, f.attr, dec(r))
        for f in unread:
            object.__setattr__(obj, f.attr, _initial(f))
        if flexible:
            count = r.uvarint()
            for _ in range(count):
                tag = r.uvarint()
                size = r.uvarint()
                known = tag_index.get(tag)
                if known is None:
                    r.take(size, f"unknown tagged field {tag}")
                    continue
                end = r.pos + size
                if end > r.end:
                    raise ProtocolError(f"tagged field {tag} of {size} bytes runs past the end")
                sub = Reader(r.buf, r.pos, end)
                object.__setattr__(obj, known[0].attr, known[1](sub))
                r.pos = end
        return obj

    return encode, decode


def _initial(f: FieldSpec) -> Any:
    """A field's value in a new object: its default; a fresh empty list or struct."""
    if f.null_default:
        return None
    if f.is_array:
        return []
    if f.struct is not None:
        return f.struct.cls()
    return f.default


def _is_default(f: FieldSpec, value: Any) -> bool:
    """Whether a tagged field holds its default (and is then not written)."""
    if f.null_default:
        return value is None
    if f.is_array:
        return value is not None and len(value) == 0
    if f.struct is not None:
        return value == f.struct.cls()
    if isinstance(value, memoryview):
        value = bytes(value)
    return value == f.default


def _field_codec(
    f: FieldSpec, version: int, compact: bool, nullable: bool, flexible: bool
) -> tuple[Callable, Callable]:
    if f.is_array:
        return _array_codec(f, version, compact, nullable, flexible)
    if f.struct is not None:
        enc, dec = _compile(f.struct, version, flexible)
        if nullable:

            def enc_n(v: Any, w: Writer) -> None:
                if v is None:
                    w.put(b"\xff")
                else:
                    w.put(b"\x01")
                    enc(v, w)

            def dec_n(r: Reader) -> Any:
                return None if r.unpack(_I8, f.name) < 0 else dec(r)

            return enc_n, dec_n

        def enc_s(v: Any, w: Writer) -> None:
            if v is None:
                raise ProtocolError(f"field {f.name} is not nullable in this version")
            enc(v, w)

        return enc_s, dec
    return _primitive_codec(f.element, f.name, compact, nullable)


def _primitive_codec(t: str, name: str, compact: bool, nullable: bool) -> tuple[Callable, Callable]:
    if t in _FIXED:
        s = _FIXED[t][0]

        def enc(v: Any, w: Writer) -> None:
            try:
                w.put(s.pack(v))
            except struct.error:
                raise ProtocolError(f"field {name}: {v!r} does not fit {t}") from None

        def dec(r: Reader) -> Any:
            return r.unpack(s, name)

        return enc, dec
    if t == "uuid":

        def enc_u(v: Any, w: Writer) -> None:
            if len(v) != 16:
                raise ProtocolError(f"field {name}: a uuid is 16 bytes, got {len(v)}")
            w.put(bytes(v))

        def dec_u(r: Reader) -> Any:
            return bytes(r.take(16, name))

        return enc_u, dec_u
    if t == "string":

        def enc_s(v: Any, w: Writer) -> None:
            if v is None:
                if not nullable:
                    raise ProtocolError(f"field {name} is not nullable in this version")
                w.put(b"\x00" if compact else b"\xff\xff")
                return
            data = v.encode("utf-8")
            if compact:
                w.uvarint(len(data) + 1)
            else:
                if len(data) > 0x7FFF:
                    raise ProtocolError(f"field {name}: string of {len(data)} bytes is too long")
                w.put(_I16.pack(len(data)))
            w.put(data)

        def dec_s(r: Reader) -> Any:
            n = r.uvarint() - 1 if compact else r.unpack(_I16, name)
            if n < 0:
                if n != -1 or not nullable:
                    raise ProtocolError(f"field {name}: bad string length {n}")
                return None
            try:
                return bytes(r.take(n, name)).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"field {name} is not UTF-8: {exc}") from None

        return enc_s, dec_s
    if t in ("bytes", "records"):

        def enc_b(v: Any, w: Writer) -> None:
            if v is None:
                if not nullable:
                    raise ProtocolError(f"field {name} is not nullable in this version")
                w.put(b"\x00" if compact else b"\xff\xff\xff\xff")
                return
            if isinstance(v, memoryview) and v.itemsize != 1:
                v = v.cast("B")  # a length in bytes, not in items
            n = len(v)
            if compact:
                w.uvarint(n + 1)
            else:
                w.put(_I32.pack(n))
            if n:
                w.put(v if isinstance(v, (bytes, memoryview)) else bytes(v))

        def dec_b(r: Reader) -> Any:
            n = r.uvarint() - 1 if compact else r.unpack(_I32, name)
            if n < 0:
                if n != -1 or not nullable:
                    raise ProtocolError(f"field {name}: bad length {n}")
                return None
            return r.take(n, name)  # zero-copy view of the frame

        return enc_b, dec_b
    raise ValueError(f"unknown primitive type {t}")


def _array_codec(
    f: FieldSpec, version: int, compact: bool, nullable: bool, flexible: bool
) -> tuple[Callable, Callable]:
    if f.struct is not None:
        enc_e, dec_e = _compile(f.struct, version, flexible)
    else:
        enc_e, dec_e = _primitive_codec(f.element, f.name, compact, False)
    name = f.name

    def enc(v: Any, w: Writer) -> None:
        if v is None:
            if not nullable:
                raise ProtocolError(f"array {name} is not nullable in this version")
            w.put(b"\x00" if compact else b"\xff\xff\xff\xff")
            return
        if compact:
            w.uvarint(len(v) + 1)
        else:
            w.put(_I32.pack(len(v)))
        for item in v:
            enc_e(item, w)

    def dec(r: Reader) -> Any:
        n = r.uvarint() - 1 if compact else r.unpack(_I32, name)
        if n < 0:
            if n != -1 or not nullable:
                raise ProtocolError(f"array {name}: bad count {n}")
            return None
        if n > r.remaining():  # every element takes at least a byte
            raise ProtocolError(f"array {name} claims {n} elements, {r.remaining()} bytes left")
        return [dec_e(r) for _ in range(n)]

    return enc, dec


@cache
def load_spec(name: str) -> MessageSpec:
    """The spec ``specs/<name>.json`` (Kafka's JSON, comments allowed)."""
    text = (SPEC_DIR / f"{name}.json").read_text("utf-8")
    text = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)
    return MessageSpec(json.loads(text))
