"""Configuration of the Raft core, with Kafka's names and defaults (QuorumConfig)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["QuorumConfig"]

# Kafka names (with or without the "controller." prefix) -> field names.
_KAFKA_NAMES = {
    "quorum.voters": "voters",
    "quorum.election.timeout.ms": "election_timeout_ms",
    "quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "quorum.request.timeout.ms": "request_timeout_ms",
    "quorum.retry.backoff.ms": "retry_backoff_ms",
    "quorum.append.linger.ms": "append_linger_ms",
    # KIP-630's names, and Kafka's metadata-log ones where KIP-630's were not kept.
    "snapshot.minimum.records": "snapshot_min_records",
    "metadata.log.max.record.bytes.between.snapshots": "snapshot_min_bytes",
    "metadata.log.max.snapshot.interval.ms": "snapshot_interval_ms",
    "max.replication.lag.ms": "max_replication_lag_ms",
    "quorum.high.watermark.linger.ms": "high_watermark_linger_ms",
    "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
}


@dataclass(frozen=True)
class QuorumConfig:
    """Timeouts and limits of the quorum.

    - ``voters``: ids of the voting replicas (``controller.quorum.voters`` without the
      endpoints, which are the network layer's business).
    - ``election_timeout_ms`` (1000): a voter that hears from no leader for a random time in
      [T, 2T) starts an election.
    - ``fetch_timeout_ms`` (2000): a follower that gets no successful fetch response for this
      long starts an election; a leader that no majority fetched from for 1.5x this long
      resigns (check quorum); the leader re-sends BeginQuorumEpoch every half of it.
    - ``election_backoff_max_ms`` (1000): cap of the randomized exponential backoff after a
      lost election.
    - ``request_timeout_ms`` (2000) and ``retry_backoff_ms`` (20): per-request timeout, and
      the pause before retrying a destination after a failure. A Fetch's timeout counts the
      leader's long poll too, so it must be longer than ``fetch_max_wait_ms`` (refused
      otherwise).
    - ``append_linger_ms`` (25): how long the node batches client appends (used by the node).
    - ``fetch_max_wait_ms`` (500) and ``fetch_max_bytes`` (8 MiB): the follower's fetch
      long-poll and size, Kafka's MAX_FETCH_WAIT_MS and MAX_FETCH_SIZE_BYTES.
    - ``replica_fetch_response_max_bytes`` (10 MiB, Kafka's
      ``replica.fetch.response.max.bytes``): the most the leader puts in an answer to another
      replica's Fetch or FetchSnapshot, whatever it asked for (the first batch of a Fetch comes
      whole even when it is larger, KIP-74).
    - ``cluster_id``: checked on every raft request (INCONSISTENT_CLUSTER_ID).
    - ``bootstrap_servers`` (0): how many bootstrap servers the driver can reach (Kafka's
      ``controller.quorum.bootstrap.servers``), addressed as ids -2, -3, ...: an observer that
      knows no voter to ask who leads asks one of them (a node joining a cluster).
    - Snapshots (KIP-630), all off (0) by default: the core raises ``Output.snapshot_due``
      once the listener has read ``snapshot_min_records`` records, or ``snapshot_min_bytes``
      bytes of batches, since the last snapshot, or ``snapshot_interval_ms`` has passed since
      it with at least one record read.
    - ``max_replication_lag_ms`` (30000, KIP-630's max.replication.lag.ms): the leader moves
      its log start offset to its latest snapshot once every replica it tracks has fetched
      past it, or once the snapshot is this old, whichever comes first.
    - ``snapshots_on_request`` (False, raftcore's): take a snapshot when DeleteRecords or
      retention asks for the log start to move, even with no trigger set (a node that only
      replicates the log takes empty snapshots: the log prefix is simply gone, as in Kafka).
    - ``high_watermark_linger_ms`` (5, raftcore's): how long the leader may hold a fetch
      whose only news is a high watermark the fetcher has not seen (Fetch v18's
      HighWatermark, KIP-1166), in the hope that records come to carry it. Under a steady
      write load they do, and the answer-and-fetch-again round that each commit would
      otherwise cost every follower is saved; when writes stop, followers learn the high
      watermark this much later. 0 answers at once, as KIP-1166 does.
    - ``acknowledge_unflushed`` (False, raftcore's; the node's ``flush="interval"``): count
      what is appended as durable at once, before the fsync: the leader's own end offset in
      the high watermark, a follower's fetch offset and a candidate's last offset are sent
      without waiting for the fsync. Faster, at a price KRaft does not pay: a crash of a
      majority can lose acknowledged records.
    """

    voters: frozenset[int] = field(default_factory=frozenset)
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 << 20
    replica_fetch_response_max_bytes: int = 10 << 20
    cluster_id: str = ""
    bootstrap_servers: int = 0
    snapshot_min_records: int = 0
    snapshot_min_bytes: int = 0
    snapshot_interval_ms: int = 0
    max_replication_lag_ms: int = 30_000
    high_watermark_linger_ms: int = 5
    snapshots_on_request: bool = False
    acknowledge_unflushed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "voters", frozenset(int(v) for v in self.voters))
        for f in fields(self):
            if f.name.endswith(("_ms", "_bytes")):
                value = getattr(self, f.name)
                if not isinstance(value, int) or value < 0:
                    raise ValueError(f"{f.name} must be a non-negative int, got {value!r}")
        if not isinstance(self.snapshot_min_records, int) or self.snapshot_min_records < 0:
            raise ValueError(
                "snapshot_min_records must be a non-negative int, "
                f"got {self.snapshot_min_records!r}"
            )
        if self.replica_fetch_response_max_bytes < 1:
            raise ValueError("replica_fetch_response_max_bytes must be at least 1")
        if self.fetch_timeout_ms == 0 or self.request_timeout_ms == 0:
            raise ValueError("fetch_timeout_ms and request_timeout_ms must be positive")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise ValueError(
                f"request_timeout_ms ({self.request_timeout_ms}) must be greater than "
                f"fetch_max_wait_ms ({self.fetch_max_wait_ms}): a follower of an idle leader "
                "would give up on every fetch the leader holds for its long poll"
            )
        if any(v < 0 for v in self.voters):
            raise ValueError(f"voter ids must be >= 0, got {sorted(self.voters)}")

    @property
    def snapshots_enabled(self) -> bool:
        """A trigger is set: snapshots are taken as records come."""
        return bool(
            self.snapshot_min_records or self.snapshot_min_bytes or self.snapshot_interval_ms
        )

    @property
    def takes_snapshots(self) -> bool:
        """Snapshots are taken by a trigger, or on request only (DeleteRecords, retention)."""
        return self.snapshots_enabled or self.snapshots_on_request

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader resigns when no majority fetched within this (1.5 x the fetch timeout)."""
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_interval_ms(self) -> int:
        return self.fetch_timeout_ms // 2

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> QuorumConfig:
        """Build from Kafka property names (``controller.quorum.election.timeout.ms``, ...)
        or field names. ``quorum.voters`` takes ``id@host:port,...`` or ids."""
        names = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in props.items():
            short = key.removeprefix("controller.")
            name = _KAFKA_NAMES.get(short, key)
            if name not in names:
                raise ValueError(f"unknown quorum config {key!r}")
            if name == "voters":
                ids = (
                    [item.split("@")[0] for item in value.split(",") if item]
                    if isinstance(value, str)
                    else value
                )
                kwargs[name] = frozenset(int(v) for v in ids)
            elif name == "cluster_id":
                kwargs[name] = str(value)
            else:
                kwargs[name] = int(value)
        return cls(**kwargs)
