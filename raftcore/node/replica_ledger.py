"""Which replicas of created topics a node has made, and which it refuses to make: so that a
replica that lost its directory never comes back empty as the voter it was.

A created topic's partition group knows its voters by node id only. A replica that forgot
its log and its votes (a wiped disk, a deleted directory) and came back as the same voter
could help elect a leader that lacks records acknowledged before, so the node makes a
replica's directory only when it never had one:

- every replica made is recorded (``made``); one recorded whose directory is gone is refused,
  with one ERROR line;
- a node formatted to join (``raftcore format --no-initial-voters``: a new or a replacing
  node) refuses, at its first reconcile with the metadata, every replica the metadata already
  placed on its node id: those were placed on the node it replaces. Replicas placed on it
  later are made as usual.

Refused replicas (``refused``) stay refused across restarts; their partitions run with their
other replicas until the replica is moved (reassignment is not there yet). The ledger is
``replicas.json`` in the data directory, written atomically after each change; a node that
has none has not reconciled yet.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from raftcore.checkpoint import write_atomically
from raftcore.errors import RaftcoreError
from raftcore.topic_partition import TopicPartition

__all__ = ["LEDGER_FILE", "ReplicaLedger"]

logger = logging.getLogger("raftcore.node.node")

LEDGER_FILE = "replicas.json"


def _key(topic_id: bytes, partition: int) -> str:
    return f"{topic_id.hex()}:{partition}"


class ReplicaLedger:
    def __init__(self, data_dir: Path, *, formatted_to_join: bool, prefix: str = "") -> None:
        self.path = data_dir / LEDGER_FILE
        self.formatted_to_join = formatted_to_join
        self.prefix = prefix
        self.made: set[str] = set()
        self.refused: set[str] = set()
        self.first = True  # no reconcile recorded yet
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.made = set(data["made"])
                self.refused = set(data["refused"])
            except (ValueError, KeyError, TypeError) as exc:
                raise RaftcoreError(f"{self.path} is damaged ({exc}); restore it") from None
            self.first = False

    def known(self, topic_id: bytes, name: TopicPartition) -> None:
        """A replica found on disk: it was made here."""
        self.made.add(_key(topic_id, name.partition))

    def may_make(self, topic_id: bytes, name: TopicPartition) -> bool:
        """Whether the node may make the replica ``name`` the metadata places on it and that
        has no directory here; a refusal is recorded and logged once."""
        key = _key(topic_id, name.partition)
        if key in self.refused:
            return False
        if key in self.made:
            why = (
                "its directory is gone; made again it would come back empty as the voter it "
                "was (it may have voted and acknowledged records), so it is not: restore the "
                "directory, or move the replica to another node"
            )
        elif self.first and self.formatted_to_join:
            why = (
                "this node was formatted to join, and the metadata placed the replica on its "
                "node id before: on the node it replaces, whose votes and records it does not "
                "have, so it is not made here (move the replica to another node)"
            )
        else:
            return True
        self.refused.add(key)
        logger.error("%s refusing to make the replica %s: %s", self.prefix, name, why)
        return False

    def made_now(self, topic_id: bytes, name: TopicPartition) -> None:
        self.made.add(_key(topic_id, name.partition))

    def placed_here(self, placed: set[tuple[bytes, TopicPartition]]) -> None:
        """The replicas the metadata places on this node now: refusals of the others (their
        topic deleted, the replica moved) are forgotten, so the ledger stays their size."""
        self.refused &= {_key(topic_id, name.partition) for topic_id, name in placed}

    def placed_here_no_more(self, topic_id: bytes, name: TopicPartition) -> None:
        """The replica was closed and its directory deleted (its topic deleted)."""
        self.made.discard(_key(topic_id, name.partition))

    def reconciled(self) -> None:
        """A reconcile ended: record what it decided (and that one ran)."""
        self.first = False
        data = {"made": sorted(self.made), "refused": sorted(self.refused)}
        write_atomically(self.path, json.dumps(data, indent=1).encode() + b"\n")
