"""raftcore: an embeddable, Kafka-compatible Raft replicated log with a native storage engine."""

from raftcore._native.crc32c import crc32c

__version__ = "0.1.0"

__all__ = ["__version__", "crc32c"]
