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

The pieces live by idea: ``wire`` (ProtocolError, Versions, Reader, Writer), ``model`` (FieldSpec,
StructSpec and the generated classes), ``codegen`` (the codec in use: straight-line Python source
generated per message and version), ``closure_codec`` (the per-field closure compiler it
replaced, kept as the tests' reference); this module parses the JSON into a ``MessageSpec`` and
keeps the names importable from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from raftcore.protocol.codegen import compile_generated
from raftcore.protocol.model import _FIXED, FieldSpec, StructSpec, _make_class, _parse_default
from raftcore.protocol.wire import NONE, ProtocolError, Reader, Versions, Writer, snake

__all__ = [
    "NONE",
    "SPEC_DIR",
    "FieldSpec",
    "MessageSpec",
    "ProtocolError",
    "Reader",
    "StructSpec",
    "Versions",
    "Writer",
    "load_spec",
    "snake",
]

SPEC_DIR = Path(__file__).with_name("specs")


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
    def cls(self) -> Any:  # a class made from the spec at run time (see StructSpec.cls)
        return self.root.cls

    def codec(self, version: int) -> tuple[Callable, Callable]:
        """(encode(obj, writer), decode(reader) -> obj) for ``version``, compiled once."""
        pair = self._codecs.get(version)
        if pair is None:
            if version not in self.valid:
                raise ProtocolError(
                    f"{self.name} has no version {version} ({self.valid.low}-{self.valid.high})"
                )
            pair = self._codecs[version] = compile_generated(
                self.root, version, version in self.flexible
            )
        return pair

    def encode(self, obj: Any, version: int) -> Writer:
        writer = Writer()
        self.codec(version)[0](obj, writer)
        return writer

    def decode(self, buf: Any, version: int, reader: Reader | None = None) -> Any:
        r = reader if reader is not None else Reader(buf)
        return self.codec(version)[1](r)


@cache
def load_spec(name: str) -> MessageSpec:
    """The spec ``specs/<name>.json`` (Kafka's JSON, comments allowed)."""
    text = (SPEC_DIR / f"{name}.json").read_text("utf-8")
    text = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)
    return MessageSpec(json.loads(text))
