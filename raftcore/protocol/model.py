"""The model of a parsed spec: fields (``FieldSpec``), structs (``StructSpec``), their defaults,
and the classes generated for them (``__slots__`` named after the fields in snake_case)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftcore.protocol.wire import _F64, _I8, _I16, _I32, _I64, _U16, _U32, Versions

__all__ = ["FieldSpec", "StructSpec"]


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
    # made at run time from the JSON spec: its fields and nested struct classes exist only
    # then, so the type checker sees Any
    cls: Any = field(default=object)


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


def _make_class(name: str, fields: list[FieldSpec]) -> type:
    attrs = tuple(f.attr for f in fields)
    __init__ = _make_init(name, fields)

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


_MISSING: Any = object()


def _make_init(name: str, fields: list[FieldSpec]) -> Callable[..., None]:
    """``__init__(self, *, field=..., ...)``, generated: keyword-only arguments, a field not
    given gets its default (immutable defaults as the argument's default; a fresh list or
    struct per object otherwise). Objects are built per request and per answer, and a loop
    over the fields with a dict of specs cost 5% of a busy leader's event loop."""
    params: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {"_MISSING": _MISSING, "_initial": _initial}
    for i, f in enumerate(fields):
        fresh = not f.null_default and (f.is_array or f.struct is not None)
        if fresh:
            env[f"_f{i}"] = f
            params.append(f"{f.attr}=_MISSING")
            fresh_value = f"_initial(_f{i}) if {f.attr} is _MISSING else {f.attr}"
            body.append(f"    self.{f.attr} = {fresh_value}")
        else:
            env[f"_d{i}"] = None if f.null_default else f.default
            params.append(f"{f.attr}=_d{i}")
            body.append(f"    self.{f.attr} = {f.attr}")
    for a in (f.attr for f in fields):
        if not a.isidentifier():
            raise ValueError(f"{name}: field name {a!r} is not an identifier")
    params.append("**_unknown")
    body.append("    if _unknown:")
    body.append(f"        _no_fields({name!r}, _unknown)")
    env["_no_fields"] = _no_fields
    source = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(compile(source, f"<init {name}>", "exec"), env)  # source generated from the spec
    init = env["__init__"]
    init.__qualname__ = f"{name}.__init__"
    return init  # type: ignore[no-any-return]


def _no_fields(name: str, unknown: dict[str, Any]) -> None:
    raise TypeError(f"{name} has no field(s) {', '.join(sorted(unknown))}")


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
