"""The metrics that mirror a node's state, read when scraped (on the node's event loop, the
only thread that may read the Raft core): role, epoch, leader, high watermark, the log's
offsets and size, the leader's view of each replica (KIP-595 DescribeQuorum's numbers),
snapshots, connections, and counters the node and its core keep anyway (leader changes,
snapshots taken and installed). Every family is yielded on every scrape, empty when it does
not apply (the replica view on a follower), so a scrape always lists the same names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from raftcore.node.clock import now_ms
from raftcore.node.metrics import INBOUND, PEER
from raftcore.node.metrics_http import MADE_ROOM, REQUEST_TIMEOUT
from raftcore.raft.states import LeaderState

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["ROLES", "StateCollector"]

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
            leader_id = known.leader_id
            leader.add_metric([], leader_id if leader_id is not None else -1)
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
        yield from self._damage(node)

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
        if node.applier is not None:
            applied.add_metric([], node.applier.applied_offset)
        yield applied

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
        used = _gauge(
            "raftcore_queued_request_bytes",
            "Bytes of requests received (or being received) and not yet answered "
            "(queued.max.request.bytes bounds them)",
        )
        used.add_metric([], budget.used)
        yield used
        waiting = _gauge(
            "raftcore_queued_request_waiting_connections",
            "Connections not read because queued.max.request.bytes is spent",
        )
        waiting.add_metric([], budget.waiting)
        yield waiting

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

    def _replicas(self, node: RaftNode) -> Iterator[Metric]:
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
            wall = self._to_wall(now_ms())
            replicas = [*state.voter_states.values(), *state.observer_states.values()]
            for r in replicas:
                if r.replica_id == state.local_id:
                    continue
                key = [str(r.replica_id), "true" if r.is_voter else "false"]
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
            (
                "raftcore_log_retention_requests",
                "Times retention (retention.ms, retention.bytes) asked the log start to move",
                0 if node.retention is None else node.retention.requests,
            ),
            (
                "raftcore_log_segments_rolled_by_time",
                "Active segments sealed because their first record was segment.ms old",
                0 if node.retention is None else node.retention.rolled,
            ),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family

    @staticmethod
    def _damage(node: RaftNode) -> Iterator[Metric]:
        core = node.core
        tracker = core.damage if core is not None else None
        scrubber = node.scrubber
        for name, doc, value in (
            (
                "raftcore_log_damaged_batches_found",
                "Damaged batches found in this node's log (serving, scrubbing, replaying)",
                0 if tracker is None else tracker.found,
            ),
            (
                "raftcore_log_damaged_batches_repaired",
                "Damaged batches written again from the leader's intact copy",
                0 if tracker is None else tracker.repaired,
            ),
            (
                "raftcore_log_scrubbed_bytes",
                "Bytes of sealed segments the scrubber checked",
                0 if scrubber is None else scrubber.bytes_scrubbed,
            ),
            (
                "raftcore_log_scrub_passes",
                "Scrub passes over every sealed segment completed",
                0 if scrubber is None else scrubber.passes,
            ),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        damaged = _gauge(
            "raftcore_log_damaged",
            "1 while this node's log holds a damaged batch not yet repaired (never served)",
        )
        damaged.add_metric([], 1 if tracker else 0)
        yield damaged


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[])
