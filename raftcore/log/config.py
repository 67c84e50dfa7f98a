"""The log's configuration and the names of the files in its directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
DELETED_SUFFIX = ".deleted"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
# the committed offset the replica knew (raftcore.raft.committed; Kafka's
# replication-offset-checkpoint holds the same for each partition)
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOCK_FILE = ".lock"
CHECKPOINT_VERSION = 0
INT32_MAX = 0x7FFFFFFF


def segment_file_prefix(base_offset: int) -> str:
    """Kafka's segment file name: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


_KAFKA_LOG_CONFIG_NAMES = {
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Configuration of a segmented log; Kafka's names (``segment.bytes`` is
    ``segment_bytes``) and defaults, except where noted.

    - ``segment_bytes``: roll to a new segment when the active one would grow past this
      (Kafka ``segment.bytes``, default 1 GiB).
    - ``index_interval_bytes``: bytes appended between two offset-index entries
      (Kafka ``index.interval.bytes``, default 4096).
    - ``max_message_bytes``: the largest batch ``append_as_leader`` accepts. Default 8 MiB,
      KRaft's largest batch (Kafka's topic default is 1 MiB).
    - ``recovery_checkpoint_bytes``: after a flush, move the recovery point forward when at
      least this many bytes were made durable since it last moved (bounds the work of recovery
      after a crash). Default 64 MiB.
    """

    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    max_message_bytes: int = 8 << 20
    recovery_checkpoint_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"log config {f.name} must be an int, got {value!r}")
        if not 128 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(
                f"segment_bytes must be in [128, {INT32_MAX}], got {self.segment_bytes}"
            )
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        if self.max_message_bytes < 61:
            raise ValueError(f"max_message_bytes must be >= 61, got {self.max_message_bytes}")
        if self.recovery_checkpoint_bytes < 0:
            raise ValueError("recovery_checkpoint_bytes must be >= 0")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> LogConfig:
        """Build from Kafka-style names (``segment.bytes``) or field names."""
        kwargs: dict[str, int] = {}
        names = {f.name for f in fields(cls)}
        for key, value in props.items():
            name = _KAFKA_LOG_CONFIG_NAMES.get(key, key)
            if name not in names:
                raise ValueError(f"unknown log config {key!r}")
            kwargs[name] = int(value)
        return cls(**kwargs)
