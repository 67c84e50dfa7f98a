"""The topics a node replicates by name and by id, for the Raft RPCs on the wire: a replica
Fetch names its topic by id (Fetch v13+, KIP-516), the other RPCs by name.

The node's own topic (``NodeConfig.topic``) has the id derived from the cluster id
(:attr:`NodeConfig.topic_id`); ``__cluster_metadata`` has Kafka's fixed metadata topic id; a
topic created at run time has the id its TopicRecord gave it. An entry is added before the
topic's first group opens and removed after its last group closed, so a request for a topic
not known here never reaches a core (raftcore.node.raft_wire answers it)."""

from __future__ import annotations

__all__ = ["METADATA_TOPIC", "METADATA_TOPIC_ID", "TopicIds"]

METADATA_TOPIC = "__cluster_metadata"
# Kafka's Uuid.METADATA_TOPIC_ID: all zeros but the last bit (a reserved id, never a topic's)
METADATA_TOPIC_ID = bytes(15) + b"\x01"


class TopicIds:
    """Topic name <-> 16-byte topic id, for the topics this node has groups of."""

    __slots__ = ("_by_id", "_by_name")

    def __init__(self) -> None:
        self._by_name: dict[str, bytes] = {}
        self._by_id: dict[bytes, str] = {}

    def add(self, name: str, topic_id: bytes) -> None:
        held = self._by_name.get(name)
        if held is not None and held != topic_id:
            raise ValueError(f"topic {name} has id {held.hex()} here, not {topic_id.hex()}")
        self._by_name[name] = topic_id
        self._by_id[topic_id] = name

    def remove(self, name: str) -> None:
        topic_id = self._by_name.pop(name, None)
        if topic_id is not None:
            self._by_id.pop(topic_id, None)

    def id_of(self, name: str) -> bytes | None:
        return self._by_name.get(name)

    def name_of(self, topic_id: bytes) -> str | None:
        return self._by_id.get(topic_id)
