"""The Raft core's messages on the Kafka wire: Vote (v2, with KIP-996's PreVote),
BeginQuorumEpoch, EndQuorumEpoch (v1), the replica Fetch (v17), FetchSnapshot (v1, KIP-630) and
UpdateRaftVoter (v0, KIP-853).

Kafka's RPCs are multi-partition; each Raft group of a node replicates one topic-partition, so a
request carries one topic (by name, or by id in Fetch) with one partition, the group's that sent
it, and an answer names the same. A request that names a partition the node has no group for is
answered with UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID for Fetch) and never reaches a core;
an answer that names another partition than its request's is dropped. Nodes of one cluster
speak the same versions, so peers do not negotiate versions; but a node asks each peer's
ApiVersions when it connects, and sends UpdateRaftVoter only to a peer that lists it
(:mod:`raftcore.node.peer_apis`: the release before dynamic voters closes the connection of an
API it does not know).

Replicas are named by id and directory id (KIP-853): the directory ids travel in Vote v1+,
BeginQuorumEpoch v1, EndQuorumEpoch v1 (the preferred candidates), Fetch v17 and FetchSnapshot
v1; Kafka's zero uuid is the core's None (not known). Every address another node tells (the
leader endpoints of a request, the NodeEndpoints of an answer) goes into the node's address
book (:mod:`raftcore.node.peers`), which is also where the endpoints this node tells come from.

Some fields are ours, tagged where Kafka 3.9 has none: on a Fetch partition ``HighWatermark``
(tag 100, the fetcher's known high watermark, which Kafka added in Fetch v18) and
``IsFollower`` (tag 101, KIP-595's draft field); on the Fetch itself ``ReplicaEndpoint`` (tag
102, where the fetching replica listens: the leader needs it to add an observer as a voter)
and ``ClientEndpoint`` (tag 103, where it takes client requests); on the Fetch answer
``ClientEndpoints`` (tag 100, where each node the answering node knows takes client requests:
how a follower's Metadata names the other nodes' client listeners, not their node listeners).
Kafka brokers skip unknown tags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.node.topic_ids import TopicIds
from raftcore.protocol.api import ApiKey, request_spec, response_spec
from raftcore.protocol.api import decode_response as decode_frame
from raftcore.protocol.api import encode_request as encode_frame
from raftcore.protocol.error_answers import raft_error_response
from raftcore.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Outbound,
    RaftRequest,
    RaftResponse,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.raft.voters import VoterEndpoint
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.config import NodeConfig
    from raftcore.node.peers import AddressBook

__all__ = [
    "VERSIONS",
    "WireNode",
    "WrongPartition",
    "decode_request",
    "decode_response",
    "directory_id",
    "encode_request",
    "encode_response",
    "learn_leader",
    "error_response",
    "client_endpoint",
    "is_replica_fetch",
]


class WireNode(Protocol):
    """What the wire format needs of a node: its configuration (cluster, topic, listener) and
    its address book (the endpoints it tells and learns); and, on a node that replicates more
    topics than ``NodeConfig.topic``, ``topic_ids`` (:class:`~raftcore.node.topic_ids.TopicIds`)."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def address_book(self) -> AddressBook: ...


VERSIONS = {
    ApiKey.VOTE: 2,  # v2: PreVote (KIP-996)
    ApiKey.BEGIN_QUORUM_EPOCH: 1,
    ApiKey.END_QUORUM_EPOCH: 1,
    ApiKey.FETCH: 17,
    ApiKey.FETCH_SNAPSHOT: 1,
    ApiKey.UPDATE_RAFT_VOTER: 0,
}
_ZERO_UUID = b"\x00" * 16
CLIENT_ID = "raftcore-replica"


def _uuid(directory_id: bytes | None) -> bytes:
    """A directory id on the wire: Kafka's zero uuid for none."""
    return _ZERO_UUID if directory_id is None else directory_id


def directory_id(raw: Any) -> bytes | None:
    """A directory id off the wire: None for Kafka's zero uuid (or a field not sent)."""
    if raw is None:
        return None
    value = bytes(raw)
    return None if value == _ZERO_UUID or len(value) != 16 else value


class WrongPartition(RaftcoreError):
    """A raft request for a topic-partition this cluster does not replicate."""

    def __init__(self, api_key: int, message: str) -> None:
        super().__init__(message)
        self.api_key = api_key


# ---- requests out ----------------------------------------------------------------------------


