"""A node's Prometheus metrics (``prometheus_client``), in a registry of its own: a process
may run several nodes (the tests, an embedding application), so nothing goes to the global
default registry. docs/metrics.md lists every metric; a test checks the list against a scrape.

Two kinds, by where the number lives:

- What mirrors the node's state (role, epoch, leader, high watermark, log offsets, the
  leader's view of each replica, snapshot and connection counts) is read when scraped
  (:mod:`raftcore.node.metrics_state`): the hot path pays nothing for it. A Raft group's
  series carry ``topic`` and ``partition`` labels, for at most ``metrics_max_partitions``
  partitions; the elections counted here are per group too, and shown there.
- What counts events (requests and their latency, fsyncs, bytes, elections, connections,
  snapshot durations) is counted where it happens, into this module's plain integers and
  :class:`Histogram` s: one ``+=`` or ``observe`` per request or frame, never per record.
  prometheus_client's own Counter and Histogram take a lock on every update (about 0.5 us
  each); ours need none, because every update but one runs on the node's event loop, and the
  scrape does too (the HTTP server of :mod:`raftcore.node.metrics_http` is served there, and
  embedders call ``node.metrics_text()`` from the loop). The exception is the fsync histogram,
  observed on the flush thread, of which there is one flush at a time; a scrape that reads
  it mid-update sees a count and a sum one observation apart, never a torn value.

Names follow Prometheus' conventions (``raftcore_`` prefix, base units in the name,
``_total`` for counters). There is no ``node_id`` label: one node per endpoint; the
``raftcore_node_info`` metric names it.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from raftcore.protocol.api import ApiKey
from raftcore.raft.states import CandidateState, LeaderState

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode
    from raftcore.topic_partition import TopicPartition

__all__ = ["Histogram", "NodeMetrics", "api_name"]

T = TypeVar("T")

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


class Histogram:
    """Counts of observations per bucket (upper bounds ``bounds``, and +Inf) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: (le, observations <= le), the last le being +Inf."""
        total = 0
        out = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((floatToGoString(bound), total))
        return out


class NodeMetrics:
    """The metrics of one :class:`~raftcore.node.node.RaftNode`. See the module docstring.

    The node's hooks add to the ``*_bytes``, ``*_opened`` and ``produce_records`` integers and
    observe the histograms that ``kafka_request`` / ``raft_request`` hand out."""

    def __init__(self, node: RaftNode) -> None:
        from raftcore.node.metrics_state import StateCollector

        self.node = node
        self.kafka_latency: dict[str, Histogram] = {}  # by request type
        self.raft_latency: dict[str, Histogram] = {}
        self._kafka_observe: dict[int, Callable[[float], None]] = {}
        self._raft_observe: dict[int, Callable[[float], None]] = {}
        self.fsync = Histogram(FSYNC_BUCKETS)
        self.snapshot_durations = {"take": Histogram(SNAPSHOT_BUCKETS)}
        self.snapshot_durations["load"] = Histogram(SNAPSHOT_BUCKETS)
        self.snapshot_taken = self.snapshot_durations["take"].observe
        self.snapshot_loaded = self.snapshot_durations["load"].observe
        self.produce_records = 0
        self.inbound_received_bytes = self.inbound_sent_bytes = 0
        self.peer_received_bytes = self.peer_sent_bytes = 0
        self.inbound_opened = self.peer_opened = 0
        # by group (raftcore.node.metrics_state shows them with the group's labels)
        self.elections_started: dict[TopicPartition, int] = {}
        self.elections_won: dict[TopicPartition, int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EventCollector(self))
        self.registry.register(StateCollector(node))

    # ---- hooks ------------------------------------------------------------------------------

    def kafka_request(self, key: int) -> Callable[[float], None]:
        """The ``observe`` of the latency histogram of Kafka requests of type ``key``."""
        observe = self._kafka_observe.get(key)
        if observe is None:
            histogram = self.kafka_latency[api_name(key)] = Histogram(LATENCY_BUCKETS)
            observe = self._kafka_observe[key] = histogram.observe
        return observe

    def raft_request(self, key: int) -> Callable[[float], None]:
        """The ``observe`` of the latency histogram of raft requests of type ``key``."""
        observe = self._raft_observe.get(key)
        if observe is None:
            histogram = self.raft_latency[api_name(key)] = Histogram(LATENCY_BUCKETS)
            observe = self._raft_observe[key] = histogram.observe
        return observe

    def timed_flush(self, flush: Callable[[], T]) -> T:
        """Run ``flush`` (on the flush thread) and observe how long it took."""
        started = time.perf_counter()
        result = flush()
        self.fsync.observe(time.perf_counter() - started)
        return result

    def state_seen(self, group: TopicPartition, previous: Any, state: Any) -> None:
        """The epoch state of ``group``'s core after a step, and ``previous``, the one seen
        before it (the group calls this when it changed). A leader not seen as a candidate of
        its epoch first (a single voter elects itself in one step) started its election too."""
        started = self.elections_started
        if isinstance(state, CandidateState):
            started[group] = started.get(group, 0) + 1
        elif isinstance(state, LeaderState):
            if not (isinstance(previous, CandidateState) and previous.epoch == state.epoch):
                started[group] = started.get(group, 0) + 1
            self.elections_won[group] = self.elections_won.get(group, 0) + 1

    def text(self) -> bytes:
        """The exposition text (Prometheus' text format 0.0.4)."""
        return generate_latest(self.registry)


class _EventCollector:
    """The counters and histograms of :class:`NodeMetrics`, as Prometheus families."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.m
        yield _histograms(
            "raftcore_kafka_request_duration_seconds",
            "Kafka client requests served, by request type: time from decoding to the answer "
            "(a long-poll Fetch counts its wait); _count is the request count",
            "request",
            m.kafka_latency,
        )
        yield _histograms(
            "raftcore_raft_request_duration_seconds",
            "Raft requests from the other voters served, by request type (Fetch is "
            "replication; it long-polls)",
            "request",
            m.raft_latency,
        )
        yield _histograms(
            "raftcore_log_fsync_duration_seconds",
            "Log fsyncs (one covers every append since the last: group commit)",
            None,
            {"": m.fsync},
        )
        yield _histograms(
            "raftcore_snapshot_duration_seconds",
            "Snapshots taken (from the state machine's snapshot call to the frozen file) and "
            "loaded into the state machine or listener",
            "operation",
            m.snapshot_durations,
        )
        yield _counter(
            "raftcore_produce_records",
            "Records Produce requests wrote through this node as leader (a retried duplicate "
            "batch counts again)",
            m.produce_records,
        )
        yield _by_connection(
            "raftcore_network_received_bytes",
            "Bytes of Kafka frames received (with their size prefix), by connection kind",
            m.inbound_received_bytes,
            m.peer_received_bytes,
        )
        yield _by_connection(
            "raftcore_network_sent_bytes",
            "Bytes of Kafka frames sent (with their size prefix), by connection kind",
            m.inbound_sent_bytes,
            m.peer_sent_bytes,
        )
        yield _by_connection(
            "raftcore_connections_opened",
            "Connections accepted (inbound) or established to the other voters (peer)",
            m.inbound_opened,
            m.peer_opened,
        )


def _histograms(
    name: str, doc: str, label: str | None, children: dict[str, Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label] if label else [])
    for value, histogram in list(children.items()):
        family.add_metric([value] if label else [], histogram.cumulative(), histogram.sum)
    return family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _by_connection(name: str, doc: str, inbound: int, peer: int) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["connection"])
    family.add_metric([INBOUND], inbound)
    family.add_metric([PEER], peer)
    return family
