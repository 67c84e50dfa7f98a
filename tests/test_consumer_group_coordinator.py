"""The group coordinator wired into the node: ``__consumer_offsets`` partitions as Raft groups,
FindCoordinator pointing at the leader of a group's partition, the group APIs answered there
and NOT_COORDINATOR elsewhere, commits answered once committed and still there after the
coordinator's node stops. In process (tests/test_node.py's ``cluster``), spoken to with raw
requests; tests/test_consumer_group_clients.py speaks with real clients."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_node import cluster, configs, raw_request, run

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.groups.config import GroupConfig
from raftcore.groups.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    group_metadata_record,
    offset_commit_record,
)
from raftcore.node import offsets_groups
from raftcore.node.coordinator_shard import CoordinatorShard
from raftcore.node.node import RaftNode
from raftcore.node.offsets_groups import coordinator_partition, java_string_hashcode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import LeaderAndEpoch
from raftcore.topic_partition import OFFSETS_TOPIC, TopicPartition

pytestmark = pytest.mark.timeout(90)


# ---- where a group's coordinator is ---------------------------------------------------------


def test_a_groups_partition_is_javas_string_hashcode_made_non_negative_mod_the_count():
    """Kafka: Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions, with Java's
    String.hashCode over UTF-16 units and Utils.abs mapping Integer.MIN_VALUE to 0."""
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    assert java_string_hashcode("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hashcode("\U0001f600") == 0xD83D * 31 + 0xDE00  # two UTF-16 units
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert java_string_hashcode("zz" * 40) < 0  # a negative hash lands in range too
    for group_id in ("a", "my-group", "zz" * 40):
        assert 0 <= coordinator_partition(group_id, 3) < 3


# ---- the shard: every replica applies committed records; a new leader replays them ----------


class _Batch:
    def __init__(self, records: list[tuple[bytes, bytes | None]]) -> None:
        self.records = [_Rec(k, v) for k, v in records]


@dataclasses.dataclass
class _Rec:
    key: bytes
    value: bytes | None


def _shard() -> CoordinatorShard:
    return CoordinatorShard(
        1,
        0,
        GroupConfig(),
        clock=lambda: 1_000,
        rng=random.Random(1),
        prefix="[test]",
        changed=lambda: None,
    )


def test_a_replica_that_becomes_leader_coordinates_what_was_committed_before_its_epoch():
    tp = TopicPartition("orders", 2)
    member = MemberMetadata("m-1", None, "c", "h", 30_000, 10_000, b"sub", b"asg")
    metadata = GroupMetadataValue("consumer", 4, "range", "m-1", 5, (member,))
    committed = [
        offset_commit_record("g", tp, OffsetAndMetadata(7)),
        offset_commit_record("g", tp, OffsetAndMetadata(9)),  # the later one stands
        offset_commit_record("gone", tp, OffsetAndMetadata(3)),
        offset_commit_record("gone", tp, None),  # a tombstone removes it
        group_metadata_record("g", metadata),
    ]
    shard = _shard()
    shard.handle_commit([_Batch([(r.key, r.value) for r in committed])])  # type: ignore[list-item]
    assert shard.coordinator is None  # a follower does not coordinate
    shard.handle_leader_change(LeaderAndEpoch(1, 3))
    coordinator = shard.coordinator
    assert coordinator is not None
    fetched = coordinator.fetch_offsets("g", None)
    assert [(f.partition, f.offset) for f in fetched.partitions] == [(tp, 9)]
    assert coordinator.fetch_offsets("gone", None).partitions == ()
    group = coordinator.group("g")
    assert group is not None and group.generation == 4 and list(group.members) == ["m-1"]
    shard.handle_leader_change(LeaderAndEpoch(2, 4))  # another replica leads: dropped
    assert shard.coordinator is None
    assert shard.error() == Errors.NOT_COORDINATOR


def test_requests_waiting_on_a_coordinator_that_loses_leadership_hear_not_coordinator():
    from raftcore.groups.messages import JoinGroupRequest

    shard = _shard()
    shard.handle_leader_change(LeaderAndEpoch(1, 1))
    join = JoinGroupRequest("g", "", "consumer", (("range", b""),), 10_000, 30_000)

    async def go() -> object:
        waiting = asyncio.ensure_future(
            shard.call(lambda c, ref, now: c.join_group(ref, join, now))
        )
        await asyncio.sleep(0)  # the join waits for the initial rebalance delay
        assert not waiting.done()
        shard.handle_leader_change(LeaderAndEpoch(2, 2))
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(go()) == Errors.NOT_COORDINATOR


def test_offset_fetch_shows_a_commit_only_once_it_is_committed_in_raft():
    """The coordinator accepts a commit at once; OffsetFetch answers from the records the
    replica applied, so a commit still replicating (and lost if its leader fails now) is
    never shown."""
    from raftcore.groups.messages import OffsetCommitRequest, PartitionCommit

    class Appends:
        def __init__(self) -> None:
            self.batches: list[list[tuple[bytes, bytes | None]]] = []

        async def append(self, batch: list[tuple[bytes, bytes | None]], wait: bool) -> None:
            self.batches.append(batch)
            await asyncio.get_running_loop().create_future()  # never committed

    appends = Appends()
    shard = _shard()
    shard.group = SimpleNamespace(appends=lambda: appends, is_leader=lambda: True)  # type: ignore[assignment]
    shard.handle_leader_change(LeaderAndEpoch(1, 1))
    tp = TopicPartition("orders", 0)
    commit = OffsetCommitRequest("g", (PartitionCommit(tp, 42),))

    async def go() -> None:
        waiting = asyncio.ensure_future(
            shard.call(lambda c, ref, now: c.commit_offsets(ref, commit, now))
        )
        for _ in range(10):  # the call, then the append it starts
            await asyncio.sleep(0)
        assert appends.batches and not waiting.done()  # answered only once committed
        assert shard.coordinator is not None
        assert shard.coordinator.fetch_offsets("g", (tp,)).partitions[0].offset == 42
        assert shard.committed_offsets("g", (tp,)).partitions[0].offset == -1
        shard.handle_commit([_Batch(appends.batches[0])])  # type: ignore[list-item]
        assert shard.committed_offsets("g", None).partitions[0].offset == 42
        waiting.cancel()

    asyncio.run(go())


def test_find_coordinator_says_coordinator_not_available_while_the_partition_has_no_leader():
    from raftcore.endpoints import Endpoint
    from raftcore.node.offsets_groups import GroupCoordinators

    cfg = configs(Path("/nonexistent"), offsets_topic_num_partitions=1)[0]
    shard = _shard()
    known = {2: Endpoint("10.0.0.2", 9092)}
    coordinators = GroupCoordinators(cfg, [shard], known.get)
    assert coordinators.locate("g")[0] == Errors.COORDINATOR_NOT_AVAILABLE  # no group yet
    shard.group = SimpleNamespace(core=object(), leader_hint=LeaderAndEpoch(None, 3))  # type: ignore[assignment]
    assert coordinators.locate("g")[0] == Errors.COORDINATOR_NOT_AVAILABLE  # an election
    shard.group = SimpleNamespace(core=object(), leader_hint=LeaderAndEpoch(3, 3))  # type: ignore[assignment]
    assert coordinators.locate("g")[0] == Errors.COORDINATOR_NOT_AVAILABLE  # address unknown
    shard.group = SimpleNamespace(core=object(), leader_hint=LeaderAndEpoch(2, 4))  # type: ignore[assignment]
    assert coordinators.locate("g") == (Errors.NONE, 2, Endpoint("10.0.0.2", 9092))


# ---- the data directory ---------------------------------------------------------------------


def test_the_offsets_partitions_count_is_fixed_at_the_first_start_and_a_lost_one_is_refused(
    tmp_path,
):
    cfg = configs(tmp_path, offsets_topic_num_partitions=2)[0]
    cfg.data_dir.mkdir(parents=True)
    offsets_groups.prepare_directories(cfg)
    assert sorted(p.name for p in cfg.data_dir.iterdir()) == [
        "__consumer_offsets-0",
        "__consumer_offsets-1",
        "__consumer_offsets.partitions",
    ]
    offsets_groups.prepare_directories(cfg)  # the same count: fine
    other = dataclasses.replace(cfg, offsets_topic_num_partitions=3)
    with pytest.raises(RaftcoreError, match="has 2 partitions here, not"):
        offsets_groups.prepare_directories(other)
    shutil.rmtree(cfg.data_dir / "__consumer_offsets-1")
    with pytest.raises(RaftcoreError, match="__consumer_offsets-1 is missing"):
        offsets_groups.prepare_directories(cfg)


# ---- the cluster ------------------------------------------------------------------------------


async def offsets_leaders(nodes: list[RaftNode], timeout_s: float = 15.0) -> dict[int, RaftNode]:
    """Each offsets partition's leader, once it coordinates and every running node knows it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    running = [n for n in nodes if n._started]
    count = running[0].config.offsets_topic_num_partitions
    while loop.time() < deadline:
        found: dict[int, RaftNode] = {}
        for p in range(count):
            name = TopicPartition(OFFSETS_TOPIC, p)
            led = [n for n in running if n.coordinators.shards[p].coordinator is not None]
            if len(led) == 1 and all(
                n.routes[name].leader_and_epoch.leader_id == led[0].node_id for n in running
            ):
                found[p] = led[0]
        if len(found) == count:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError("not every __consumer_offsets partition has a coordinator known to all")


