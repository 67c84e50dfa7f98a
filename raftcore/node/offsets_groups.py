"""The node's hook for consumer groups: the partitions of the internal topic
``__consumer_offsets`` as Raft groups of the node, and the group coordinators on them.

- ``NodeConfig.offsets_topic_num_partitions`` partitions (Kafka's
  ``offsets.topic.num.partitions``), each a Raft group over the same voters as the node's
  topic, kept in ``<data_dir>/__consumer_offsets-<p>/`` (partition 0 too: the data directory
  itself is partition 0 of the node's topic). They are made at the first start with an empty
  quorum-state, and ``__consumer_offsets.partitions`` in the data directory records their
  count; a later start refuses another count (a group's partition would change, and with it
  where its offsets are) and a partition's directory gone missing (its quorum-state, hence
  its votes, would be lost).
- They are not the node's topic: Metadata, Produce and Fetch do not serve them
  (:class:`~raftcore.kafka.partition.Broker` lists only the topic's partitions).
- Their log is never trimmed: retention and snapshots are off for them, so that the replay of
  the log at start (:mod:`raftcore.node.coordinator_shard`) sees every commit. What bounds it
  is the commits themselves: one record per committed partition per commit.
- A group's coordinator is the leader of partition abs(hash(group id)) mod N, with Java's
  ``String.hashCode`` as Kafka computes it, so the same group maps to the same partition
  number as on Kafka; it moves with that partition's leadership.
- One ticker per node drives every coordinator's deadlines (sessions, joins, syncs): it
  sleeps until the earliest, and is woken after every step. No timer per group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.groups.config import GroupConfig
from raftcore.node.coordinator_shard import CoordinatorShard
from raftcore.node.group import RaftGroup
from raftcore.raft.quorum_store import FileQuorumStateStore
from raftcore.raft.retention import RetentionConfig
from raftcore.raft.values import ElectionState
from raftcore.topic_partition import OFFSETS_TOPIC, TopicPartition

if TYPE_CHECKING:
    from raftcore.node.config import NodeConfig
    from raftcore.node.node import RaftNode

__all__ = ["GroupCoordinators", "attach", "coordinator_partition", "java_string_hashcode"]

logger = logging.getLogger(__name__)

COUNT_FILE = "__consumer_offsets.partitions"


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a
    signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` (its abs maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def offsets_directory(data_dir: Path, partition: int) -> Path:
    return data_dir / f"{OFFSETS_TOPIC}-{partition}"


def prepare_directories(cfg: NodeConfig) -> None:
    """Make the partitions' directories at the first start; refuse (RaftcoreError, one line)
    another count than the first, or a partition's directory gone."""
    count_file = cfg.data_dir / COUNT_FILE
    wanted = cfg.offsets_topic_num_partitions
    if count_file.exists():
        text = count_file.read_text(encoding="utf-8").strip()
        if text != str(wanted):
            raise RaftcoreError(
                f"{count_file}: __consumer_offsets has {text} partitions here, not "
                f"--offsets-topic-num-partitions {wanted}; refusing to start (the count is "
                "fixed at the first start: each group's offsets live in partition "
                "hash(group) mod count)"
            )
        for p in range(wanted):
            directory = offsets_directory(cfg.data_dir, p)
            if not directory.is_dir():
                raise RaftcoreError(
                    f"{directory} is missing; refusing to start (its quorum-state, and so "
                    "its votes, are lost; wipe and re-format the node to bring it back)"
                )
        return
    for p in range(wanted):
        directory = offsets_directory(cfg.data_dir, p)
        directory.mkdir(exist_ok=True)
        store = FileQuorumStateStore(directory, cluster_id=cfg.cluster_id)
        if store.read() is None:
            store.write(ElectionState(epoch=0))
    tmp = count_file.with_suffix(".tmp")
    tmp.write_text(f"{wanted}\n", encoding="utf-8")
    tmp.replace(count_file)


def _group_config(cfg: NodeConfig) -> NodeConfig:
    """The node's settings for an offsets partition: no retention, no snapshots (the
    coordinator replays the whole log)."""
    quorum = dataclasses.replace(
        cfg.quorum,
        snapshot_min_records=0,
        snapshot_min_bytes=0,
        snapshot_interval_ms=0,
        snapshots_on_request=False,
    )
    return dataclasses.replace(cfg, retention=RetentionConfig(), quorum=quorum)


