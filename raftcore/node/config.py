"""Configuration of a node: who it is, where it listens, the voters (or the servers to join
through), the data directory, and the quorum, log and flush settings."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from raftcore.endpoints import Endpoint, parse_endpoint, parse_endpoints, parse_voters
from raftcore.log import LogConfig
from raftcore.node.connection_limits import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    QUEUED_MAX_REQUEST_BYTES,
)
from raftcore.raft.config import QuorumConfig
from raftcore.raft.retention import RetentionConfig
from raftcore.security.config import ListenerSecurity

__all__ = [
    "Endpoint",
    "NodeConfig",
    "parse_endpoint",
    "parse_endpoints",
    "parse_principals",
    "parse_voters",
]


def parse_principals(text: str) -> frozenset[str]:
    """``User:alice,User:ops`` (Kafka's ``super.users``, comma separated)."""
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    for name in names:
        kind, sep, rest = name.partition(":")
        if not sep or kind != "User" or not rest:
            raise ValueError(f"expected User:<name> in the principal list, got {name!r}")
    return names


@dataclass(frozen=True)
class NodeConfig:
    """A node of a raftcore cluster.

    - ``voters``: every voter's id and endpoint (the same list on every node): the first voter
      set of a new cluster (kraft.version 0; the cluster moves its voter set into the log by
      itself once every voter runs a release that can, see :mod:`raftcore.raft.reconfig`);
    - ``bootstrap``: instead of ``voters``, the addresses of nodes of an existing cluster to
      join through (Kafka's ``controller.quorum.bootstrap.servers``): the node starts as an
      observer, learns the leader and the voter set from the cluster and replicates the log;
      an operator adds it as a voter (``raftcore quorum add-voter``), or it asks to be added
      itself once caught up with ``auto_join`` (Kafka's ``controller.quorum.auto.join.enable``);
    - ``admin_principals``: on a TLS or SASL listener, who may add and remove voters and hand
      leadership over (``User:alice``: Kafka's ``super.users``); a node may only add itself;
    - ``listen`` / ``advertised``: where this node accepts connections and what it tells
      clients and the other nodes (default: the listen address, or its entry in ``voters``);
    - ``node_listen`` / ``node_advertised``: a separate listener for the other nodes (Kafka's
      ``controller.listener.names``): the Raft RPCs (Vote, Begin/EndQuorumEpoch, a replica's
      Fetch, FetchSnapshot, UpdateRaftVoter) are served there only, and ``listen`` becomes
      the client listener, which refuses them (:mod:`raftcore.node.listeners`). The entries
      of ``voters`` then name node listeners; ``node_advertised`` defaults to this node's
      entry there, else ``node_listen``. Both listeners have ``security``'s protocol and
      files. Without it (the default) one listener serves both;
    - ``topic``: the one topic this cluster serves to Kafka clients;
    - ``partitions``: how many partitions it has (Kafka's ``num.partitions``, default 1), each
      its own Raft group over the same voters, fixed when the data directory is formatted
      (``raftcore format --partitions``); the embedding API works on partition 0;
    - ``offsets_topic_num_partitions``: the partitions of ``__consumer_offsets``, where the
      consumer groups' committed offsets live, each its own Raft group over the same voters
      (Kafka's ``offsets.topic.num.partitions``; 3 here, not Kafka's 50: every group costs
      its own timers and fetches, and 3 spreads the coordinators over a 3-node cluster).
      Fixed at the first start: a group's coordinator is partition hash(group id) mod N
      (:mod:`raftcore.node.offsets_groups`);
    - ``group_initial_rebalance_delay_ms``: an empty group's first rebalance waits this long
      for more members (Kafka's ``group.initial.rebalance.delay.ms``, 3000);
    - ``auto_leader_rebalance``: with more than one partition, hand each partition the node
      leads to its preferred leader when that voter is live, caught up and imbalanced (Kafka's
      ``auto.leader.rebalance.enable``, on), checked every
      ``leader_imbalance_check_interval_s`` (``leader.imbalance.check.interval.seconds``,
      300) with ``leader_imbalance_per_broker_percentage`` (10):
      :mod:`raftcore.node.rebalance`;
    - ``flush``: ``"always"`` (default: every append is fsynced before it is acknowledged,
      as KRaft requires) or ``"interval"`` (fsync every ``flush_interval_ms``; acknowledges
      writes before they are durable -- a crash of a majority can lose committed records);
    - ``security``: the listener's TLS and SASL settings (:mod:`raftcore.security`);
    - ``metrics_port`` / ``metrics_host``: serve Prometheus metrics at
      ``http://metrics_host:metrics_port/metrics`` (default: not served; the host defaults to
      the listen host; port 0 picks a free one). docs/metrics.md lists them;
    - ``metrics_max_partitions``: the partitions whose series carry ``topic``/``partition``
      labels (the lowest ones, default 1000); the others' are left out and counted, so that
      a node with many partitions cannot swamp a scraper;
    - ``max_frame_bytes``: requests above it close the connection (Kafka's
      ``socket.request.max.bytes``, 100 MiB);
    - ``fetch_max_bytes``: the most a consumer's Fetch answer holds, whatever the client asks
      for (Kafka's broker ``fetch.max.bytes``, 55 MiB); the first batch comes whole even when
      it is larger (KIP-74). The answers to the other voters' fetches are capped by the
      core's ``QuorumConfig.replica_fetch_response_max_bytes``.

    - ``log_scrub_bytes_per_second``: the rate at which the scrubber re-reads sealed
      segments to find damage (raftcore.node.scrubber; 16 MiB/s; 0 turns it off);
    - ``log_scrub_interval_ms``: a scrub pass starts after the log opens and then this long
      after the last ended (24 h).
    - ``replica_high_watermark_checkpoint_interval_ms``: how often the committed offset is
      written to ``log/high-watermark-checkpoint`` (Kafka's
      ``replica.high.watermark.checkpoint.interval.ms``, 5 s; also at a clean stop):
      :mod:`raftcore.node.committed_checkpoint`.
    - ``retention``: retention by time and size and rolling by time (Kafka's
      ``retention.ms``, ``retention.bytes``, ``segment.ms``; off by default:
      :mod:`raftcore.raft.retention`). The log start moves only as KIP-630 lets it, so
      retention needs snapshots: a state machine's, or (``quorum.snapshots_on_request``) the
      empty ones of a node that only replicates.

    Bounds on accepted connections (docs/security.md, "Bounds", says why each default):

    - ``max_connections``: connections open at once (Kafka's ``max.connections``; 768: a
      1024-descriptor limit less 256 the node needs for itself); more are closed as they are
      accepted. The voters' hosts may go ``len(voters)`` past it;
    - ``max_connections_per_ip``: from one client host (``max.connections.per.ip``; 256, a
      third of the total); the voters' own hosts are exempt;
    - ``connections_max_idle_ms``: a connection with no byte received or sent for this long
      is closed (``connections.max.idle.ms``, Kafka's 10 min);
    - ``login_timeout_ms``: a TLS handshake, and on a SASL listener then the login, must
      complete within it (10 s);
    - ``frame_receive_timeout_ms``: a frame must arrive whole within this long of its first
      byte (30 s, Kafka clients' ``request.timeout.ms``);
    - ``queued_max_request_bytes``: bytes of requests received and not yet answered, across
      all connections (``queued.max.request.bytes``, 256 MiB); past it the node stops reading
      large frames until answers go out. It holds at most this plus one frame.
    """

    node_id: int
    voters: dict[int, Endpoint]
    data_dir: Path
    cluster_id: str
    listen: Endpoint | None = None
    advertised: Endpoint | None = None
    node_listen: Endpoint | None = None
    node_advertised: Endpoint | None = None
    topic: str = "raftcore"
    partitions: int = 1
    offsets_topic_num_partitions: int = 3
    group_initial_rebalance_delay_ms: int = 3000
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    quorum: QuorumConfig = field(default_factory=QuorumConfig)
    log: LogConfig = field(default_factory=LogConfig)
    flush: str = "always"
    flush_interval_ms: int = 1000
    metrics_port: int | None = None
    metrics_host: str | None = None
    metrics_max_partitions: int = 1000
    max_frame_bytes: int = 100 * 1024 * 1024
    request_timeout_ms: int = 30_000
    fetch_max_bytes: int = 55 * 1024 * 1024
    security: ListenerSecurity = field(default_factory=ListenerSecurity)
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP
    connections_max_idle_ms: int = 10 * 60 * 1000
    login_timeout_ms: int = 10_000
    frame_receive_timeout_ms: int = 30_000
    queued_max_request_bytes: int = QUEUED_MAX_REQUEST_BYTES
    bootstrap: tuple[Endpoint, ...] = ()
    auto_join: bool = False
    admin_principals: frozenset[str] = frozenset()
    log_scrub_bytes_per_second: int = 16 * 1024 * 1024
    log_scrub_interval_ms: int = 24 * 3600 * 1000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        if self.node_id < 0:
            raise ValueError(f"node id must be >= 0, got {self.node_id}")
        if not self.cluster_id:
            raise ValueError("a cluster id is required")
        if self.flush not in ("always", "interval"):
            raise ValueError(f"flush must be 'always' or 'interval', got {self.flush!r}")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        if self.offsets_topic_num_partitions < 1:
            raise ValueError(
                "offsets.topic.num.partitions must be >= 1, got "
                f"{self.offsets_topic_num_partitions}"
            )
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError(
                "group.initial.rebalance.delay.ms must be >= 0, got "
                f"{self.group_initial_rebalance_delay_ms}"
            )
        if self.leader_imbalance_check_interval_s <= 0:
            raise ValueError(
                "leader imbalance check interval must be positive, got "
                f"{self.leader_imbalance_check_interval_s}"
            )
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise ValueError(
                "leader imbalance per broker percentage must be 0..100, got "
                f"{self.leader_imbalance_per_broker_percentage}"
            )
        if self.voters and self.bootstrap:
            raise ValueError(
                "give the voters of a new cluster or the servers of an existing one to join "
                "through, not both"
            )
        if not self.voters and not self.bootstrap:
            raise ValueError("give the voters of a new cluster or the servers to join through")
        if self.node_listen is not None and self.listen is None:
            raise ValueError(
                "a separate node listener needs a client listener too: give --listen "
                "HOST:PORT (the voters' endpoints name node listeners)"
            )
        listen = self.listen or self.voters.get(self.node_id)
        if listen is None:
            raise ValueError(f"node {self.node_id} is not a voter: give it a listen address")
        object.__setattr__(self, "listen", listen)
        if self.node_listen is not None and self.node_listen == listen:
            raise ValueError(
                f"the node listener and the client listener are both {listen}: give them "
                "different ports (or leave --node-listen out to share one listener)"
            )
        if self.fetch_max_bytes < 1:
            raise ValueError(f"fetch.max.bytes must be at least 1, got {self.fetch_max_bytes}")
        if self.log_scrub_bytes_per_second < 0:
            raise ValueError(
                f"the scrub rate must be at least 0, got {self.log_scrub_bytes_per_second}"
            )
        for name, value in (
            ("the scrub interval", self.log_scrub_interval_ms),
            (
                "replica.high.watermark.checkpoint.interval.ms",
                self.replica_high_watermark_checkpoint_interval_ms,
            ),
            ("max.connections", self.max_connections),
            ("max.connections.per.ip", self.max_connections_per_ip),
            ("connections.max.idle.ms", self.connections_max_idle_ms),
            ("the login timeout", self.login_timeout_ms),
            ("the frame receive timeout", self.frame_receive_timeout_ms),
            ("queued.max.request.bytes", self.queued_max_request_bytes),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ValueError(f"metrics port must be 0..65535, got {self.metrics_port}")
        if self.metrics_max_partitions < 0:
            raise ValueError(
                f"metrics max partitions must be >= 0, got {self.metrics_max_partitions}"
            )
        if self.node_listen is None:  # one listener: the nodes are told what clients are
            if self.advertised is None:
                object.__setattr__(self, "advertised", self.voters.get(self.node_id, listen))
            object.__setattr__(self, "node_advertised", self.advertised)
        else:
            if self.advertised is None:
                object.__setattr__(self, "advertised", listen)
            if self.node_advertised is None:
                object.__setattr__(
                    self, "node_advertised", self.voters.get(self.node_id, self.node_listen)
                )
        object.__setattr__(
            self,
            "quorum",
            replace(
                self.quorum,
                voters=frozenset(self.voters),
                cluster_id=self.cluster_id,
                bootstrap_servers=len(self.bootstrap),
                acknowledge_unflushed=self.flush == "interval",
            ),
        )

    @cached_property
    def topic_id(self) -> bytes:
        """A stable 16-byte topic id for Fetch v13+ and Metadata v10+, the same on every node
        (derived from the cluster id and the topic name). Computed once: every Raft Fetch and
        Kafka Fetch/Metadata carries it, and a uuid5 per message cost a follower 9% of its CPU."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"raftcore:{self.cluster_id}:{self.topic}").bytes

    @cached_property
    def offsets_topic_id(self) -> bytes:
        """The topic id of ``__consumer_offsets`` (its Raft fetches name it), derived as
        :attr:`topic_id` is."""
        return uuid.uuid5(
            uuid.NAMESPACE_URL, f"raftcore:{self.cluster_id}:__consumer_offsets"
        ).bytes

    @property
    def listener_name(self) -> str:
        """The name of the listener the other nodes reach, as the voter set records it
        (KIP-853's endpoints are named): its security protocol."""
        return self.security.protocol

    @property
    def separate_node_listener(self) -> bool:
        """Raft traffic has a listener of its own, and ``listen`` takes clients only."""
        return self.node_listen is not None

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        """Where the other nodes reach this node (its advertised node listener), or a static
        voter (the address book, :mod:`raftcore.node.peers`, knows every node's)."""
        if node_id == self.node_id:
            return self.node_advertised
        return self.voters.get(node_id)
