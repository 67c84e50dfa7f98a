"""FetchSnapshot (KIP-630, API 59 v1) on the Kafka wire: what the core sends and answers
survives the trip through Kafka's schema, the snapshot's bytes leave uncopied, and a request
for another topic-partition never reaches the core."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node import raft_wire
from raftcore.node.config import NodeConfig
from raftcore.node.peers import AddressBook
from raftcore.protocol.api import ApiKey, decode_request, encode_response
from raftcore.raft.messages import FetchSnapshotRequest, FetchSnapshotResponse, Outbound
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.topic_partition import TopicPartition


def _node(tmp_path, node_id=1):
    voters = {i: Endpoint("127.0.0.1", 9000 + i) for i in (1, 2, 3)}
    cfg = NodeConfig(node_id=node_id, voters=voters, data_dir=tmp_path, cluster_id="c1")
    return SimpleNamespace(config=cfg, address_book=AddressBook(cfg))


def _request():
    return FetchSnapshotRequest(
        cluster_id="c1",
        replica_id=2,
        current_leader_epoch=7,
        snapshot_id=OffsetAndEpoch(4096, 6),
        position=1 << 33,  # int64 positions: snapshots past 4 GiB
        max_bytes=1 << 20,
    )


def test_a_fetch_snapshot_request_survives_the_wire(tmp_path):
    follower, leader = _node(tmp_path, 2), _node(tmp_path, 1)
    key, version, frame = raft_wire.encode_request(follower, Outbound(1, 42, _request()))
    assert (key, version) == (ApiKey.FETCH_SNAPSHOT, 1)
    header, body = decode_request(frame)
    assert header.correlation_id == 42
    name, sender, request = raft_wire.decode_request(leader, header, body)
    assert name == TopicPartition("raftcore", 0)  # the group it is routed to
    assert sender == 2
    assert request == _request()


def test_a_fetch_snapshot_response_survives_the_wire_with_the_leaders_endpoint(tmp_path):
    leader, follower = _node(tmp_path, 1), _node(tmp_path, 2)
    chunk = memoryview(bytes(range(256)) * 1024)  # pieces under 64 KiB are coalesced
    response = FetchSnapshotResponse(
        error_code=Errors.NONE,
        current_leader=LeaderAndEpoch(1, 7),
        snapshot_id=OffsetAndEpoch(4096, 6),
        size=1 << 33,
        position=1 << 32,
        data=chunk,
    )
    body = raft_wire.encode_response(leader, Outbound(2, 5, response), ApiKey.FETCH_SNAPSHOT, 1)
    pieces = encode_response(ApiKey.FETCH_SNAPSHOT, 1, 5, body)
    shared = [p for p in pieces if isinstance(p, memoryview) and p.obj is chunk.obj]
    assert shared and len(shared[0]) == len(chunk), "the chunk was copied into the frame"
    frame = b"".join(bytes(p) for p in pieces)
    back = raft_wire.decode_response(follower, ApiKey.FETCH_SNAPSHOT, 1, frame)
    assert back.error_code == Errors.NONE
    assert back.current_leader == LeaderAndEpoch(1, 7)
    assert (back.snapshot_id, back.size, back.position) == (
        OffsetAndEpoch(4096, 6),
        1 << 33,
        1 << 32,
    )
    assert bytes(back.data) == bytes(chunk)
    assert body.node_endpoints[0].node_id == 1 and body.node_endpoints[0].port == 9001


@pytest.mark.parametrize(
    "error", [Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE, Errors.FENCED_LEADER_EPOCH]
)
def test_a_fetch_snapshot_error_keeps_its_code_and_leader(tmp_path, error):
    leader, follower = _node(tmp_path, 1), _node(tmp_path, 2)
    response = FetchSnapshotResponse(error_code=error, current_leader=LeaderAndEpoch(3, 9))
    body = raft_wire.encode_response(leader, Outbound(2, 5, response), ApiKey.FETCH_SNAPSHOT, 1)
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.FETCH_SNAPSHOT, 1, 5, body))
    back = raft_wire.decode_response(follower, ApiKey.FETCH_SNAPSHOT, 1, frame)
    assert (back.error_code, back.current_leader) == (error, LeaderAndEpoch(3, 9))


def test_a_fetch_snapshot_for_another_topic_never_reaches_the_core(tmp_path):
    follower, leader = _node(tmp_path, 2), _node(tmp_path, 1)
    other = SimpleNamespace(config=SimpleNamespace(topic="other", advertised=None))
    _, _, frame = raft_wire.encode_request(other, Outbound(1, 1, _request()))
    header, body = decode_request(frame)
    with pytest.raises(raft_wire.WrongPartition):
        raft_wire.decode_request(leader, header, body)
    error = raft_wire.error_response(
        leader, ApiKey.FETCH_SNAPSHOT, 1, Errors.UNKNOWN_TOPIC_OR_PARTITION
    )
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.FETCH_SNAPSHOT, 1, 1, error))
    back = raft_wire.decode_response(follower, ApiKey.FETCH_SNAPSHOT, 1, frame)
    assert back.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    del follower
