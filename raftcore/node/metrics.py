"""A node's Prometheus metrics (``prometheus_client``), in a registry of its own: a process
may run several nodes (the tests, an embedding application), so nothing goes to the global
default registry. docs/metrics.md lists every metric; a test checks the list against a scrape.

Two kinds, by cost:

- What mirrors the node's state (role, epoch, leader, high watermark, log offsets, the
  leader's view of each replica, snapshot and connection counts) is read when scraped, by
  :class:`_StateCollector`: the hot path pays nothing for it. It runs on the node's event loop
  (the HTTP server of :mod:`raftcore.node.metrics_http` is served there, and embedders call
  ``node.metrics_text()`` from the loop), the only thread that may read the core.
- What counts events (requests and their latency, fsyncs, bytes, elections, connections,
  snapshot durations) is updated where it happens, one ``inc``/``observe`` per request or
  frame, never per record, on children looked up once.

Names follow Prometheus' conventions (``raftcore_`` prefix, base units in the name,
``_total`` for counters). There is no ``node_id`` label: one node per endpoint; the
``raftcore_node_info`` metric names it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from raftcore.protocol.api import ApiKey
from raftcore.raft.states import CandidateState, LeaderState

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["ROLES", "NodeMetrics"]

T = TypeVar("T")

# Every state a replica can be in (raftcore.raft.states), for raftcore_raft_role.
ROLES = ("unattached", "voted", "prospective", "candidate", "leader", "follower", "resigned")

# Request latency: a local produce with an fsync is a few ms, a long-poll fetch up to its
# MaxWaitMs (500 ms by default for Kafka consumers).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# fsync: tens of microseconds on a fast SSD, hundreds of milliseconds on a busy disk.
FSYNC_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5,
)  # fmt: skip
SNAPSHOT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)

INBOUND = "inbound"  # connections this node accepted: clients, and other nodes' requests
PEER = "peer"  # connections this node opened to the other voters, for its own requests


def api_name(key: int) -> str:
    """Kafka's name of a request type (``Produce``, ``DescribeQuorum``), as its RequestMetrics
    label it."""
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return str(key)


class NodeMetrics:
    """The metrics of one :class:`~raftcore.node.node.RaftNode`. See the module docstring."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        self._kafka_latency = Histogram(
            "raftcore_kafka_request_duration_seconds",
            "Kafka client requests served, by request type: time from decoding to the answer "
            "(a long-poll Fetch counts its wait); _count is the request count",
            ["request"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self._raft_latency = Histogram(
            "raftcore_raft_request_duration_seconds",
            "Raft requests from the other voters served, by request type (Fetch is "
            "replication; it long-polls)",
            ["request"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self._kafka_children: dict[int, Any] = {}
        self._raft_children: dict[int, Any] = {}
        produce_records = Counter(
            "raftcore_produce_records",
            "Records Produce requests wrote through this node as leader (a retried duplicate "
            "batch counts again)",
            registry=reg,
        )
        self.produce_records = produce_records.inc
        self._fsync = Histogram(
            "raftcore_log_fsync_duration_seconds",
            "Log fsyncs (one covers every append since the last: group commit)",
            buckets=FSYNC_BUCKETS,
            registry=reg,
        )
        received = Counter(
            "raftcore_network_received_bytes",
            "Bytes of Kafka frames received (with their size prefix), by connection kind",
            ["connection"],
            registry=reg,
        )
        sent = Counter(
            "raftcore_network_sent_bytes",
            "Bytes of Kafka frames sent (with their size prefix), by connection kind",
            ["connection"],
            registry=reg,
        )
        opened = Counter(
            "raftcore_connections_opened",
            "Connections accepted (inbound) or established to the other voters (peer)",
            ["connection"],
            registry=reg,
        )
        self.inbound_received = received.labels(INBOUND).inc
        self.inbound_sent = sent.labels(INBOUND).inc
        self.peer_received = received.labels(PEER).inc
        self.peer_sent = sent.labels(PEER).inc
        self.inbound_opened = opened.labels(INBOUND).inc
        self.peer_opened = opened.labels(PEER).inc
        elections = Counter(
            "raftcore_raft_elections_started",
            "Elections this node started (it became a candidate, raising the epoch)",
            registry=reg,
        )
        won = Counter(
            "raftcore_raft_elections_won",
            "Elections this node won (it became leader)",
            registry=reg,
        )
        self._elections_started = elections.inc
        self._elections_won = won.inc
        self.seen_state: Any = None
        snapshot_duration = Histogram(
            "raftcore_snapshot_duration_seconds",
            "Snapshots taken (from the state machine's snapshot call to the frozen file) and "
            "loaded into the state machine or listener",
            ["operation"],
            buckets=SNAPSHOT_BUCKETS,
            registry=reg,
        )
        self.snapshot_taken = snapshot_duration.labels("take").observe
        self.snapshot_loaded = snapshot_duration.labels("load").observe
        reg.register(_StateCollector(node))

    # ---- hooks ------------------------------------------------------------------------------

    def kafka_request(self, key: int) -> Callable[[float], None]:
        """The ``observe`` of the latency histogram of Kafka requests of type ``key``."""
        child = self._kafka_children.get(key)
        if child is None:
            child = self._kafka_children[key] = self._kafka_latency.labels(api_name(key)).observe
        return child  # type: ignore[no-any-return]

    def raft_request(self, key: int) -> Callable[[float], None]:
        child = self._raft_children.get(key)
        if child is None:
            child = self._raft_children[key] = self._raft_latency.labels(api_name(key)).observe
        return child  # type: ignore[no-any-return]

    def timed_flush(self, flush: Callable[[], T]) -> T:
        """Run ``flush`` (on the flush thread) and observe how long it took."""
        started = time.perf_counter()
        result = flush()
        self._fsync.observe(time.perf_counter() - started)
        return result

    def state_seen(self, state: Any) -> None:
        """The core's epoch state after a step (the node calls this when it changed). A
        leader not seen as a candidate of its epoch first (a single voter elects itself in
        one step) started its election too."""
        previous, self.seen_state = self.seen_state, state
        if isinstance(state, CandidateState):
            self._elections_started()
        elif isinstance(state, LeaderState):
            if not (isinstance(previous, CandidateState) and previous.epoch == state.epoch):
                self._elections_started()
            self._elections_won()

    def text(self) -> bytes:
        """The exposition text (Prometheus' text format 0.0.4)."""
        return generate_latest(self.registry)


class _StateCollector:
    """Gauges (and counters kept elsewhere) read from the node when scraped."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        core = node.core
        cfg = node.config
        info = GaugeMetricFamily(
            "raftcore_node_info",
            "This node: its id, cluster id and topic (always 1)",
            labels=["node_id", "cluster_id", "topic"],
        )
        info.add_metric([str(cfg.node_id), cfg.cluster_id, cfg.topic], 1)
        yield info

        role = GaugeMetricFamily(
            "raftcore_raft_role",
            "1 for the replica's current state, 0 for the others",
            labels=["role"],
        )
        current = core.state.name if core is not None else None
        for name in ROLES:
            role.add_metric([name], 1 if name == current else 0)
        yield role
        epoch = _gauge("raftcore_raft_epoch", "The current epoch (Kafka's current-epoch)")
        leader = _gauge("raftcore_raft_leader_id", "The leader this node knows, -1 when unknown")
        hw = _gauge(
            "raftcore_raft_high_watermark",
            "Everything below it is committed, as far as this node knows (absent if unknown)",
        )
        if core is not None:
            known = core.leader_and_epoch()
            epoch.add_metric([], core.epoch)
            leader.add_metric([], known.leader_id if known.known else -1)
            if core.high_watermark is not None:
                hw.add_metric([], core.high_watermark)
        yield epoch
        yield leader
        yield hw
        changes = CounterMetricFamily(
            "raftcore_raft_leader_changes", "Leader changes this node's listener was told of"
        )
        changes.add_metric([], node.leader_changes)
        yield changes

        yield from self._log(node)
        yield from self._replicas(node)
        yield from self._snapshots(node)

        conns = GaugeMetricFamily(
            "raftcore_connections",
            "Open connections: accepted (inbound) and to the other voters (peer)",
            labels=["connection"],
        )
        conns.add_metric([INBOUND], len(node._connections))
        conns.add_metric([PEER], sum(1 for p in node._peers.values() if p.connected.is_set()))
        yield conns

        applied = _gauge(
            "raftcore_statemachine_applied_offset",
            "Everything below it is applied to the state machine (absent without one)",
        )
        if node.applier is not None:
            applied.add_metric([], node.applier.applied_offset)
        yield applied

    @staticmethod
    def _log(node: RaftNode) -> Iterator[Metric]:
        log = node.log
        end = _gauge("raftcore_log_end_offset", "The log end offset: the next record's offset")
        start = _gauge("raftcore_log_start_offset", "The first offset the log holds")
        flushed = _gauge("raftcore_log_flushed_offset", "Everything below it is fsynced")
        size = _gauge("raftcore_log_size_bytes", "Bytes of the log's segment files")
        segments = _gauge("raftcore_log_segments", "Segment files of the log")
        if log is not None and not log.closed:
            end.add_metric([], log.end_offset)
            start.add_metric([], log.log_start_offset)
            flushed.add_metric([], log.flushed_offset)
            size.add_metric([], log.size_in_bytes)
            segments.add_metric([], log.segment_count)
        yield from (end, start, flushed, size, segments)

    @staticmethod
    def _replicas(node: RaftNode) -> Iterator[Metric]:
        """The leader's view of the other replicas (KIP-595 DescribeQuorum's), on the leader
        only. Timestamps are wall-clock seconds (the core keeps monotonic milliseconds)."""
        labels = ["replica", "voter"]
        end = GaugeMetricFamily(
            "raftcore_replica_log_end_offset",
            "Leader only: the offset each replica fetched up to (what it acknowledged)",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "raftcore_replica_lag_records",
            "Leader only: the leader's log end offset minus the replica's",
            labels=labels,
        )
        fetched = GaugeMetricFamily(
            "raftcore_replica_last_fetch_timestamp_seconds",
            "Leader only: when each replica last fetched (Unix time)",
            labels=labels,
        )
        caught_up = GaugeMetricFamily(
            "raftcore_replica_last_caught_up_timestamp_seconds",
            "Leader only: when each replica last had everything the leader had (KIP-595 "
            "LastCaughtUpTimestamp, Unix time)",
            labels=labels,
        )
        core = node.core
        log = node.log
        state = core.state if core is not None else None
        if isinstance(state, LeaderState) and log is not None and not log.closed:
            leader_end = log.end_offset
            now_mono = node._now()
            now_wall = time.time()
            replicas = [*state.voter_states.values(), *state.observer_states.values()]
            for r in replicas:
                if r.replica_id == state.local_id:
                    continue
                key = [str(r.replica_id), "true" if r.is_voter else "false"]
                if r.end_offset is not None:
                    end.add_metric(key, r.end_offset)
                    lag.add_metric(key, max(0, leader_end - r.end_offset))
                if r.last_fetch_ms >= 0:
                    fetched.add_metric(key, now_wall - (now_mono - r.last_fetch_ms) / 1000)
                if r.last_caught_up_ms >= 0:
                    caught_up.add_metric(key, now_wall - (now_mono - r.last_caught_up_ms) / 1000)
        yield end
        yield lag
        yield fetched
        yield caught_up

    @staticmethod
    def _snapshots(node: RaftNode) -> Iterator[Metric]:
        core = node.core
        log = node.log
        count = _gauge("raftcore_snapshots", "Snapshots in the log directory")
        latest = _gauge(
            "raftcore_snapshot_latest_end_offset", "The end offset of the latest snapshot"
        )
        if log is not None and not log.closed:
            ids = log.snapshot_ids()
            count.add_metric([], len(ids))
            if ids:
                latest.add_metric([], max(i.offset for i in ids))
        yield count
        yield latest
        manager = core.snapshots if core is not None else None
        snapshotter = node.snapshotter
        for name, doc, value in (
            (
                "raftcore_snapshots_taken",
                "Snapshots this node took of its state machine",
                0 if snapshotter is None else snapshotter.taken,
            ),
            (
                "raftcore_snapshot_failures",
                "Snapshots this node failed to take (retried after a second)",
                0 if snapshotter is None else snapshotter.failed,
            ),
            (
                "raftcore_snapshots_installed",
                "Snapshots this node downloaded from the leader and installed (FetchSnapshot)",
                0 if manager is None else manager.installed,
            ),
            (
                "raftcore_log_start_moves",
                "Times the log start offset moved up to a snapshot (the prefix deleted)",
                0 if manager is None else manager.log_start_moves,
            ),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[])
