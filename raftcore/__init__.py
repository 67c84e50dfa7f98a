"""raftcore: an embeddable, Kafka-compatible Raft replicated log with a native storage engine."""

__version__ = "0.1.0"  # before the import: raftcore._native compares it with an installed build

import logging

from raftcore._native.crc32c import crc32c

# A library prints nothing of its own: an application that configured no logging would
# otherwise see every WARNING on stderr (Python's last-resort handler). An application that
# configures logging (or `raftcore node`) gets every line through the root logger as before.
logging.getLogger("raftcore").addHandler(logging.NullHandler())

__all__ = ["__version__", "crc32c"]
