"""The Raft groups of the topics created through the metadata, opened and closed while the node
runs, as the metadata image says (:mod:`raftcore.node.cluster_metadata`).

Each replica the image places on this node gets its directory (:mod:`raftcore.node.topic_dirs`)
and a :class:`~raftcore.node.group.RaftGroup` whose voters are the partition's replicas, as the
committed PartitionRecord lists them: the group's first voter set never comes from this node's
own configuration. A replica the image no longer places here (its topic deleted, or created
again under a new id) is closed, then its directory deleted.

At start the groups of the replica directories found on disk are opened with the node's other
groups, before the metadata log is read again; the first reconcile (once the image holds
everything committed) deletes those of topics deleted meanwhile.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import random
from typing import TYPE_CHECKING

from raftcore.node.clock import now_ms
from raftcore.node.config import NodeConfig
from raftcore.node.group import RaftGroup
from raftcore.node.replica_ledger import ReplicaLedger
from raftcore.node.topic_dirs import (
    ReplicaDirectory,
    make_replica_directory,
    remove_replica_directory,
    replica_directories,
    topic_directory,
)
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["TopicGroups", "replica_config"]

logger = logging.getLogger("raftcore.node.node")


def replica_config(config: NodeConfig, voters: tuple[int, ...]) -> NodeConfig:
    """The node's configuration for a group whose voters are ``voters`` and that drives no
    state machine: no snapshot triggers (retention and DeleteRecords may still ask for one)."""
    quorum = dataclasses.replace(
        config.quorum,
        voters=frozenset(voters),
        snapshot_min_records=0,
        snapshot_min_bytes=0,
        snapshot_interval_ms=0,
    )
    out = copy.copy(config)
    object.__setattr__(out, "quorum", quorum)
    return out


class TopicGroups:
    """The created topics' groups of ``node``, in ``node.extra_groups`` beside the metadata
    group (where the Raft RPCs find them) and in the node's Kafka broker (where clients do)."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self.replicas: dict[TopicPartition, ReplicaDirectory] = {}
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self.ledger: ReplicaLedger | None = None  # at start (found_on_disk)

    # ---- making a group ------------------------------------------------------------------------

    def _group(self, replica: ReplicaDirectory) -> RaftGroup:
        node = self.node
        group = RaftGroup(
            replica_config(node.config, replica.voters),
            replica.name,
            prefix=f"[node {node.node_id} {replica.name}]",
            metrics=node.metrics,
            address_book=node.address_book,
            clock=now_ms,
            fail=node._fail,
            rng=random.Random(),
            correlation_ids=node.correlation_ids,
            directory=replica.path,
        )
        group.partition.topic_id = replica.topic_id
        node.topic_ids.add(replica.name.topic, replica.topic_id)
        self.replicas[replica.name] = replica
        node.extra_groups[replica.name] = group
        node.kafka.partitions.append(group.partition)
        return group

    def found_on_disk(self, *, formatted_to_join: bool) -> None:
        """At start: a group for each replica directory in the data directory (opened with
        the node's other groups), and the ledger of the replicas made here
        (:mod:`raftcore.node.replica_ledger`)."""
        node = self.node
        self.ledger = ReplicaLedger(
            node.config.data_dir, formatted_to_join=formatted_to_join, prefix=node.prefix
        )
        for replica in replica_directories(node.config.data_dir):
            self._group(replica)
            self.ledger.known(replica.topic_id, replica.name)

    def _open(self, replica: ReplicaDirectory) -> None:
        node = self.node
        assert node._loop is not None
        group = self._group(replica)
        try:
            started = group.open(
                node._loop,
                directory_id=node.directory_id,
                joining=False,
                send=node.messaging.send,
            )[0]
        except BaseException:
            self._forget(replica.name, group)
            raise
        group.begin(started)
        logger.info(
            "%s opened %s (topic id %s) with voters %s",
            node.prefix,
            replica.name,
            replica.topic_id.hex(),
            list(replica.voters),
        )

    def _forget(self, name: TopicPartition, group: RaftGroup) -> None:
        node = self.node
        self.replicas.pop(name, None)
        node.extra_groups.pop(name, None)
        if group.partition in node.kafka.partitions:
            node.kafka.partitions.remove(group.partition)
        node.kafka.produce_groups.pop(id(group.partition), None)
        if not any(n.topic == name.topic for n in self.replicas):
            node.topic_ids.remove(name.topic)

    async def _close(self, name: TopicPartition) -> None:
        """Close the group of ``name`` and delete its directory."""
        node = self.node
        group = node.extra_groups[name]
        replica = self.replicas[name]
        self._forget(name, group)
        if self.ledger is not None:
            self.ledger.placed_here_no_more(replica.topic_id, name)
        node.messaging.group_closed(name)  # its parked fetches answered: nothing waits on it
        group.stop_timers()
        await group.close()
        await asyncio.get_running_loop().run_in_executor(
            None, remove_replica_directory, replica.path
        )
        logger.info("%s closed %s and deleted %s", node.prefix, name, replica.path)

    # ---- following the image -------------------------------------------------------------------

    def want_reconcile(self) -> None:
        """The image changed (or may be caught up now): reconcile, once at a time."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        node = self.node
        if node._stopping or not node._started or not node.metadata.caught_up():
            return
        self._task = asyncio.ensure_future(self._reconcile())

    async def _reconcile(self) -> None:
        node = self.node
        while True:
            self._again = False
            wanted: dict[TopicPartition, tuple[bytes, tuple[int, ...]]] = {}
            for topic, p in node.metadata.image.partitions():
                if node.node_id in p.replicas:
                    name = TopicPartition(topic, p.partition_id)
                    wanted[name] = (p.topic_id.raw, p.replicas)
            for name, replica in list(self.replicas.items()):
                if node._stopping:
                    return
                if wanted.get(name, (None,))[0] != replica.topic_id:
                    await self._close(name)
            ledger = self.ledger
            assert ledger is not None  # made at start
            ledger.placed_here({(topic_id, n) for n, (topic_id, _) in wanted.items()})
            for name, (topic_id, voters) in wanted.items():
                if node._stopping:
                    return
                if name in self.replicas or not ledger.may_make(topic_id, name):
                    continue
                try:
                    replica = make_replica_directory(
                        node.config.data_dir,
                        name,
                        cluster_id=node.config.cluster_id,
                        topic_id=topic_id,
                        voters=voters,
                    )
                    self._open(replica)
                    ledger.made_now(topic_id, name)
                except Exception as exc:
                    where = topic_directory(node.config.data_dir, name)
                    node._fail(f"cannot open the replica {name} at {where}: {exc}", exc)
                    return
            await asyncio.get_running_loop().run_in_executor(None, ledger.reconciled)
            if not self._again:
                return

    async def close(self) -> None:
        """The node stops: no reconcile runs any more."""
        if self._task is not None:
            self._task.cancel()
