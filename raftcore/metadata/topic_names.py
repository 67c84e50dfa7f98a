"""Kafka's rules for a topic name (``org.apache.kafka.common.internals.Topic``).

A name is 1 to 249 characters of ``[a-zA-Z0-9._-]``, and neither ``.`` nor ``..`` (a
partition's directory is ``<topic>-<partition>``, so the name is a path component). Kafka's
metrics write ``.`` as ``_``, so two names that differ only there collide: the second is
refused while the first exists.
"""

from __future__ import annotations

import re

from raftcore.error_codes import Errors
from raftcore.metadata.errors import MetadataError

__all__ = ["MAX_NAME_LENGTH", "check_topic_name", "collision_key"]

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(name: str) -> None:
    """Refuse an illegal name with INVALID_TOPIC_EXCEPTION, saying why."""
    problem = None
    if not name:
        problem = "the empty string is not allowed"
    elif name in (".", ".."):
        problem = f"{name!r} is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        problem = f"a name of {len(name)} characters is longer than {MAX_NAME_LENGTH}"
    elif not _LEGAL.fullmatch(name):
        problem = "only ASCII letters, digits, '.', '_' and '-' are allowed"
    if problem is not None:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise MetadataError(Errors.INVALID_TOPIC_EXCEPTION, f"topic {shown!r}: {problem}")


def collision_key(name: str) -> str:
    """Names with the same key collide in Kafka's metric names."""
    return name.replace(".", "_")