def _named(node: WireNode, name: TopicPartition | None) -> TopicPartition:
    """The topic-partition a message is for: ``name``, or partition 0 of the topic."""
    return TopicPartition(node.config.topic, 0) if name is None else name


def encode_request(
    node: WireNode, out: Outbound, name: TopicPartition | None = None
) -> tuple[int, int, bytes]:
    """(api key, version, frame bytes) of a request the core of the group ``name`` wants sent
    (None: partition 0 of the topic)."""
    message = out.message
    cfg = node.config
    name = _named(node, name)
    if isinstance(message, FetchRequest):
        key = ApiKey.FETCH
        cls = request_spec(key).cls
        partition = cls.FetchPartition(
            partition=name.partition,
            current_leader_epoch=message.current_leader_epoch,
            fetch_offset=message.fetch_offset,
            last_fetched_epoch=message.last_fetched_epoch,
            log_start_offset=-1,
            partition_max_bytes=message.max_bytes,
            high_watermark=message.high_watermark,
            is_follower=message.is_follower,
            repair=message.repair,
            replica_directory_id=_uuid(message.replica_directory_id),
        )
        body = cls(
            cluster_id=message.cluster_id,
            replica_state=cls.ReplicaState(replica_id=message.replica_id, replica_epoch=-1),
            max_wait_ms=message.max_wait_ms,
            min_bytes=0,
            max_bytes=message.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[cls.FetchTopic(topic_id=_topic_id(node, name), partitions=[partition])],
            forgotten_topics_data=[],
            rack_id="",
        )
        ep = message.replica_endpoint
        if ep is not None:
            body.replica_endpoint = cls.ReplicaEndpoint(name=ep.name, host=ep.host, port=ep.port)
        own = cfg.advertised  # where this replica takes clients, for the leader to tell
        if own is not None:
            body.client_endpoint = cls.ClientEndpoint(host=own.host, port=own.port)
    elif isinstance(message, FetchSnapshotRequest):
        key = ApiKey.FETCH_SNAPSHOT
        cls = request_spec(key).cls
        partition = cls.PartitionSnapshot(
            partition=name.partition,
            current_leader_epoch=message.current_leader_epoch,
            snapshot_id=cls.SnapshotId(
                end_offset=message.snapshot_id.offset, epoch=message.snapshot_id.epoch
            ),
            position=message.position,
            replica_directory_id=_uuid(message.replica_directory_id),
        )
        body = cls(
            cluster_id=message.cluster_id,
            replica_id=message.replica_id,
            max_bytes=message.max_bytes,
            topics=[cls.TopicSnapshot(name=name.topic, partitions=[partition])],
        )
    elif isinstance(message, VoteRequest):
        key = ApiKey.VOTE
        cls = request_spec(key).cls
        partition = cls.PartitionData(
            partition_index=name.partition,
            candidate_epoch=message.candidate_epoch,
            candidate_id=message.candidate_id,
            candidate_directory_id=_uuid(message.candidate_directory_id),
            voter_directory_id=_uuid(message.voter_directory_id),
            last_offset_epoch=message.last_offset_epoch,
            last_offset=message.last_offset,
            pre_vote=message.pre_vote,
        )
        body = cls(
            cluster_id=message.cluster_id,
            voter_id=message.voter_id,
            topics=[cls.TopicData(topic_name=name.topic, partitions=[partition])],
        )
    elif isinstance(message, BeginQuorumEpochRequest):
        key = ApiKey.BEGIN_QUORUM_EPOCH
        cls = request_spec(key).cls
        partition = cls.PartitionData(
            partition_index=name.partition,
            voter_directory_id=_uuid(message.voter_directory_id),
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
        )
        body = cls(
            cluster_id=message.cluster_id,
            voter_id=message.voter_id,
            topics=[cls.TopicData(topic_name=name.topic, partitions=[partition])],
            leader_endpoints=_leader_endpoints(node, cls),
        )
    elif isinstance(message, EndQuorumEpochRequest):
        key = ApiKey.END_QUORUM_EPOCH
        cls = request_spec(key).cls
        partition = cls.PartitionData(
            partition_index=name.partition,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
            preferred_candidates=[
                cls.ReplicaInfo(
                    candidate_id=c,
                    candidate_directory_id=_uuid(node.address_book.directory_id_of(c)),
                )
                for c in message.preferred_successors
            ],
        )
        body = cls(
            cluster_id=message.cluster_id,
            topics=[cls.TopicData(topic_name=name.topic, partitions=[partition])],
            leader_endpoints=_leader_endpoints(node, cls),
        )
    elif isinstance(message, UpdateVoterRequest):
        key = ApiKey.UPDATE_RAFT_VOTER
        cls = request_spec(key).cls
        ep = message.endpoint
        listeners = [] if ep is None else [cls.Listener(name=ep.name, host=ep.host, port=ep.port)]
        body = cls(
            cluster_id=message.cluster_id,
            current_leader_epoch=message.current_leader_epoch,
            voter_id=message.voter_id,
            voter_directory_id=_uuid(message.voter_directory_id),
            listeners=listeners,
            k_raft_version_feature=cls.KRaftVersionFeature(
                min_supported_version=message.min_version,
                max_supported_version=message.max_version,
            ),
        )
    else:
        raise TypeError(f"not a raft request: {message!r}")
    version = VERSIONS[key]
    frame = encode_frame(key, version, out.correlation_id, CLIENT_ID, body)
    return key, version, frame


