"""The closure codec: an encoder and a decoder per (struct, version) built from nested closures,
one per field (``_compile``, ``_field_codec``, ``_primitive_codec``, ``_array_codec``)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from raftcore.protocol.model import _FIXED, FieldSpec, StructSpec, _initial, _is_default
from raftcore.protocol.wire import _I8, _I16, _I32, ProtocolError, Reader, Writer

__all__ = ["compile_closures"]


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
    cls: Any = spec.cls
    tagged.sort(key=lambda t: t[0].tag or 0)  # written in tag order (a tagged field has a tag)
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
                    present.append((f.tag or 0, sub))
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


compile_closures = _compile
