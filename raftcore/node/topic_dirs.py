"""The directories of the Raft groups a node opens at run time: the metadata group
(``__cluster_metadata-0/``) and each replica of a topic created through the metadata
(``<topic>-<partition>/``), beside the directories of ``NodeConfig.topic``.

A replica's directory holds, besides its quorum-state and ``log/``, ``partition.properties``:
the topic id and the replicas its group runs with as voters, copied from the committed
PartitionRecord that placed the replica here. It is written last, when the directory is made,
and never changed: a directory without it was left half made (a crash) and is made again from
the record; with it, the node opens the group at its next start before the metadata log is
read again, with the same voters. A node never makes itself a voter of an empty log from its
own configuration: a topic partition's first voter set comes only from a committed record.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from raftcore.checkpoint import write_atomically
from raftcore.errors import RaftcoreError
from raftcore.node.data_dir import group_directory
from raftcore.raft.quorum_store import FileQuorumStateStore
from raftcore.raft.values import ElectionState
from raftcore.topic_partition import TopicPartition

__all__ = [
    "PARTITION_PROPERTIES",
    "ReplicaDirectory",
    "make_replica_directory",
    "read_replica_directory",
    "remove_replica_directory",
    "replica_directories",
    "topic_directory",
]

PARTITION_PROPERTIES = "partition.properties"


@dataclass(frozen=True, slots=True)
class ReplicaDirectory:
    """A replica's directory as ``partition.properties`` names it."""

    name: TopicPartition
    topic_id: bytes
    voters: tuple[int, ...]  # the replicas, preferred leader first
    path: Path


def topic_directory(data_dir: Path, name: TopicPartition) -> Path:
    """``<data-dir>/<topic>-<partition>/`` (Kafka's log directory name), for every partition of
    a topic other than ``NodeConfig.topic`` (whose partition 0 is the data directory itself)."""
    path = group_directory(data_dir, name.topic, max(name.partition, 1))  # checks the name
    return path.parent / f"{name.topic}-{name.partition}"


def make_replica_directory(
    data_dir: Path,
    name: TopicPartition,
    *,
    cluster_id: str,
    topic_id: bytes,
    voters: tuple[int, ...],
) -> ReplicaDirectory:
    """Make the directory of a new replica: an empty quorum-state, then ``partition.properties``
    (written last: its presence says the directory is whole). What a crash left half made is
    replaced."""
    path = topic_directory(data_dir, name)
    if path.exists() and not (path / PARTITION_PROPERTIES).is_file():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    FileQuorumStateStore(path, cluster_id=cluster_id).write(ElectionState(epoch=0))
    write_atomically(
        path / PARTITION_PROPERTIES,
        (
            f"version=0\ntopic={name.topic}\npartition={name.partition}\n"
            f"topic.id={topic_id.hex()}\nvoters={','.join(str(v) for v in voters)}\n"
        ).encode(),
    )
    return ReplicaDirectory(name, topic_id, tuple(voters), path)


def read_replica_directory(path: Path) -> ReplicaDirectory | None:
    """What ``path/partition.properties`` says (None: there is none, the directory is not a
    whole replica's); RaftcoreError, one line naming the file, when it cannot be read."""
    file = path / PARTITION_PROPERTIES
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    try:
        name = TopicPartition(props["topic"], int(props["partition"]))
        topic_id = bytes.fromhex(props["topic.id"])
        voters = tuple(int(v) for v in props["voters"].split(",") if v.strip())
    except (KeyError, ValueError) as exc:
        raise RaftcoreError(f"{file}: not a replica's properties ({exc}); refusing it") from None
    if len(topic_id) != 16 or not voters:
        raise RaftcoreError(f"{file}: no topic id or no voters; refusing it")
    return ReplicaDirectory(name, topic_id, voters, path)


def replica_directories(data_dir: Path) -> list[ReplicaDirectory]:
    """The whole replica directories in ``data_dir``, by name (those of ``NodeConfig.topic``
    and the metadata group have no ``partition.properties``)."""
    found = []
    for path in sorted(data_dir.iterdir()):
        if not path.is_dir():
            continue
        replica = read_replica_directory(path)
        if replica is not None and replica.path.name == f"{replica.name}":
            found.append(replica)
    return found


def remove_replica_directory(path: Path) -> None:
    """Delete a replica's directory: ``partition.properties`` first, so that a crash midway
    leaves a directory that is no replica's (made again, or ignored), never half a log that
    would be opened."""
    (path / PARTITION_PROPERTIES).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