def _leader_endpoints(node: WireNode, cls: Any) -> list[Any]:
    cfg = node.config
    ep = cfg.node_advertised  # KIP-853: the leader's endpoints are its node listener's
    assert ep is not None
    return [cls.LeaderEndpoint(name=cfg.listener_name, host=ep.host, port=ep.port)]


def learn_leader(node: WireNode, key: int, leader_id: int, body: Any) -> None:
    """A BeginQuorumEpoch or EndQuorumEpoch says where its leader listens. Called once the
    request passed the check of who sent it (raftcore.security.authorization), never by
    :func:`decode_request`: a request refused there teaches nothing (node-9's certificate
    naming node 5 leader at an address of its choosing would send a joining node, which
    knows its leader from such words alone, there)."""
    if key not in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
        return
    for ep in getattr(body, "leader_endpoints", None) or ():
        node.address_book.learn(leader_id, ep.host, ep.port)
        break


# ---- requests in -----------------------------------------------------------------------------


def _replica_id(body: Any) -> int:
    """The fetching replica: ReplicaState (v15+) or ReplicaId (older); -1 for a consumer."""
    state = getattr(body, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        return state.replica_id
    return getattr(body, "replica_id", -1)


def client_endpoint(body: Any) -> tuple[str, int] | None:
    """(host, port) where the replica of a Fetch says it takes client requests, or None."""
    ep = getattr(body, "client_endpoint", None)
    if ep is None or not ep.host:
        return None
    return ep.host, ep.port


def is_replica_fetch(body: Any) -> bool:
    """A Fetch from a replica (a voter or an observer node), not from a consumer."""
    return _replica_id(body) >= 0


def _single_partition(
    node: WireNode, key: int, body: Any, *, by_id: bool = False
) -> tuple[TopicPartition, Any]:
    """The topic-partition a raft request names, and its partition part; WrongPartition when it
    names more than one, or a topic the node has no group of (whether it has a group for the
    partition, the caller asks its groups)."""
    topics = body.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise WrongPartition(key, "a raft request must name exactly one topic-partition")
    topic = topics[0]
    if by_id:
        known = _ids(node).name_of(bytes(topic.topic_id))
        if known is None:
            raise WrongPartition(key, "unknown topic id")
        partition = topic.partitions[0]
        return TopicPartition(known, partition.partition), partition
    name = topic.name if key == ApiKey.FETCH_SNAPSHOT else topic.topic_name
    if name is None or _ids(node).id_of(name) is None:
        raise WrongPartition(key, f"unknown topic {name!r}")
    partition = topic.partitions[0]
    index = partition.partition if key == ApiKey.FETCH_SNAPSHOT else partition.partition_index
    return TopicPartition(name, index), partition


def decode_request(
    node: WireNode, header: Any, body: Any
) -> tuple[TopicPartition, int, RaftRequest]:
    """(the topic-partition it is for, sender id, the core's request) of a decoded raft
    request; WrongPartition when it is not for a topic-partition of the cluster."""
    key = header.request_api_key
    if key == ApiKey.FETCH:
        if header.request_api_version < 13:
            raise WrongPartition(key, "replica fetches need Fetch v13+ (topic ids)")
        name, p = _single_partition(node, key, body, by_id=True)
        replica_id = _replica_id(body)
        request: RaftRequest = FetchRequest(
            cluster_id=body.cluster_id,
            replica_id=replica_id,
            fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch,
            current_leader_epoch=p.current_leader_epoch,
            max_wait_ms=max(0, body.max_wait_ms),
            max_bytes=max(1, min(p.partition_max_bytes, body.max_bytes)),
            is_follower=bool(getattr(p, "is_follower", False)),
            repair=bool(getattr(p, "repair", False)),
            high_watermark=getattr(p, "high_watermark", -1),
            replica_directory_id=directory_id(getattr(p, "replica_directory_id", None)),
            replica_endpoint=_endpoint(getattr(body, "replica_endpoint", None)),
        )
        return name, replica_id, request
    if key == ApiKey.FETCH_SNAPSHOT:
        name, p = _single_partition(node, key, body)
        request = FetchSnapshotRequest(
            cluster_id=body.cluster_id,
            replica_id=body.replica_id,
            current_leader_epoch=p.current_leader_epoch,
            snapshot_id=OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            position=p.position,
            max_bytes=max(1, body.max_bytes),
            replica_directory_id=directory_id(getattr(p, "replica_directory_id", None)),
        )
        return name, body.replica_id, request
    if key == ApiKey.VOTE:
        name, p = _single_partition(node, key, body)
        request = VoteRequest(
            cluster_id=body.cluster_id,
            candidate_epoch=p.candidate_epoch,
            candidate_id=p.candidate_id,
            last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset,
            voter_id=getattr(body, "voter_id", -1),
            pre_vote=bool(getattr(p, "pre_vote", False)),
            candidate_directory_id=directory_id(getattr(p, "candidate_directory_id", None)),
            voter_directory_id=directory_id(getattr(p, "voter_directory_id", None)),
        )
        return name, p.candidate_id, request
    if key == ApiKey.BEGIN_QUORUM_EPOCH:
        name, p = _single_partition(node, key, body)
        request = BeginQuorumEpochRequest(
            cluster_id=body.cluster_id,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            voter_id=getattr(body, "voter_id", -1),
            voter_directory_id=directory_id(getattr(p, "voter_directory_id", None)),
        )
        return name, p.leader_id, request
    if key == ApiKey.END_QUORUM_EPOCH:
        name, p = _single_partition(node, key, body)
        if header.request_api_version >= 1:
            # the candidates' directory ids are not the core's business: a replica that is not
            # a voter (a wiped disk under a voter's id) never stands, whatever it is told
            successors = tuple(c.candidate_id for c in p.preferred_candidates)
        else:
            successors = tuple(p.preferred_successors)
        request = EndQuorumEpochRequest(
            cluster_id=body.cluster_id,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            preferred_successors=successors,
        )
        return name, p.leader_id, request
    if key == ApiKey.UPDATE_RAFT_VOTER:
        listeners = body.listeners or []
        feature = body.k_raft_version_feature
        # KIP-853: UpdateRaftVoter names no partition; it is for the group that holds the
        # cluster's voters (today the one group, NodeConfig.topic partition 0)
        name = TopicPartition(node.config.topic, 0)
        request = UpdateVoterRequest(
            cluster_id=body.cluster_id,
            current_leader_epoch=body.current_leader_epoch,
            voter_id=body.voter_id,
            voter_directory_id=directory_id(body.voter_directory_id),
            endpoint=_endpoint(listeners[0]) if listeners else None,
            min_version=0 if feature is None else feature.min_supported_version,
            max_version=0 if feature is None else feature.max_supported_version,
        )
        return name, body.voter_id, request
    raise TypeError(f"API {key} is not a raft request")


def _endpoint(listener: Any) -> VoterEndpoint | None:
    if listener is None or not listener.host:
        return None
    return VoterEndpoint(listener.name, listener.host, listener.port)


# ---- responses out ----------------------------------------------------------------------------


def encode_response(
    node: WireNode, out: Outbound, api_key: int, version: int, name: TopicPartition | None = None
) -> Any:
    """The response body (to encode at ``version``) of a response the core of the group
    ``name`` produced (None: partition 0 of the topic)."""
    message = out.message
    name = _named(node, name)
    cls = response_spec(api_key).cls
    if isinstance(message, FetchResponse):
        leader = message.current_leader
        partition = cls.PartitionData(
            partition_index=name.partition,
            error_code=message.error_code,
            high_watermark=message.high_watermark,
            last_stable_offset=message.high_watermark,
            log_start_offset=message.log_start_offset,
            current_leader=cls.LeaderIdAndEpoch(
                leader_id=leader.leader_id if leader.known else -1, leader_epoch=leader.epoch
            ),
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=message.records,
        )
        if message.diverging_epoch is not None:
            partition.diverging_epoch = cls.EpochEndOffset(
                epoch=message.diverging_epoch.epoch, end_offset=message.diverging_epoch.offset
            )
        if message.snapshot_id is not None:
            partition.snapshot_id = cls.SnapshotId(
                end_offset=message.snapshot_id.offset, epoch=message.snapshot_id.epoch
            )
        body = cls(
            throttle_time_ms=0,
            error_code=Errors.NONE,
            session_id=0,
            responses=[
                cls.FetchableTopicResponse(topic_id=_topic_id(node, name), partitions=[partition])
            ],
        )
        if version >= 16:
            body.node_endpoints = node_endpoints(node, cls.NodeEndpoint, leader)
        body.client_endpoints = [
            cls.ClientEndpoint(node_id=i, host=ep.host, port=ep.port)
            for i, ep in node.address_book.told_client_endpoints()
        ]
        return body
    if isinstance(message, FetchSnapshotResponse):
        leader = message.current_leader
        partition = cls.PartitionSnapshot(
            index=name.partition,
            error_code=message.error_code,
            snapshot_id=cls.SnapshotId(
                end_offset=message.snapshot_id.offset, epoch=message.snapshot_id.epoch
            ),
            current_leader=cls.LeaderIdAndEpoch(
                leader_id=leader.leader_id if leader.known else -1, leader_epoch=leader.epoch
            ),
            size=message.size,
            position=message.position,
            unaligned_records=message.data,  # a view of the snapshot's map: sent uncopied
        )
        body = cls(
            throttle_time_ms=0,
            error_code=Errors.NONE,
            topics=[cls.TopicSnapshot(name=name.topic, partitions=[partition])],
        )
        if version >= 1:
            body.node_endpoints = node_endpoints(node, cls.NodeEndpoint, leader)
        return body
    if isinstance(message, UpdateVoterResponse):
        leader = message.current_leader
        ep = node.address_book.endpoint_of(leader.leader_id) if leader.known else None  # type: ignore[arg-type]
        return cls(
            throttle_time_ms=0,
            error_code=message.error_code,
            current_leader=cls.CurrentLeader(
                leader_id=leader.leader_id if leader.known else -1,
                leader_epoch=leader.epoch,
                host="" if ep is None else ep.host,
                port=-1 if ep is None else ep.port,
            ),
        )
    if not isinstance(message, (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse)):
        raise TypeError(f"not a raft response: {message!r}")
    partition = cls.PartitionData(
        partition_index=name.partition,
        error_code=message.error_code,
        leader_id=message.leader_id,
        leader_epoch=message.leader_epoch,
    )
    if isinstance(message, VoteResponse):
        partition.vote_granted = message.vote_granted
    leader = LeaderAndEpoch(
        message.leader_id if message.leader_id >= 0 else None, message.leader_epoch
    )
    body = cls(
        error_code=Errors.NONE,
        topics=[cls.TopicData(topic_name=name.topic, partitions=[partition])],
    )
    if version >= 1:
        body.node_endpoints = node_endpoints(node, cls.NodeEndpoint, leader)
    return body


def node_endpoints(node: WireNode, cls: Any, leader: LeaderAndEpoch) -> list[Any]:
    """KIP-951's NodeEndpoints: the endpoint of ``leader`` as entries of ``cls`` (a message's
    NodeEndpoint struct; Rack, where the message has it, stays null)."""
    if not leader.known:
        return []
    ep = node.address_book.endpoint_of(leader.leader_id)  # type: ignore[arg-type]
    if ep is None:
        return []
    return [cls(node_id=leader.leader_id, host=ep.host, port=ep.port)]


def error_response(node: WireNode, api_key: int, version: int, error_code: int) -> Any:
    """A top-level error answer (the request named a partition we do not have)."""
    return raft_error_response(api_key, error_code)


# ---- responses in -----------------------------------------------------------------------------


def decode_response(
    node: WireNode, api_key: int, version: int, frame: bytes, name: TopicPartition | None = None
) -> RaftResponse:
    """The core's response from a response frame to a request of the group ``name`` (None:
    partition 0 of the topic); RaftcoreError when it does not parse or does not answer for
    that partition."""
    name = _named(node, name)
    _, body = decode_frame(api_key, version, frame)
    for ep in getattr(body, "node_endpoints", None) or ():  # KIP-951: where the leader is
        node.address_book.learn(ep.node_id, ep.host, ep.port)
    for ep in getattr(body, "client_endpoints", None) or ():  # where each node takes clients
        node.address_book.learn_client(ep.node_id, ep.host, ep.port)
    if api_key == ApiKey.UPDATE_RAFT_VOTER:
        cl = body.current_leader
        if cl is None:
            return UpdateVoterResponse(body.error_code, LeaderAndEpoch(None, -1))
        node.address_book.learn(cl.leader_id, cl.host, cl.port)
        return UpdateVoterResponse(
            body.error_code,
            LeaderAndEpoch(cl.leader_id if cl.leader_id >= 0 else None, cl.leader_epoch),
        )
    if body.error_code != Errors.NONE:
        return _top_level_error(api_key, body.error_code)
    if api_key == ApiKey.FETCH:
        if len(body.responses) != 1 or len(body.responses[0].partitions) != 1:
            raise RaftcoreError("a fetch response must carry exactly one partition")
        p = body.responses[0].partitions[0]
        answered = _ids(node).name_of(bytes(body.responses[0].topic_id))
        _check_answers_for(name, answered or "", p.partition_index, api_key)
        cl = p.current_leader
        diverging = None
        if p.diverging_epoch is not None and p.diverging_epoch.epoch >= 0:
            diverging = OffsetAndEpoch(p.diverging_epoch.end_offset, p.diverging_epoch.epoch)
        snapshot = None
        if p.snapshot_id is not None and p.snapshot_id.epoch >= 0:
            snapshot = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return FetchResponse(
            error_code=p.error_code,
            high_watermark=p.high_watermark,
            log_start_offset=p.log_start_offset,
            current_leader=LeaderAndEpoch(
                cl.leader_id if cl.leader_id >= 0 else None, cl.leader_epoch
            ),
            records=p.records if p.records is not None else b"",
            diverging_epoch=diverging,
            snapshot_id=snapshot,
        )
    if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
        raise RaftcoreError(f"a response to API {api_key} must carry exactly one partition")
    topic = body.topics[0]
    p = topic.partitions[0]
    if api_key == ApiKey.FETCH_SNAPSHOT:
        _check_answers_for(name, topic.name, p.index, api_key)
    else:
        _check_answers_for(name, topic.topic_name, p.partition_index, api_key)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        cl = p.current_leader
        leader = (
            LeaderAndEpoch(None, -1)
            if cl is None
            else LeaderAndEpoch(cl.leader_id if cl.leader_id >= 0 else None, cl.leader_epoch)
        )
        return FetchSnapshotResponse(
            error_code=p.error_code,
            current_leader=leader,
            snapshot_id=OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            size=p.size,
            position=p.position,
            data=p.unaligned_records if p.unaligned_records is not None else b"",
        )
    if api_key == ApiKey.VOTE:
        return VoteResponse(p.error_code, p.leader_id, p.leader_epoch, bool(p.vote_granted))
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochResponse(p.error_code, p.leader_id, p.leader_epoch)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        return EndQuorumEpochResponse(p.error_code, p.leader_id, p.leader_epoch)
    raise RaftcoreError(f"API {api_key} is not a raft response")


def _ids(node: WireNode) -> TopicIds:
    """The node's topic ids; a stand-in that knows only ``NodeConfig.topic`` has its topic's."""
    ids = getattr(node, "topic_ids", None)
    if ids is None:
        ids = TopicIds()
        ids.add(node.config.topic, node.config.topic_id)
    return ids


def _topic_id(node: WireNode, name: TopicPartition) -> bytes:
    """The id of the topic of ``name`` (a group of this node: its topic is known)."""
    topic_id = _ids(node).id_of(name.topic)
    if topic_id is None:
        raise RaftcoreError(f"{name}: the topic of no group on this node")
    return topic_id


def _check_answers_for(name: TopicPartition, topic: str, index: int, api_key: int) -> None:
    """An answer names the partition of its request: one for another would step the wrong
    group's core."""
    if topic != name.topic or index != name.partition:
        raise RaftcoreError(
            f"an answer to API {api_key} for {name} names partition {index} of {topic!r}"
        )


def _top_level_error(api_key: int, error_code: int) -> RaftResponse:
    unknown = LeaderAndEpoch(None, -1)
    if api_key == ApiKey.FETCH:
        return FetchResponse(error_code, -1, -1, unknown)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return FetchSnapshotResponse(error_code, unknown)
    if api_key == ApiKey.VOTE:
        return VoteResponse(error_code, -1, -1, False)
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochResponse(error_code, -1, -1)
    return EndQuorumEpochResponse(error_code, -1, -1)