def _commit_body(group_id: str, offsets: dict[int, int]) -> object:
    cls = request_spec(ApiKey.OFFSET_COMMIT).cls
    return cls(
        group_id=group_id,
        generation_id=-1,
        member_id="",
        topics=[
            cls.OffsetCommitRequestTopic(
                name="raftcore",
                partitions=[
                    cls.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata=None
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
    )


def _fetch_body(group_id: str) -> object:
    return request_spec(ApiKey.OFFSET_FETCH).cls(group_id=group_id, topics=None)


def _fetched(answer: object) -> dict[int, int]:
    return {
        p.partition_index: p.committed_offset
        for t in answer.topics  # type: ignore[attr-defined]
        for p in t.partitions
    }


def test_find_coordinator_names_the_leader_of_the_groups_offsets_partition_on_every_node(
    tmp_path,
):
    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            leaders = await offsets_leaders(nodes)
            cls = request_spec(ApiKey.FIND_COORDINATOR).cls
            for group_id in ("a", "b", "orders-app"):
                leader = leaders[coordinator_partition(group_id, 3)]
                for node in nodes:
                    old = await raw_request(node, ApiKey.FIND_COORDINATOR, 0, cls(key=group_id))
                    assert (old.error_code, old.node_id) == (Errors.NONE, leader.node_id)  # type: ignore[attr-defined]
                    assert old.port == leader.config.listen.port  # type: ignore[attr-defined]
                    new = await raw_request(
                        node,
                        ApiKey.FIND_COORDINATOR,
                        4,
                        cls(key_type=0, coordinator_keys=[group_id]),
                    )
                    (c,) = new.coordinators  # type: ignore[attr-defined]
                    assert (c.key, c.error_code, c.node_id) == (group_id, 0, leader.node_id)
            txn = await raw_request(nodes[0], ApiKey.FIND_COORDINATOR, 2, cls(key="t", key_type=1))
            assert txn.error_code == Errors.INVALID_REQUEST  # type: ignore[attr-defined]
            assert "no transaction coordinator" in txn.error_message  # type: ignore[attr-defined]

    run(go())


def test_a_node_that_does_not_lead_the_groups_partition_answers_not_coordinator(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            leaders = await offsets_leaders(nodes)
            coordinator = leaders[coordinator_partition("g", 3)]
            other = next(n for n in nodes if n is not coordinator)
            answer = await raw_request(other, ApiKey.OFFSET_COMMIT, 2, _commit_body("g", {0: 5}))
            assert answer.topics[0].partitions[0].error_code == Errors.NOT_COORDINATOR  # type: ignore[attr-defined]
            fetched = await raw_request(other, ApiKey.OFFSET_FETCH, 3, _fetch_body("g"))
            assert fetched.error_code == Errors.NOT_COORDINATOR  # type: ignore[attr-defined]
            hb_cls = request_spec(ApiKey.HEARTBEAT).cls
            hb = await raw_request(
                other,
                ApiKey.HEARTBEAT,
                0,
                hb_cls(group_id="g", generation_id=1, member_id="m"),
            )
            assert hb.error_code == Errors.NOT_COORDINATOR  # type: ignore[attr-defined]

    run(go())


def test_a_commit_is_answered_once_committed_on_a_majority_and_survives_its_coordinator(
    tmp_path,
):
    """The commit's answer comes once its record is committed in the offsets partition's Raft
    group: every replica's shard then holds it, and the coordinator elected after the first
    one stops serves it."""

    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            leaders = await offsets_leaders(nodes)
            partition = coordinator_partition("g", 3)
            first = leaders[partition]
            answer = await raw_request(
                first, ApiKey.OFFSET_COMMIT, 2, _commit_body("g", {0: 5, 1: 8})
            )
            errors = [p.error_code for p in answer.topics[0].partitions]  # type: ignore[attr-defined]
            assert errors == [Errors.NONE, Errors.NONE]
            name = TopicPartition(OFFSETS_TOPIC, partition)
            key = offset_commit_record("g", TopicPartition("raftcore", 0), None).key
            # committed when answered: the leader applied it, and a majority's logs hold it
            assert key in first.coordinators.shards[partition].state
            hw = first.routes[name].high_watermark
            assert hw is not None
            assert sum(n.routes[name].log.end_offset >= hw for n in nodes) >= 2
            fetched = await raw_request(first, ApiKey.OFFSET_FETCH, 3, _fetch_body("g"))
            assert _fetched(fetched) == {0: 5, 1: 8}
            await first.stop(timeout_s=0.5)
            rest = [n for n in nodes if n is not first]
            second = (await offsets_leaders(rest))[partition]
            fetched = await raw_request(second, ApiKey.OFFSET_FETCH, 3, _fetch_body("g"))
            assert _fetched(fetched) == {0: 5, 1: 8}

    run(go())


def test_the_offsets_partitions_are_not_the_nodes_topic_to_metadata_or_produce(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            assert {p.topic for p in node.kafka.partitions} == {"raftcore"}
            assert node.kafka.partition(OFFSETS_TOPIC, 0) is None
            assert TopicPartition(OFFSETS_TOPIC, 0) in node.routes
            assert (node.config.data_dir / "__consumer_offsets-0" / "log").is_dir()

    run(go())


def test_update_raft_voter_goes_out_only_for_partition_0_of_the_nodes_topic(tmp_path):
    """UpdateRaftVoter names no partition: the peer hands it to partition 0 of its topic. Sent
    for ``__consumer_offsets-0`` (index 0 too), its answer would carry the node topic's leader
    and epoch into the offsets group's core, which would find its own id leading an epoch it
    never led and turn observer (seen at startup before this rule)."""
    import itertools
    from types import SimpleNamespace

    from raftcore.node.messaging import Messaging
    from raftcore.node.peers import AddressBook
    from raftcore.raft.messages import Outbound, UpdateVoterRequest

    cfg = configs(tmp_path)[0]
    sent: list[bytes] = []
    messaging = Messaging(
        cfg,
        prefix="[node 1]",
        address_book=AddressBook(cfg),
        metrics=SimpleNamespace(peer_sent_bytes=0),  # type: ignore[arg-type]
        kafka=None,  # type: ignore[arg-type]
        sasl=None,
        groups={},
        admin_handle=lambda header, body: None,  # type: ignore[arg-type,return-value]
        correlation_ids=itertools.count(1),
    )
    messaging.peers = SimpleNamespace(get=lambda peer: SimpleNamespace(send=sent.extend))  # type: ignore[assignment]
    messaging.peer_apis.serves = lambda peer, key: True  # type: ignore[method-assign]

    async def go() -> None:
        messaging._loop = asyncio.get_running_loop()
        update = UpdateVoterRequest(cfg.cluster_id, 1, 1, None, None)
        messaging.send(TopicPartition(OFFSETS_TOPIC, 0), Outbound(2, 1, update, -1, True))
        assert sent == []
        messaging.send(TopicPartition(cfg.topic, 0), Outbound(2, 2, update, -1, True))
        assert len(sent) == 1

    asyncio.run(go())


def test_a_restarted_cluster_replays_its_offsets_partitions_and_serves_the_commits(tmp_path):
    """Every replica rebuilds its groups from the log of its offsets partitions at start."""

    async def go() -> None:
        cfgs = configs(tmp_path)
        nodes = [RaftNode(cfg) for cfg in cfgs]
        try:
            for n in nodes:
                await n.start()
            leaders = await offsets_leaders(nodes)
            coordinator = leaders[coordinator_partition("kept", 3)]
            await raw_request(coordinator, ApiKey.OFFSET_COMMIT, 2, _commit_body("kept", {0: 4}))
            await raw_request(coordinator, ApiKey.OFFSET_COMMIT, 2, _commit_body("kept", {0: 6}))
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.5)
        nodes = [RaftNode(cfg) for cfg in cfgs]
        try:
            for n in nodes:
                await n.start()
            coordinator = (await offsets_leaders(nodes))[coordinator_partition("kept", 3)]
            fetched = await raw_request(coordinator, ApiKey.OFFSET_FETCH, 3, _fetch_body("kept"))
            assert _fetched(fetched) == {0: 6}
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.5)

    run(go())


def _join_body(group_id: str, session_timeout_ms: int) -> object:
    cls = request_spec(ApiKey.JOIN_GROUP).cls
    return cls(
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        member_id="",
        protocol_type="consumer",
        protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00")],
    )


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(tmp_path):
    """No timer per group: the node's one ticker polls the coordinators by their deadlines.
    The join completes when the initial rebalance delay has passed (a deadline), and the
    member, silent after its sync, is gone once its session timeout (6 s, Kafka's minimum)
    has: the group is Empty."""

    async def go() -> None:
        async with cluster(tmp_path, group_initial_rebalance_delay_ms=300) as nodes:
            leaders = await offsets_leaders(nodes)
            node = leaders[coordinator_partition("quiet", 3)]
            loop = asyncio.get_running_loop()
            started = loop.time()
            joined = await raw_request(node, ApiKey.JOIN_GROUP, 0, _join_body("quiet", 6000))
            assert joined.error_code == Errors.NONE  # type: ignore[attr-defined]
            joined_at = loop.time()
            assert joined_at - started >= 0.3  # the delay, ended by the ticker
            member = joined.member_id  # type: ignore[attr-defined]
            sync_cls = request_spec(ApiKey.SYNC_GROUP).cls
            synced = await raw_request(
                node,
                ApiKey.SYNC_GROUP,
                0,
                sync_cls(
                    group_id="quiet",
                    generation_id=joined.generation_id,  # type: ignore[attr-defined]
                    member_id=member,
                    assignments=[
                        sync_cls.SyncGroupRequestAssignment(member_id=member, assignment=b"a")
                    ],
                ),
            )
            assert (synced.error_code, synced.assignment) == (Errors.NONE, b"a")  # type: ignore[attr-defined]
            describe = request_spec(ApiKey.DESCRIBE_GROUPS).cls(groups=["quiet"])
            (group,) = (await raw_request(node, ApiKey.DESCRIBE_GROUPS, 0, describe)).groups  # type: ignore[attr-defined]
            assert (group.group_state, len(group.members)) == ("Stable", 1)
            while loop.time() - joined_at < 12:
                answer = await raw_request(node, ApiKey.DESCRIBE_GROUPS, 0, describe)
                (group,) = answer.groups  # type: ignore[attr-defined]
                if group.group_state == "Empty":
                    break
                await asyncio.sleep(0.1)
            assert group.group_state == "Empty" and group.members == []
            # the session began when the join completed (its answer left then)
            assert 5.9 <= loop.time() - joined_at < 8

    run(go())


def test_delete_groups_removes_an_empty_group_and_its_offsets_on_its_coordinator_only(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            leaders = await offsets_leaders(nodes)
            coordinator = leaders[coordinator_partition("gone", 3)]
            other = next(n for n in nodes if n is not coordinator)
            await raw_request(coordinator, ApiKey.OFFSET_COMMIT, 2, _commit_body("gone", {0: 3}))
            cls = request_spec(ApiKey.DELETE_GROUPS).cls

            async def delete(node: RaftNode, *groups: str) -> list[tuple[str, int]]:
                answer = await raw_request(
                    node, ApiKey.DELETE_GROUPS, 1, cls(groups_names=list(groups))
                )
                return [(r.group_id, r.error_code) for r in answer.results]  # type: ignore[attr-defined]

            assert await delete(other, "gone") == [("gone", Errors.NOT_COORDINATOR)]
            assert await delete(coordinator, "gone") == [("gone", Errors.NONE)]
            fetched = await raw_request(coordinator, ApiKey.OFFSET_FETCH, 3, _fetch_body("gone"))
            assert _fetched(fetched) == {}
            assert await delete(coordinator, "gone") == [("gone", Errors.GROUP_ID_NOT_FOUND)]
            # the tombstones are committed: every replica's state forgets the offset
            partition = coordinator_partition("gone", 3)
            key = offset_commit_record("gone", TopicPartition("raftcore", 0), None).key
            assert key not in coordinator.coordinators.shards[partition].state

    run(go())
