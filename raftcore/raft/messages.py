"""The messages of the Raft core, one value per Kafka RPC (single partition, fields named after
Kafka's message specs; the network layer maps them to and from the wire).

- Vote (api key 52), BeginQuorumEpoch (53), EndQuorumEpoch (54): KIP-595's election RPCs.
- Fetch (1) with the KRaft fields: the follower's pull, which also acknowledges
  (FetchOffset is how far the follower's log is durable) and carries divergence
  (DivergingEpoch) and leader discovery (CurrentLeader) back.
- FetchSnapshot (59), KIP-630: a follower the leader answered with a SnapshotId downloads
  that snapshot in chunks before it fetches again.
- UpdateRaftVoter (82), KIP-853: a voter tells the leader its directory id, endpoint and the
  kraft.version range it speaks (the leader writes them into the voter set).

Replicas are named by id *and* directory id (KIP-853, :mod:`raftcore.raft.voters`): Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot carry the directory ids of the
sender and of the voter a request is for (None: not known, or a peer without KIP-853).

Requests and responses travel with a correlation id and the sender's id, outside the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftcore.error_codes import Errors
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.raft.voters import VoterEndpoint

__all__ = [
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "Outbound",
    "RaftRequest",
    "RaftResponse",
    "UpdateVoterRequest",
    "UpdateVoterResponse",
    "VoteRequest",
    "VoteResponse",
]


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A candidate asks for a vote. ``last_offset_epoch``/``last_offset`` describe the
    candidate's log (its last fetched epoch and end offset); ``voter_id`` is the receiver.
    ``pre_vote`` (Vote v2, KIP-996): a Prospective asks, in its current epoch, whether the
    voter would vote for it; the answer binds nothing. (Kafka's v2 schema calls the
    candidate fields ReplicaEpoch/ReplicaId; the wire format is the same.)"""

    cluster_id: str | None
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    voter_id: int = -1
    pre_vote: bool = False
    candidate_directory_id: bytes | None = None
    voter_directory_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: int
    leader_id: int  # -1: unknown
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """A new leader announces itself to every voter (and repeats it as a heartbeat until each
    has answered)."""

    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    voter_id: int = -1
    voter_directory_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """A resigning leader tells the voters; ``preferred_successors`` lists the other voters by
    how far they have replicated, best first, so the best placed one runs first."""

    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A replica pulls from the leader.

    ``fetch_offset`` is the fetcher's log end offset -- for a voter also an acknowledgement
    that everything below it is durable -- and ``last_fetched_epoch`` the epoch of its last
    record: together they let the leader detect divergence. ``current_leader_epoch`` fences
    stale leaders and fetchers. ``is_follower`` says the sender considers itself a voter (the
    KIP-595 draft's IsFollower); a leader that does not count it among the voters answers
    INCONSISTENT_VOTER_SET so that it stops acting as one. ``high_watermark`` is the
    fetcher's known high watermark (-1: unknown); the leader answers a parked fetch as soon as
    its own high watermark is past it (Kafka's Fetch v18 field).
    """

    cluster_id: str | None
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    max_wait_ms: int = 500
    max_bytes: int = 8 << 20
    is_follower: bool = False
    high_watermark: int = -1
    replica_directory_id: bytes | None = None
    # where the fetcher listens (raftcore's own tagged field): the leader needs it to add an
    # observer as a voter (AddRaftVoter names only the replica)
    replica_endpoint: VoterEndpoint | None = None
    # a repair fetch (raftcore's own tagged field): the leader's copy of one batch the fetcher
    # found damaged in its log (raftcore.raft.damage); it acknowledges nothing
    repair: bool = False


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The leader's answer. Exactly one of: records (maybe empty), ``diverging_epoch`` (truncate
    to where this epoch ends, then fetch again), ``snapshot_id`` (fetch this snapshot first),
    or an error with ``current_leader`` to follow."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    current_leader: LeaderAndEpoch
    records: bytes | memoryview = b""
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == Errors.NONE


_NO_SNAPSHOT = OffsetAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """A follower asks the leader for ``max_bytes`` of snapshot ``snapshot_id`` from byte
    ``position`` (the bytes it holds so far)."""

    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int = 8 << 20
    replica_directory_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """The leader's chunk: ``data`` is the snapshot's bytes from ``position`` (cut anywhere,
    Kafka's UnalignedRecords); ``size`` is the whole snapshot's size in bytes."""

    error_code: int
    current_leader: LeaderAndEpoch
    snapshot_id: OffsetAndEpoch = _NO_SNAPSHOT
    size: int = -1
    position: int = -1
    data: bytes | memoryview = b""


@dataclass(frozen=True, slots=True)
class UpdateVoterRequest:
    """A voter tells the leader of ``current_leader_epoch`` who it is (its directory id), where
    it listens and which kraft.version levels it speaks (Kafka's UpdateRaftVoter)."""

    cluster_id: str | None
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: bytes | None
    endpoint: VoterEndpoint | None
    min_version: int = 0
    max_version: int = 1


@dataclass(frozen=True, slots=True)
class UpdateVoterResponse:
    error_code: int
    current_leader: LeaderAndEpoch


RaftRequest = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | UpdateVoterRequest
)
RaftResponse = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | UpdateVoterResponse
)


@dataclass(slots=True)
class Outbound:
    """A message the core wants sent.

    ``after_flush``: send only once the local log is durable up to this offset (-1: at once).
    This is how the persist-before-send rule lives in a data structure: a follower's next
    Fetch acknowledges its log end offset, so it waits for the fsync that makes it true; the
    node may group many fsyncs into one but can never send such a message early.
    """

    destination: int
    correlation_id: int
    message: RaftRequest | RaftResponse
    after_flush: int = -1
    is_request: bool = field(default=False)
