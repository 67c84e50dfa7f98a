"""Kafka-style ``key=value`` property files, the node's ``--config`` and the clients'
``--command-config``: one property a line, ``#`` or ``!`` starts a comment line, blanks around
the key and the value are dropped. A line without ``=`` or a key given twice is an error naming
the file and the line."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["read_properties"]


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """The properties of ``path``; ValueError (one line) for a missing file or a bad line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {p}: {exc}") from None
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{p}:{number}: expected key=value, got {line!r}")
        if key in props:
            raise ValueError(f"{p}:{number}: {key} is set twice")
        props[key] = value.strip()
    return props
