"""KIP-853 on the Kafka wire: the directory ids of Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch
v1 (preferred candidates), Fetch v17 and FetchSnapshot v1 survive the trip both ways; Kafka's
zero uuid is the core's None; the replica endpoint rides in raftcore's tagged Fetch field;
UpdateRaftVoter (82) round-trips; and every endpoint another node tells (leader endpoints,
NodeEndpoints, UpdateRaftVoter's CurrentLeader) lands in the address book."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node import raft_wire
from raftcore.node.config import NodeConfig
from raftcore.node.peers import AddressBook
from raftcore.protocol.api import ApiKey, decode_request, encode_response
from raftcore.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Outbound,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.raft.voters import ReplicaKey, Voter, VoterEndpoint, VoterSet

DIR = {i: os.urandom(15) + bytes([i]) for i in (1, 2, 3, 4)}


def _node(tmp_path, node_id=1, voters=(1, 2, 3), **kw):  # type: ignore[no-untyped-def]
    static = {i: Endpoint("127.0.0.1", 9000 + i) for i in voters}
    cfg = NodeConfig(node_id=node_id, voters=static, data_dir=tmp_path, cluster_id="c1", **kw)
    return SimpleNamespace(config=cfg, address_book=AddressBook(cfg))


def _trip(sender, receiver, message):  # type: ignore[no-untyped-def]
    key, version, frame = raft_wire.encode_request(sender, Outbound(9, 42, message, -1, True))
    header, body = decode_request(frame)
    _, source, back = raft_wire.decode_request(receiver, header, body)
    return key, version, source, back


def test_vote_carries_the_candidate_and_voter_directory_ids_both_ways(tmp_path):
    request = VoteRequest(
        cluster_id="c1",
        candidate_epoch=5,
        candidate_id=2,
        last_offset_epoch=4,
        last_offset=100,
        voter_id=3,
        pre_vote=True,
        candidate_directory_id=DIR[2],
        voter_directory_id=DIR[3],
    )
    key, version, source, back = _trip(_node(tmp_path, 2), _node(tmp_path, 3), request)
    assert (key, version, source) == (ApiKey.VOTE, 2, 2)
    assert back == request


def test_a_directory_id_not_known_travels_as_kafkas_zero_uuid_and_comes_back_none(tmp_path):
    request = VoteRequest("c1", 5, 2, 4, 100, voter_id=3)  # a static voter set: no ids
    sender = _node(tmp_path, 2)
    _, _, frame = raft_wire.encode_request(sender, Outbound(3, 1, request, -1, True))
    _, body = decode_request(frame)
    partition = body.topics[0].partitions[0]
    assert bytes(partition.candidate_directory_id) == bytes(16)
    assert bytes(partition.voter_directory_id) == bytes(16)
    assert _trip(sender, _node(tmp_path, 3), request)[3] == request


def test_begin_quorum_epoch_carries_the_voters_directory_id_and_the_leaders_endpoint(tmp_path):
    leader = _node(tmp_path, 4, voters=(1, 2, 3, 4), advertised=Endpoint("10.0.0.4", 7004))
    follower = _node(tmp_path, 1, voters=(1,), listen=Endpoint("127.0.0.1", 9001))
    request = BeginQuorumEpochRequest("c1", 4, 8, voter_id=1, voter_directory_id=DIR[1])
    key, version, frame = raft_wire.encode_request(leader, Outbound(9, 42, request, -1, True))
    header, body = decode_request(frame)
    _, source, back = raft_wire.decode_request(follower, header, body)
    assert (key, version, source) == (ApiKey.BEGIN_QUORUM_EPOCH, 1, 4)
    assert back == request
    # node 4 is no static voter of the follower's: it learns where the leader listens, once
    # the node has checked who sent the request (decoding it teaches nothing)
    assert follower.address_book.endpoint_of(4) is None
    raft_wire.learn_leader(follower, key, source, body)
    assert follower.address_book.endpoint_of(4) == Endpoint("10.0.0.4", 7004)


def test_end_quorum_epoch_names_the_preferred_candidates_with_their_directory_ids(tmp_path):
    leader = _node(tmp_path, 1)
    voters = VoterSet(
        Voter(ReplicaKey(i, DIR[i]), (VoterEndpoint("PLAINTEXT", "127.0.0.1", 9000 + i),))
        for i in (1, 2, 3)
    )
    leader.address_book.voters = lambda: voters
    request = EndQuorumEpochRequest("c1", 1, 8, preferred_successors=(3, 2))
    _, _, frame = raft_wire.encode_request(leader, Outbound(2, 7, request, -1, True))
    header, body = decode_request(frame)
    candidates = body.topics[0].partitions[0].preferred_candidates
    assert [(c.candidate_id, bytes(c.candidate_directory_id)) for c in candidates] == [
        (3, DIR[3]),
        (2, DIR[2]),
    ]
    assert raft_wire.decode_request(_node(tmp_path, 2), header, body)[2] == request


def test_a_replica_fetch_carries_its_directory_id_and_where_it_listens(tmp_path):
    request = FetchRequest(
        cluster_id="c1",
        replica_id=4,
        fetch_offset=77,
        last_fetched_epoch=3,
        current_leader_epoch=5,
        high_watermark=70,
        replica_directory_id=DIR[4],
        replica_endpoint=VoterEndpoint("SSL", "10.0.0.4", 7004),
    )
    key, version, source, back = _trip(
        _node(tmp_path, 4, listen=Endpoint("h", 1)), _node(tmp_path, 1), request
    )
    assert (key, version, source) == (ApiKey.FETCH, 17, 4)
    assert back == request


def test_a_fetch_snapshot_carries_the_replicas_directory_id(tmp_path):
    request = FetchSnapshotRequest(
        "c1", 2, 7, OffsetAndEpoch(4096, 6), 0, 1 << 20, replica_directory_id=DIR[2]
    )
    assert _trip(_node(tmp_path, 2), _node(tmp_path, 1), request)[3] == request


def test_update_raft_voter_round_trips_and_its_answer_says_where_the_leader_is(tmp_path):
    voter, leader = _node(tmp_path, 2), _node(tmp_path, 1, listen=Endpoint("127.0.0.1", 9001))
    request = UpdateVoterRequest(
        "c1", 8, 2, DIR[2], VoterEndpoint("PLAINTEXT", "127.0.0.1", 9002), 0, 1
    )
    key, version, source, back = _trip(voter, leader, request)
    assert (key, version, source) == (ApiKey.UPDATE_RAFT_VOTER, 0, 2)
    assert back == request
    answer = UpdateVoterResponse(Errors.NONE, LeaderAndEpoch(1, 8))
    body = raft_wire.encode_response(leader, Outbound(2, 42, answer), ApiKey.UPDATE_RAFT_VOTER, 0)
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.UPDATE_RAFT_VOTER, 0, 42, body))
    joining = _node(tmp_path, 5, voters=(5,))  # knows no other node
    assert raft_wire.decode_response(joining, ApiKey.UPDATE_RAFT_VOTER, 0, frame) == answer
    assert joining.address_book.endpoint_of(1) == Endpoint("127.0.0.1", 9001)


def test_an_answer_naming_the_leader_teaches_a_joining_node_where_it_listens(tmp_path):
    answering = _node(tmp_path, 2)  # knows the leader (node 1) as a static voter
    joining = _node(
        tmp_path, 4, voters=(), bootstrap=(Endpoint("127.0.0.1", 9002),), listen=Endpoint("h", 4)
    )
    joining_config = joining.config
    assert joining_config.quorum.bootstrap_servers == 1
    assert joining.address_book.endpoint_of(-2) == Endpoint("127.0.0.1", 9002)
    assert joining.address_book.endpoint_of(1) is None
    answer = VoteResponse(Errors.FENCED_LEADER_EPOCH, 1, 8, False)
    body = raft_wire.encode_response(answering, Outbound(4, 3, answer), ApiKey.VOTE, 2)
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.VOTE, 2, 3, body))
    assert raft_wire.decode_response(joining, ApiKey.VOTE, 2, frame) == answer
    assert joining.address_book.endpoint_of(1) == Endpoint("127.0.0.1", 9001)


@pytest.mark.parametrize("key", [ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER])
def test_an_admin_refusal_names_its_error(tmp_path, key):
    body = raft_wire.error_response(_node(tmp_path), key, 0, Errors.CLUSTER_AUTHORIZATION_FAILED)
    assert body.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert body.error_message == "CLUSTER_AUTHORIZATION_FAILED"
