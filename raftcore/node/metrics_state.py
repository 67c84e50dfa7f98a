"""The metrics that mirror a node's state, read when scraped (on the node's event loop, the
only thread that may read the Raft core): role, epoch, leader, high watermark, the log's
offsets and size, the leader's view of each replica (KIP-595 DescribeQuorum's numbers),
snapshots, connections, and counters the node and its core keep anyway (leader changes,
snapshots taken and installed). Every family is yielded on every scrape, empty when it does
not apply (the replica view on a follower), so a scrape always lists the same names.

What a Raft group has (its role, offsets, replicas, snapshots, elections) carries the labels
``topic`` and ``partition``, as Kafka's per-partition JMX metrics do
(``kafka.log:type=Log,name=LogEndOffset,topic=...,partition=...``); what the node has once
(connections, bounds, requests) carries neither. Cardinality is bounded: only the partitions
below ``NodeConfig.metrics_max_partitions`` are labelled, the same ones at every scrape, and
``raftcore_metrics_partitions_omitted`` says how many were left out."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from raftcore.node.clock import now_ms
from raftcore.node.metrics import INBOUND, PEER
from raftcore.node.metrics_http import MADE_ROOM, REQUEST_TIMEOUT
from raftcore.raft.states import LeaderState

if TYPE_CHECKING:
    from raftcore.node.group import RaftGroup
    from raftcore.node.node import RaftNode

__all__ = ["PARTITION_LABELS", "ROLES", "StateCollector", "labelled_groups"]

PARTITION_LABELS = ["topic", "partition"]  # of every family a Raft group has

# Every state a replica can be in (raftcore.raft.states), for raftcore_raft_role.
ROLES = ("unattached", "voted", "prospective", "candidate", "leader", "follower", "resigned")


class StateCollector:
    """Gauges (and counters kept elsewhere) read from the node when scraped."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self._wall_minus_monotonic_s: float | None = None

    def _to_wall(self, now_mono_ms: int) -> float:
        """Wall-clock seconds minus the core's monotonic seconds: worked out once, and again
        only if the wall clock was stepped (by more than a second), so that the same fetch
        gives the same timestamp at every scrape (it moved by up to a millisecond)."""
        offset = time.time() - now_mono_ms / 1000
        kept = self._wall_minus_monotonic_s
        if kept is None or abs(offset - kept) > 1.0:
            self._wall_minus_monotonic_s = kept = offset
        return kept

    def collect(self) -> Iterator[Metric]:
        node = self.node
        cfg = node.config
        info = GaugeMetricFamily(
            "raftcore_node_info",
            "This node: its id, cluster id and topic (always 1)",
            labels=["node_id", "cluster_id", "topic"],
        )
        info.add_metric([str(cfg.node_id), cfg.cluster_id, cfg.topic], 1)
        yield info

        groups, omitted = labelled_groups(node)
        yield from self._raft(node, groups)
        yield from self._log(groups)
        yield from self._replicas(groups)
        yield from self._snapshots(groups)
        yield from self._damage(groups)

        conns = GaugeMetricFamily(
            "raftcore_connections",
            "Open connections: accepted (inbound) and to the other nodes (peer)",
            labels=["connection"],
        )
        conns.add_metric([INBOUND], len(node.messaging.connections))
        conns.add_metric([PEER], 0 if node.peers is None else node.peers.open_count())
        yield conns
        yield from self._bounds(node)

        applied = _gauge(
            "raftcore_statemachine_applied_offset",
            "Everything below it is applied to the state machine (absent without one)",
        )
        for group in groups:
            if group.applier is not None:
                applied.add_metric(_key(group), group.applier.applied_offset)
        yield applied
        left_out = GaugeMetricFamily(
            "raftcore_metrics_partitions_omitted",
            "Partitions this node hosts whose per-partition series are left out of every "
            "scrape (past metrics_max_partitions)",
        )
        left_out.add_metric([], omitted)
        yield left_out

    @staticmethod
    def _raft(node: RaftNode, groups: list[RaftGroup]) -> Iterator[Metric]:
        """Each group's replica state, and its elections (counted by NodeMetrics)."""
        role = GaugeMetricFamily(
            "raftcore_raft_role",
            "1 for the replica's current state, 0 for the others",
            labels=[*PARTITION_LABELS, "role"],
        )
        epoch = _gauge("raftcore_raft_epoch", "The current epoch (Kafka's current-epoch)")
        leader = _gauge("raftcore_raft_leader_id", "The leader this node knows, -1 when unknown")
        hw = _gauge(
            "raftcore_raft_high_watermark",
            "Everything below it is committed, as far as this node knows (absent if unknown)",
        )
        changes = _counter(
            "raftcore_raft_leader_changes", "Leader changes this node's listener was told of"
        )
        started = _counter(
            "raftcore_raft_elections_started",
            "Elections this node started (it became a candidate, raising the epoch)",
        )
        won = _counter("raftcore_raft_elections_won", "Elections this node won (it became leader)")
        elections = node.metrics
        for group in groups:
            key = _key(group)
            core = group.core
            current = core.state.name if core is not None else None
            for name in ROLES:
                role.add_metric([*key, name], 1 if name == current else 0)
            if core is not None:
                epoch.add_metric(key, core.epoch)
                leader_id = core.leader_and_epoch().leader_id
                leader.add_metric(key, leader_id if leader_id is not None else -1)
                if core.high_watermark is not None:
                    hw.add_metric(key, core.high_watermark)
            changes.add_metric(key, group.leader_changes)
            started.add_metric(key, elections.elections_started.get(group.name, 0))
            won.add_metric(key, elections.elections_won.get(group.name, 0))
        yield from (role, epoch, leader, hw, changes, started, won)

    @staticmethod
    def _bounds(node: RaftNode) -> Iterator[Metric]:
        """The bounds on accepted connections (raftcore.node.connection_limits, ...timeouts)."""
        refused = CounterMetricFamily(
            "raftcore_connections_refused",
            "Connections closed as they were accepted, past max.connections or "
            "max.connections.per.ip",
            labels=["reason"],
        )
        for reason, count in node.limits.refused.items():
            refused.add_metric([reason], count)
        yield refused
        scrapes = CounterMetricFamily(
            "raftcore_metrics_connections_refused",
            "Connections to the metrics port closed as they were accepted, its bound of "
            "connections all answering requests",
        )
        server = node.metrics_server
        scrapes.add_metric([], 0 if server is None else server.refused)
        yield scrapes
        dropped = CounterMetricFamily(
            "raftcore_metrics_connections_closed",
            "Connections to the metrics port closed before they sent a request: "
            "request_timeout, made_room (the oldest such, for a new connection at the bound)",
            labels=["reason"],
        )
        for reason in (REQUEST_TIMEOUT, MADE_ROOM):
            dropped.add_metric([reason], 0 if server is None else server.closed[reason])
        yield dropped
        timed_out = CounterMetricFamily(
            "raftcore_connections_timed_out",
            "Connections closed for a timeout: idle (connections.max.idle.ms), "
            "login_timeout, frame_timeout",
            labels=["reason"],
        )
        for reason, count in node.timeouts.closed.items():
            timed_out.add_metric([reason], count)
        yield timed_out
        budget = node.request_budget
        used = GaugeMetricFamily(
            "raftcore_queued_request_bytes",
            "Bytes of requests received (or being received) and not yet answered "
            "(queued.max.request.bytes bounds them)",
        )
        used.add_metric([], budget.used)
        yield used
        waiting = GaugeMetricFamily(
            "raftcore_queued_request_waiting_connections",
            "Connections not read because queued.max.request.bytes is spent",
        )
        waiting.add_metric([], budget.waiting)
        yield waiting

    @staticmethod
    def _log(groups: list[RaftGroup]) -> Iterator[Metric]:
        end = _gauge("raftcore_log_end_offset", "The log end offset: the next record's offset")
        start = _gauge("raftcore_log_start_offset", "The first offset the log holds")
        flushed = _gauge("raftcore_log_flushed_offset", "Everything below it is fsynced")
        size = _gauge("raftcore_log_size_bytes", "Bytes of the log's segment files")
        segments = _gauge("raftcore_log_segments", "Segment files of the log")
        for group in groups:
            log = group.log
            if log is not None and not log.closed:
                key = _key(group)
                end.add_metric(key, log.end_offset)
                start.add_metric(key, log.log_start_offset)
                flushed.add_metric(key, log.flushed_offset)
                size.add_metric(key, log.size_in_bytes)
                segments.add_metric(key, log.segment_count)
        yield from (end, start, flushed, size, segments)

    def _replicas(self, groups: list[RaftGroup]) -> Iterator[Metric]:
        """The leader's view of the other replicas (KIP-595 DescribeQuorum's), on the leader
        only. Timestamps are wall-clock seconds (the core keeps monotonic milliseconds)."""
        labels = [*PARTITION_LABELS, "replica", "voter"]
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
        wall = self._to_wall(now_ms())
        for group in groups:
            core = group.core
            log = group.log
            state = core.state if core is not None else None
            if not isinstance(state, LeaderState) or log is None or log.closed:
                continue
            leader_end = log.end_offset
            replicas = [*state.voter_states.values(), *state.observer_states.values()]
            for r in replicas:
                if r.replica_id == state.local_id:
                    continue
                key = [*_key(group), str(r.replica_id), "true" if r.is_voter else "false"]
                if r.end_offset is not None:
                    end.add_metric(key, r.end_offset)
                    lag.add_metric(key, max(0, leader_end - r.end_offset))
                if r.last_fetch_ms >= 0:
                    fetched.add_metric(key, wall + r.last_fetch_ms / 1000)
                if r.last_caught_up_ms >= 0:
                    caught_up.add_metric(key, wall + r.last_caught_up_ms / 1000)
        yield end
        yield lag
        yield fetched
        yield caught_up

    @staticmethod
    def _snapshots(groups: list[RaftGroup]) -> Iterator[Metric]:
        count = _gauge("raftcore_snapshots", "Snapshots in the log directory")
        latest = _gauge(
            "raftcore_snapshot_latest_end_offset", "The end offset of the latest snapshot"
        )
        for group in groups:
            log = group.log
            if log is not None and not log.closed:
                ids = log.snapshot_ids()
                count.add_metric(_key(group), len(ids))
                if ids:
                    latest.add_metric(_key(group), max(i.offset for i in ids))
        yield count
        yield latest
        yield from _group_counters(groups, _SNAPSHOT_COUNTERS)

    @staticmethod
    def _damage(groups: list[RaftGroup]) -> Iterator[Metric]:
        yield from _group_counters(groups, _DAMAGE_COUNTERS)
        damaged = _gauge(
            "raftcore_log_damaged",
            "1 while this node's log holds a damaged batch not yet repaired (never served)",
        )
        for group in groups:
            tracker = group.core.damage if group.core is not None else None
            damaged.add_metric(_key(group), 1 if tracker else 0)
        yield damaged