def wall_clock_ms() -> int:
    """The coordinators' clock: wall time, as Kafka's (commit timestamps are read by tools)."""
    return int(time.time() * 1000)


class GroupCoordinators:
    """The node's coordinators, one per offsets partition, and where a group's is."""

    def __init__(
        self,
        cfg: NodeConfig,
        shards: list[CoordinatorShard],
        endpoint_of: Callable[[int], Endpoint | None],
    ) -> None:
        self.partitions = cfg.offsets_topic_num_partitions
        self.shards = shards
        self._endpoint_of = endpoint_of
        self._wake = asyncio.Event()
        self._ticker: asyncio.Task[None] | None = None

    def shard_of(self, group_id: str) -> CoordinatorShard:
        return self.shards[coordinator_partition(group_id, self.partitions)]

    def locate(self, group_id: str) -> tuple[Errors, int, Endpoint | None]:
        """FindCoordinator: (error, node id, its client endpoint) of the leader of the
        group's offsets partition; COORDINATOR_NOT_AVAILABLE while it has no known leader
        (or its address is not known here)."""
        group = self.shard_of(group_id).group
        if group is None or group.core is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, None
        leader = group.leader_hint.leader_id
        if leader is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, None
        endpoint = self._endpoint_of(leader)
        if endpoint is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, None
        return Errors.NONE, leader, endpoint

    def coordinating(self) -> list[CoordinatorShard]:
        """The shards this node coordinates now."""
        return [s for s in self.shards if s.coordinator is not None]

    # ---- the one ticker ----------------------------------------------------------------------

    def changed(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while True:
            now = wall_clock_ms()
            due = [d for s in self.shards if (d := s.next_deadline()) is not None]
            wait_s = 1.0 if not due else min(max(0.0, (min(due) - now) / 1000), 1.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)
            self._wake.clear()
            now = wall_clock_ms()
            for shard in self.shards:
                deadline = shard.next_deadline()
                if deadline is None or deadline > now:
                    continue
                try:
                    shard.poll()
                except Exception:  # a bug in the coordinator: said, and the others go on
                    logger.exception(
                        "%s the coordinator's poll failed; not coordinating", shard.prefix
                    )
                    shard.close()  # its groups hear COORDINATOR_LOAD_IN_PROGRESS from here on

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for shard in self.shards:
            shard.close()


def attach(node: RaftNode, rng: random.Random | None) -> GroupCoordinators:
    """Add the offsets partitions' Raft groups to ``node.extra_groups`` (beside the metadata
    group's: they are not the node's topic) and hand the broker their coordinators."""
    cfg = node.config
    group_cfg = _group_config(cfg)
    settings = GroupConfig(group_initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms)
    shards: list[CoordinatorShard] = []
    coordinators = GroupCoordinators(cfg, shards, node.address_book.client_endpoint_of)
    for p in range(cfg.offsets_topic_num_partitions):
        name = TopicPartition(OFFSETS_TOPIC, p)
        prefix = f"[node {cfg.node_id} {name}]"
        shard = CoordinatorShard(
            cfg.node_id,
            p,
            settings,
            clock=wall_clock_ms,
            rng=random.Random(None if rng is None else rng.getrandbits(64)),
            prefix=prefix,
            changed=coordinators.changed,
        )
        group = RaftGroup(
            group_cfg,
            name,
            prefix=prefix,
            metrics=node.metrics,
            address_book=node.address_book,
            clock=node.group.clock,
            fail=node._fail,
            listener=shard,
            rng=None if rng is None else random.Random(rng.getrandbits(64)),
            correlation_ids=node.correlation_ids,
            directory=offsets_directory(cfg.data_dir, p),
        )
        shard.group = group
        shards.append(shard)
        node.extra_groups[name] = group
    node.topic_ids.add(OFFSETS_TOPIC, cfg.offsets_topic_id)  # the Raft RPCs name it so
    node.kafka.coordinators = coordinators
    return coordinators
