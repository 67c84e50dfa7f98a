"""raftcore: an embeddable, Kafka-compatible Raft replicated log with a native storage engine."""

__version__ = "0.1.0"  # before the import: raftcore._native compares it with an installed build

from raftcore._native.crc32c import crc32c

__all__ = ["__version__", "crc32c"]