def labelled_groups(node: RaftNode) -> tuple[list[RaftGroup], int]:
    """The groups whose series a scrape shows, by partition, and how many are left out:
    the lowest ``metrics_max_partitions`` partitions, so that a scrape shows the same ones
    every time (a series that comes and goes is worse than one never shown)."""
    # the topic's partitions (__consumer_offsets' have no series yet)
    topic = node.config.topic
    groups = sorted(
        (g for g in node.groups.values() if g.name.topic == topic), key=lambda g: g.name.partition
    )
    cap = node.config.metrics_max_partitions
    return groups[:cap], max(0, len(groups) - cap)


def _key(group: RaftGroup) -> list[str]:
    return [group.name.topic, str(group.name.partition)]


# Counters a group keeps, as (name, help, the count of a group).
_GroupCounter = tuple[str, str, "Callable[[RaftGroup], int]"]
_SNAPSHOT_COUNTERS: tuple[_GroupCounter, ...] = (
    (
        "raftcore_snapshots_taken",
        "Snapshots this node took of its state machine",
        lambda g: 0 if g.snapshotter is None else g.snapshotter.taken,
    ),
    (
        "raftcore_snapshot_failures",
        "Snapshots this node failed to take (retried after a second)",
        lambda g: 0 if g.snapshotter is None else g.snapshotter.failed,
    ),
    (
        "raftcore_snapshots_installed",
        "Snapshots this node downloaded from the leader and installed (FetchSnapshot)",
        lambda g: 0 if g.core is None else g.core.snapshots.installed,
    ),
    (
        "raftcore_log_start_moves",
        "Times the log start offset moved up to a snapshot (the prefix deleted)",
        lambda g: 0 if g.core is None else g.core.snapshots.log_start_moves,
    ),
    (
        "raftcore_log_retention_requests",
        "Times retention (retention.ms, retention.bytes) asked the log start to move",
        lambda g: 0 if g.retention is None else g.retention.requests,
    ),
    (
        "raftcore_log_segments_rolled_by_time",
        "Active segments sealed because their first record was segment.ms old",
        lambda g: 0 if g.retention is None else g.retention.rolled,
    ),
)
_DAMAGE_COUNTERS: tuple[_GroupCounter, ...] = (
    (
        "raftcore_log_damaged_batches_found",
        "Damaged batches found in this node's log (serving, scrubbing, replaying)",
        lambda g: 0 if g.core is None else g.core.damage.found,
    ),
    (
        "raftcore_log_damaged_batches_repaired",
        "Damaged batches written again from the leader's intact copy",
        lambda g: 0 if g.core is None else g.core.damage.repaired,
    ),
    (
        "raftcore_log_scrubbed_bytes",
        "Bytes of sealed segments the scrubber checked",
        lambda g: 0 if g.scrubber is None else g.scrubber.bytes_scrubbed,
    ),
    (
        "raftcore_log_scrub_passes",
        "Scrub passes over every sealed segment completed",
        lambda g: 0 if g.scrubber is None else g.scrubber.passes,
    ),
)


def _group_counters(
    groups: list[RaftGroup], counters: tuple[_GroupCounter, ...]
) -> Iterator[Metric]:
    for name, doc, count in counters:
        family = _counter(name, doc)
        for group in groups:
            family.add_metric(_key(group), count(group))
        yield family


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=PARTITION_LABELS)


def _counter(name: str, doc: str) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=PARTITION_LABELS)
