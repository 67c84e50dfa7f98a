"""The generated codec: straight-line Python source per (message, version), written from the same
spec model as the closure codec (as Kafka's MessageDataGenerator writes Java), exec'd once and
cached by ``MessageSpec.codec``.

Every struct of the message gets two functions:

- ``d<k>(buf, pos, end) -> (obj, pos)`` reads with ``struct.unpack_from`` at a local offset,
  checking every length against ``end`` first; a run of consecutive fixed-width fields (and uuids)
  is one ``unpack_from``; unsigned varints are read inline (one byte in the common case); bytes
  and records are views of the frame (no copy); unknown tagged fields are skipped;
- ``e<k>(obj, parts)`` appends the encoded pieces to ``parts``; a run of fixed-width fields is
  one ``pack``; large byte fields are appended as they are (joined once, by the caller).

The wire rules, the defaults of the fields a version does not carry, the errors (always
``ProtocolError``, never an ``IndexError`` or a ``struct.error``; a count or a length is checked
against what is left before anything is allocated) are those of ``closure_codec``, which the
tests keep as the reference: the two must agree byte for byte on every spec and version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from raftcore.protocol.model import FieldSpec, StructSpec, _is_default
from raftcore.protocol.wire import (
    _I16,
    _I32,
    ProtocolError,
    Reader,
    Writer,
    uvarint_bytes,
    uvarint_tail,
)

__all__ = ["compile_generated", "generate_source"]

_CODES = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}


# ---- helpers the generated code calls (only off the common path) ------------------------------


def _truncated(what: str, pos: int, n: int, end: int) -> ProtocolError:
    return ProtocolError(f"truncated {what}: need {n} bytes at {pos}, {end - pos} left")


def _fit_error(names: tuple[str, ...], types: tuple[str, ...], values: tuple) -> ProtocolError:
    """The error of the first value of a packed run that does not fit its type."""
    for name, t, v in zip(names, types, values, strict=True):
        try:
            struct.pack(">" + _CODES[t], v)
        except struct.error:
            return ProtocolError(f"field {name}: {v!r} does not fit {t}")
    return ProtocolError(f"fields {', '.join(names)}: {values!r} do not fit {types}")


_NAMESPACE: dict[str, Any] = {
    "ProtocolError": ProtocolError,
    "_StructError": struct.error,
    "_new": object.__new__,
    "_truncated": _truncated,
    "_uvtail": uvarint_tail,
    "_uvb": uvarint_bytes,
    "_fit_error": _fit_error,
    "_is_default": _is_default,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_I16": _I16,
    "_I32": _I32,
}


# ---- the generator ------------------------------------------------------------------------------


class _Source:
    """The lines of one generated function."""

    def __init__(self, first: str) -> None:
        self.lines = [first]
        self.depth = 1

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self) -> _Source:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1


class _Generator:
    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.ns: dict[str, Any] = dict(_NAMESPACE)
        self.functions: list[list[str]] = []
        self.structs: dict[int, int] = {}
        self.temps = 0

    def const(self, value: Any) -> str:
        name = f"K{len(self.ns)}"
        self.ns[name] = value
        return name

    def tmp(self, prefix: str = "t") -> str:
        self.temps += 1
        return f"{prefix}{self.temps}"

    def struct(self, spec: StructSpec) -> int:
        """The number k of ``d<k>``/``e<k>`` for ``spec``, generated on first use."""
        k = self.structs.get(id(spec))
        if k is not None:
            return k
        k = self.structs[id(spec)] = len(self.structs)
        regular: list[tuple[FieldSpec, bool, bool]] = []
        tagged: list[tuple[FieldSpec, bool, bool]] = []
        for f in spec.fields:
            if not (f.name.isidentifier() and f.attr.isidentifier()):  # both go into the source
                raise ValueError(f"{spec.name}: field name {f.name!r} is not an identifier")
            if self.version not in f.versions:
                continue
            compact = (
                self.flexible
                if f.flexible_override is None
                else self.version in f.flexible_override
            )
            item = (f, compact, self.version in f.nullable)
            (tagged if self.flexible and self.version in f.tagged else regular).append(item)
        tagged.sort(key=lambda t: t[0].tag or 0)  # written in tag order (a tagged field has one)
        self.decoder(k, spec, regular, tagged)
        self.encoder(k, regular, tagged)
        return k

    # ---- decoding ----

    def decoder(
        self,
        k: int,
        spec: StructSpec,
        regular: list[tuple[FieldSpec, bool, bool]],
        tagged: list[tuple[FieldSpec, bool, bool]],
    ) -> None:
        src = _Source(f"def d{k}(buf, pos, end):")
        src(f"o = _new({self.const(spec.cls)})")
        i = 0
        while i < len(regular):
            run = []
            while i < len(regular) and _decode_fixed(regular[i][0]):
                run.append(regular[i][0])
                i += 1
            if run:
                self.fixed_run(src, run)
                continue
            f, compact, nullable = regular[i]
            self.decode_field(src, f, compact, nullable, target=f"o.{f.attr}", end="end")
            i += 1
        read = {id(f) for f, _, _ in regular}
        for f in spec.fields:  # the fields not read in this version start at their defaults
            if id(f) not in read:
                src(f"o.{f.attr} = {self.initial(f)}")
        if self.flexible:
            count = self.tmp("c")
            self.uvarint(src, count, "end")
            src(f"for _ in range({count}):")
            src.indent()
            self.uvarint(src, "tag", "end")
            self.uvarint(src, "size", "end")
            for f, compact, nullable in tagged:
                src(f"if tag == {f.tag}:")
                src.indent()
                src("te = pos + size")
                src("if te > end:")
                src(
                    "    raise ProtocolError(f'tagged field {tag} of {size} bytes runs past "
                    "the end')"
                )
                self.decode_field(src, f, compact, nullable, target=f"o.{f.attr}", end="te")
                src("pos = te")
                src("continue")
                src.dedent()
            src("if pos + size > end:")
            src("    raise _truncated(f'unknown tagged field {tag}', pos, size, end)")
            src("pos += size")
            src.dedent()
        src("return o, pos")
        self.functions.append(src.lines)

    def initial(self, f: FieldSpec) -> str:
        if f.null_default:
            return "None"
        if f.is_array:
            return "[]"
        if f.struct is not None:
            return f"{self.const(f.struct.cls)}()"
        return self.const(f.default)

    def fixed_run(self, src: _Source, run: list[FieldSpec]) -> None:
        s = struct.Struct(">" + "".join(_CODES.get(f.type, "16s") for f in run))
        what = repr(run[0].name if len(run) == 1 else f"{run[0].name}..{run[-1].name}")
        src(f"if pos + {s.size} > end:")
        src(f"    raise _truncated({what}, pos, {s.size}, end)")
        if len(run) == 1:
            src(f"o.{run[0].attr} = {self.const(s)}.unpack_from(buf, pos)[0]")
        else:
            targets = ", ".join(f"o.{f.attr}" for f in run)
            src(f"{targets} = {self.const(s)}.unpack_from(buf, pos)")
        src(f"pos += {s.size}")

    def uvarint(self, src: _Source, target: str, end: str) -> None:
        src(f"if pos >= {end}:")
        src("    raise ProtocolError(f'truncated unsigned varint at {pos}')")
        src(f"{target} = buf[pos]")
        src("pos += 1")
        src(f"if {target} >= 0x80:")
        src(f"    {target}, pos = _uvtail(buf, pos, {end}, {target})")

    def length(
        self, src: _Source, target: str, compact: bool, *, wide: bool, name: str, end: str
    ) -> None:
        """A length or a count: a compact varint (minus one), an int32 (wide) or an int16."""
        if compact:
            self.uvarint(src, target, end)
            src(f"{target} -= 1")
            return
        size, s = (4, "_I32") if wide else (2, "_I16")
        src(f"if pos + {size} > {end}:")
        src(f"    raise _truncated({name!r}, pos, {size}, {end})")
        src(f"{target} = {s}.unpack_from(buf, pos)[0]")
        src(f"pos += {size}")

    def null_or(self, src: _Source, n: str, target: str, nullable: bool, message: str) -> None:
        """``if n < 0``: null where allowed, else an error (the caller writes the ``else``)."""
        src(f"if {n} < 0:")
        if nullable:
            src(f"    if {n} != -1:")
            src(f"        raise ProtocolError(f{message!r})")
            src(f"    {target} = None")
        else:
            src(f"    raise ProtocolError(f{message!r})")

    def decode_field(
        self, src: _Source, f: FieldSpec, compact: bool, nullable: bool, *, target: str, end: str
    ) -> None:
        if f.is_array:
            self.decode_array(src, f, compact, nullable, target=target, end=end)
        elif f.struct is not None:
            k = self.struct(f.struct)
            if nullable:
                src(f"if pos >= {end}:")
                src(f"    raise _truncated({f.name!r}, pos, 1, {end})")
                src("pos += 1")
                src("if buf[pos - 1] >= 0x80:")  # an int8 < 0: null
                src(f"    {target} = None")
                src("else:")
                src(f"    {target}, pos = d{k}(buf, pos, {end})")
            else:
                src(f"{target}, pos = d{k}(buf, pos, {end})")
        else:
            self.decode_primitive(
                src, f.element, f.name, compact, nullable=nullable, target=target, end=end
            )

    def decode_primitive(
        self,
        src: _Source,
        t: str,
        name: str,
        compact: bool,
        *,
        nullable: bool,
        target: str,
        end: str,
    ) -> None:
        if t in _CODES or t == "uuid":
            s = struct.Struct(">" + _CODES.get(t, "16s"))
            src(f"if pos + {s.size} > {end}:")
            src(f"    raise _truncated({name!r}, pos, {s.size}, {end})")
            src(f"{target} = {self.const(s)}.unpack_from(buf, pos)[0]")
            src(f"pos += {s.size}")
            return
        if t not in ("string", "bytes", "records"):
            raise ValueError(f"unknown primitive type {t}")
        n = self.tmp("n")
        self.length(src, n, compact, wide=t != "string", name=name, end=end)
        bad = f"field {name}: bad string length {{{n}}}" if t == "string" else None
        self.null_or(src, n, target, nullable, bad or f"field {name}: bad length {{{n}}}")
        src("else:")
        src.indent()
        src(f"if pos + {n} > {end}:")
        src(f"    raise _truncated({name!r}, pos, {n}, {end})")
        if t == "string":
            src("try:")
            src(f"    {target} = str(buf[pos : pos + {n}], 'utf-8')")
            src("except UnicodeDecodeError as exc:")
            src(f"    raise ProtocolError(f'field {name} is not UTF-8: {{exc}}') from None")
        else:
            src(f"{target} = buf[pos : pos + {n}]")  # a view of the frame
        src(f"pos += {n}")
        src.dedent()

    def decode_array(
        self, src: _Source, f: FieldSpec, compact: bool, nullable: bool, *, target: str, end: str
    ) -> None:
        c = self.tmp("c")
        self.length(src, c, compact, wide=True, name=f.name, end=end)
        self.null_or(src, c, target, nullable, f"array {f.name}: bad count {{{c}}}")
        src(f"elif {c} > {end} - pos:")  # every element takes at least a byte
        src(
            f"    raise ProtocolError(f'array {f.name} claims {{{c}}} elements, {{{end} - pos}} "
            "bytes left')"
        )
        src("else:")
        src.indent()
        element = f.element
        if f.struct is None and element in _CODES:
            code = _CODES[element]
            size = struct.calcsize(">" + code)
            src(f"if pos + {c} * {size} > {end}:")
            src(f"    raise _truncated({f.name!r}, pos, {c} * {size}, {end})")
            src(f"{target} = list(_unpack_from('>' + str({c}) + {code!r}, buf, pos))")
            src(f"pos += {c} * {size}")
            src.dedent()
            return
        items, e = self.tmp("l"), self.tmp("e")
        src(f"{items} = []")
        src(f"for _ in range({c}):")
        src.indent()
        if f.struct is not None:
            src(f"{e}, pos = d{self.struct(f.struct)}(buf, pos, {end})")
        else:
            self.decode_primitive(src, element, f.name, compact, nullable=False, target=e, end=end)
        src(f"{items}.append({e})")
        src.dedent()
        src(f"{target} = {items}")
        src.dedent()

    # ---- encoding ----

    def encoder(
        self,
        k: int,
        regular: list[tuple[FieldSpec, bool, bool]],
        tagged: list[tuple[FieldSpec, bool, bool]],
    ) -> None:
        src = _Source(f"def e{k}(o, parts):")
        src("app = parts.append")
        i = 0
        while i < len(regular):
            run = []
            while i < len(regular) and _encode_fixed(regular[i][0]):
                run.append(regular[i][0])
                i += 1
            if run:
                s = struct.Struct(">" + "".join(_CODES[f.type] for f in run))
                values = ", ".join(f"o.{f.attr}" for f in run)
                src("try:")
                src(f"    app({self.const(s)}.pack({values}))")
                src("except _StructError:")
                names = self.const(tuple(f.name for f in run))
                types = self.const(tuple(f.type for f in run))
                src(f"    raise _fit_error({names}, {types}, ({values},)) from None")
                continue
            f, compact, nullable = regular[i]
            self.encode_field(
                src, f, compact, nullable, value=f"o.{f.attr}", app="app", parts="parts"
            )
            i += 1
        if self.flexible and not tagged:
            src("app(b'\\x00')")  # no tagged field in this version
        elif self.flexible:
            src("tagged = []")
            for f, compact, nullable in tagged:
                v = self.tmp("v")
                src(f"{v} = o.{f.attr}")
                src(f"if not ({self.is_default(f, v)}):")
                src.indent()
                src("sub = []")
                self.encode_field(src, f, compact, nullable, value=v, app="sub.append", parts="sub")
                src(f"tagged.append(({f.tag}, sub))")
                src.dedent()
            src("app(_uvb(len(tagged)))")
            src("for tag, sub in tagged:")
            src("    app(_uvb(tag))")
            src("    app(_uvb(sum(map(len, sub))))")
            src("    parts.extend(sub)")
        src("return None")
        self.functions.append(src.lines)

    def is_default(self, f: FieldSpec, v: str) -> str:
        """An expression true when a tagged field holds its default (``model._is_default``,
        inline: that of a struct builds a new instance to compare with)."""
        if f.null_default:
            return f"{v} is None"
        if f.is_array:
            return f"{v} is not None and len({v}) == 0"
        if f.struct is None:
            return f"{v} == {self.const(f.default)}"
        tests = [f"type({v}) is {self.const(f.struct.cls)}"]
        for g in f.struct.fields:
            if g.null_default:
                tests.append(f"{v}.{g.attr} is None")
            elif g.is_array:
                tests.append(f"{v}.{g.attr} == []")
            elif g.struct is None:
                tests.append(f"{v}.{g.attr} == {self.const(g.default)}")
            else:
                return f"_is_default({self.const(f)}, {v})"
        return " and ".join(tests)

    def encode_field(
        self,
        src: _Source,
        f: FieldSpec,
        compact: bool,
        nullable: bool,
        *,
        value: str,
        app: str,
        parts: str,
    ) -> None:
        x = self.tmp("x")
        src(f"{x} = {value}")
        if f.is_array:
            src(f"if {x} is None:")
            if nullable:
                null = b"\x00" if compact else b"\xff\xff\xff\xff"
                src(f"    {app}({null!r})")
            else:
                src(f"    raise ProtocolError('array {f.name} is not nullable in this version')")
            src("else:")
            src.indent()
            src(f"{app}(_uvb(len({x}) + 1))" if compact else f"{app}(_I32.pack(len({x})))")
            element = f.element
            if f.struct is not None:
                k = self.struct(f.struct)
                src(f"for it in {x}:")
                src(f"    e{k}(it, {parts})")
            elif element in _CODES:
                code = _CODES[element]
                src("try:")
                src(f"    {app}(_pack('>' + str(len({x})) + {code!r}, *{x}))")
                src("except _StructError:")
                n = f"len({x})"
                src(
                    f"    raise _fit_error(({f.name!r},) * {n}, ({element!r},) * {n}, "
                    f"tuple({x})) from None"
                )
            else:
                it = self.tmp("i")
                src(f"for {it} in {x}:")
                src.indent()
                self.encode_primitive(src, element, f.name, compact, nullable=False, x=it, app=app)
                src.dedent()
            src.dedent()
        elif f.struct is not None:
            k = self.struct(f.struct)
            src(f"if {x} is None:")
            if nullable:
                src(f"    {app}(b'\\xff')")
                src("else:")
                src(f"    {app}(b'\\x01')")
                src(f"    e{k}({x}, {parts})")
            else:
                src(f"    raise ProtocolError('field {f.name} is not nullable in this version')")
                src(f"e{k}({x}, {parts})")
        else:
            self.encode_primitive(src, f.element, f.name, compact, nullable=nullable, x=x, app=app)

    def encode_primitive(
        self, src: _Source, t: str, name: str, compact: bool, *, nullable: bool, x: str, app: str
    ) -> None:
        if t in _CODES:
            s = self.const(struct.Struct(">" + _CODES[t]))
            src("try:")
            src(f"    {app}({s}.pack({x}))")
            src("except _StructError:")
            src(f"    raise ProtocolError(f'field {name}: {{{x}!r}} does not fit {t}') from None")
            return
        if t == "uuid":
            src(f"if len({x}) != 16:")
            src(f"    raise ProtocolError(f'field {name}: a uuid is 16 bytes, got {{len({x})}}')")
            src(f"{app}(bytes({x}))")
            return
        if t not in ("string", "bytes", "records"):
            raise ValueError(f"unknown primitive type {t}")
        src(f"if {x} is None:")
        if nullable:
            null = b"\x00" if compact else (b"\xff\xff" if t == "string" else b"\xff\xff\xff\xff")
            src(f"    {app}({null!r})")
        else:
            src(f"    raise ProtocolError('field {name} is not nullable in this version')")
        src("else:")
        src.indent()
        if t == "string":
            src(f"{x} = {x}.encode('utf-8')")
            if compact:
                src(f"{app}(_uvb(len({x}) + 1))")
            else:
                src(f"if len({x}) > 0x7FFF:")
                src(
                    f"    raise ProtocolError(f'field {name}: string of {{len({x})}} bytes is "
                    "too long')"
                )
                src(f"{app}(_I16.pack(len({x})))")
            src(f"{app}({x})")
        else:
            src(f"if isinstance({x}, memoryview) and {x}.itemsize != 1:")
            src(f"    {x} = {x}.cast('B')")  # a length in bytes, not in items
            src(f"{app}(_uvb(len({x}) + 1))" if compact else f"{app}(_I32.pack(len({x})))")
            src(f"if len({x}):")
            src(f"    {app}({x} if isinstance({x}, (bytes, memoryview)) else bytes({x}))")
        src.dedent()

    def source(self) -> str:
        return "\n\n".join("\n".join(lines) for lines in self.functions) + "\n"


def _decode_fixed(f: FieldSpec) -> bool:
    return not f.is_array and f.struct is None and (f.type in _CODES or f.type == "uuid")


def _encode_fixed(f: FieldSpec) -> bool:
    return not f.is_array and f.struct is None and f.type in _CODES


_ADAPTERS = """
def encode(obj, w):
    parts = w.parts
    start = len(parts)
    e0(obj, parts)
    w.size += sum(map(len, parts[start:]))


def decode(r):
    obj, r.pos = d0(r.buf, r.pos, r.end)
    return obj
"""


def generate_source(spec: StructSpec, version: int, flexible: bool) -> tuple[str, dict[str, Any]]:
    """The Python source of the codec of ``spec`` at ``version`` and the names it uses."""
    gen = _Generator(version, flexible)
    gen.struct(spec)
    return gen.source() + _ADAPTERS, gen.ns


def compile_generated(
    spec: StructSpec, version: int, flexible: bool
) -> tuple[Callable[[Any, Writer], None], Callable[[Reader], Any]]:
    """(encode(obj, writer), decode(reader) -> obj), the same interface as ``closure_codec``."""
    source, ns = generate_source(spec, version, flexible)
    exec(compile(source, f"<codec {spec.name} v{version}>", "exec"), ns)
    return ns["encode"], ns["decode"]
