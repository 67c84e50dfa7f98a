"""The refusal of a metadata change, with Kafka's error code.

The controller refuses a request (CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs) with the error a Kafka client expects, and the image refuses a record
that contradicts what it holds with the same errors. The message is one line naming the topic,
partition, node or config involved.
"""

from __future__ import annotations

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError

__all__ = ["MetadataError"]


class MetadataError(RaftcoreError):
    """A metadata change refused; ``error`` is the Kafka error code to answer with."""

    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(f"{error.name}: {message}")
        self.error = error
        self.reason = message
