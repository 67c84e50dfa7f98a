"""Topics created at run time through the metadata group (``__cluster_metadata``), in process:
the controller answers CreateTopics, DeleteTopics and CreatePartitions once the records are
committed; every node applies them and opens (or closes and deletes) the Raft groups of the
replicas placed on it, each group with the partition's replicas as voters; Metadata names every
topic with its leaders, also on nodes without a replica; Produce and Fetch find a partition by
(topic, partition). The node's own topic (``raftcore``) is unchanged beside them."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from test_node import cluster, leader_of, raw_request, run

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.node import RaftNode
from raftcore.node.data_dir import META_PROPERTIES, METADATA_DIR
from raftcore.node.topic_dirs import PARTITION_PROPERTIES, read_replica_directory
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(90)


# ---- helpers --------------------------------------------------------------------------------


async def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, f"waited {timeout_s} s for {what}"
        await asyncio.sleep(0.02)


async def controller_of(nodes: list[RaftNode]) -> RaftNode:
    """The controller, once every running node names it and its image has caught up."""
    running = [n for n in nodes if n._started]

    def agreed() -> bool:
        ids = {n.metadata.controller_id() for n in running}
        return len(ids) == 1 and -1 not in ids and all(n.metadata.caught_up() for n in running)

    await wait_until(agreed, "a controller known to every node")
    (controller,) = [n for n in running if n.metadata.is_controller()]
    return controller


async def create(
    node: RaftNode,
    name: str,
    partitions: int,
    replication_factor: int,
    *,
    configs: dict[str, str] | None = None,
    validate_only: bool = False,
    version: int = 7,
) -> Any:
    cls = request_spec(ApiKey.CREATE_TOPICS).cls
    topic = cls.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        assignments=[],
        configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )
    body = cls(topics=[topic], timeout_ms=10_000, validate_only=validate_only)
    answer = await raw_request(node, ApiKey.CREATE_TOPICS, version, body)
    (result,) = answer.topics  # type: ignore[attr-defined]
    return result


async def delete(node: RaftNode, name: str) -> Any:
    cls = request_spec(ApiKey.DELETE_TOPICS).cls
    body = cls(topics=[cls.DeleteTopicState(name=name, topic_id=bytes(16))], timeout_ms=10_000)
    answer = await raw_request(node, ApiKey.DELETE_TOPICS, 6, body)
    (result,) = answer.responses  # type: ignore[attr-defined]
    return result


async def create_at(nodes: list[RaftNode], *args: Any, **kw: Any) -> Any:
    """CreateTopics at the controller, asked again if it moved meanwhile (NOT_CONTROLLER)."""
    while True:
        result = await create(await controller_of(nodes), *args, **kw)
        if result.error_code != Errors.NOT_CONTROLLER:
            return result


async def delete_at(nodes: list[RaftNode], name: str) -> Any:
    """DeleteTopics at the controller, asked again if it moved meanwhile (NOT_CONTROLLER)."""
    while True:
        result = await delete(await controller_of(nodes), name)
        if result.error_code != Errors.NOT_CONTROLLER:
            return result


async def metadata(node: RaftNode, topics: list[str] | None = None) -> Any:
    cls = request_spec(ApiKey.METADATA).cls
    asked = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
    return await raw_request(node, ApiKey.METADATA, 12, cls(topics=asked))


def replicas_of(nodes: list[RaftNode], name: str) -> dict[int, tuple[int, ...]]:
    """The replicas of each partition of ``name``, as the first node's image says."""
    topic = nodes[0].metadata.image.topic(name)
    assert topic is not None, f"topic {name} is not in the image"
    return {p.partition_id: p.replicas for p in topic.partitions}


async def opened(nodes: list[RaftNode], name: str, partitions: int) -> dict[int, tuple[int, ...]]:
    """Once every node has applied the topic and opened the groups of its replicas, and each
    partition has a leader its replicas agree on: the replicas of each partition."""

    def ready() -> bool:
        for n in nodes:
            topic = n.metadata.image.topic(name)
            if topic is None or len(topic.partitions) != partitions:
                return False
        for p, replicas in replicas_of(nodes, name).items():
            groups = [
                n.extra_groups.get(TopicPartition(name, p)) for n in nodes if n.node_id in replicas
            ]
            if any(g is None or g.core is None for g in groups):
                return False
            leaders = {g.leader_and_epoch.leader_id for g in groups if g is not None}
            if len(leaders) != 1 or None in leaders:
                return False
        return True

    await wait_until(ready, f"every replica of {name} opened and led")
    return replicas_of(nodes, name)


# ---- creating a topic -----------------------------------------------------------------------


def test_create_topics_places_each_replica_on_its_node_whose_group_has_the_replicas_as_voters(
    tmp_path,
):
    """A partition group's first voter set comes only from the committed PartitionRecord: its
    replicas, no more (replication factor 2 of 3 nodes), on exactly the nodes named."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            answer = await create_at(nodes, "orders", 3, 2)
            assert (answer.error_code, answer.num_partitions, answer.replication_factor) == (
                Errors.NONE,
                3,
                2,
            )
            placement = await opened(nodes, "orders", 3)
            topic_id = nodes[0].metadata.image.topic("orders").topic_id.raw
            assert answer.topic_id == topic_id
            for n in nodes:
                hosted = sorted(tp.partition for tp in n.extra_groups if tp.topic == "orders")
                assert hosted == [p for p, r in placement.items() if n.node_id in r]
                for p in hosted:
                    group = n.extra_groups[TopicPartition("orders", p)]
                    assert sorted(group.core.voter_set) == sorted(placement[p])
                    replica = read_replica_directory(n.config.data_dir / f"orders-{p}")
                    assert replica is not None and replica.topic_id == topic_id
                    assert replica.voters == placement[p]
            # every group over its voters stays a voter: no other group's leader and epoch
            # reach its core (an UpdateRaftVoter names no partition: only partition 0 of the
            # node's own topic sends one)
            await leader_of(nodes)  # partition 0 has told its leader every directory id
            for n in nodes:
                for group in (n.metadata.group, *n.extra_groups.values()):
                    assert not group.core.quorum.is_observer, f"{group.prefix} turned observer"
            # the node's own topic is as it was: one group, in the data directory
            assert [list(n.groups) for n in nodes] == [[TopicPartition("raftcore", 0)]] * 3

    run(main())


def test_create_topics_refuses_what_kafka_refuses_and_validate_only_writes_nothing(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "orders", 2, 3)).error_code == Errors.NONE
            refused = {
                "again": await create_at(nodes, "orders", 1, 1),
                "own topic": await create_at(nodes, "raftcore", 1, 1),
                "metadata": await create_at(nodes, "__cluster_metadata", 1, 1),
                "factor": await create_at(nodes, "wide", 1, 4),
                "partitions": await create_at(nodes, "none", 0, 1),
                "config": await create_at(nodes, "bad", 1, 1, configs={"retention.ms": "x"}),
                "unknown config": await create_at(nodes, "odd", 1, 1, configs={"colour": "1"}),
                "name": await create_at(nodes, "a/b", 1, 1),
            }
            assert {k: v.error_code for k, v in refused.items()} == {
                "again": Errors.TOPIC_ALREADY_EXISTS,
                "own topic": Errors.TOPIC_ALREADY_EXISTS,
                "metadata": Errors.TOPIC_ALREADY_EXISTS,
                "factor": Errors.INVALID_REPLICATION_FACTOR,
                "partitions": Errors.INVALID_PARTITIONS,
                "config": Errors.INVALID_CONFIG,
                "unknown config": Errors.INVALID_CONFIG,
                "name": Errors.INVALID_TOPIC_EXCEPTION,
            }
            assert all(v.error_message for v in refused.values())
            checked = await create_at(nodes, "later", 4, 2, validate_only=True)
            assert (checked.error_code, checked.num_partitions) == (Errors.NONE, 4)
            await asyncio.sleep(0.3)
            assert nodes[0].metadata.image.topic_names() == ["orders"]
            assert all(n.metadata.image.topic("later") is None for n in nodes)

    run(main())


def test_a_node_that_is_not_the_controller_answers_not_controller_and_metadata_names_the_controller(
    tmp_path,
):
    """librdkafka's and kafka-python's admin clients send CreateTopics to Metadata's
    controller_id; a node that is not it refuses, writing nothing."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            controller = await controller_of(nodes)
            other = next(n for n in nodes if n is not controller)
            answer = await create(other, "orders", 1, 1)
            assert answer.error_code == Errors.NOT_CONTROLLER
            assert f"node {controller.node_id} is" in answer.error_message
            for n in nodes:
                assert (await metadata(n, [])).controller_id == controller.node_id  # type: ignore[attr-defined]
            await asyncio.sleep(0.3)
            assert all(n.metadata.image.topic_names() == [] for n in nodes)

    run(main())


# ---- Metadata, Produce and Fetch --------------------------------------------------------------


def test_metadata_names_every_topic_with_its_leaders_even_on_a_node_without_a_replica(tmp_path):
    """Replication factor 1 over 3 nodes: each node holds a third of the partitions and learns
    the leaders of the others from their replicas."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "events", 6, 1)).error_code == Errors.NONE
            placement = await opened(nodes, "events", 6)
            assert sorted(len([r for r in placement.values() if n in r]) for n in (1, 2, 3)) == [
                2,
                2,
                2,
            ]
            for n in nodes:
                answer = await metadata(n)
                topics = {t.name: t for t in answer.topics}  # type: ignore[attr-defined]
                assert set(topics) == {"raftcore", "events"}
                events = topics["events"]
                assert events.error_code == Errors.NONE
                got = {
                    p.partition_index: (p.leader_id, tuple(p.replica_nodes))
                    for p in events.partitions
                }
                assert got == {p: (r[0], r) for p, r in placement.items()}, n.node_id
            unknown = (await metadata(nodes[0], ["nothing"])).topics[0]  # type: ignore[attr-defined]
            assert unknown.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION

    run(main())


def _produce_keyed(bootstrap: list[str], topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """librdkafka's producer, its default partitioner: each key's partition."""
    from confluent_kafka import Producer

    where: dict[bytes, int] = {}
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            where[msg.key()] = msg.partition()

    producer = Producer({"bootstrap.servers": ",".join(bootstrap), "acks": "all"})
    for key in keys:
        producer.produce(topic, key=key, value=b"value of " + key, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed
    return where


def _read_partition(bootstrap: list[str], topic: str, partition: int, expected: int) -> list[bytes]:
    """The keys of ``partition`` from its start, read with librdkafka (assign, no group)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, OFFSET_BEGINNING)])
        keys: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(keys) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                assert msg.partition() == partition
                keys.append(msg.key())
        return keys
    finally:
        consumer.close()


def test_librdkafka_produces_keyed_records_to_a_created_topic_and_reads_each_from_its_partition(
    tmp_path,
):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "keyed", 4, 2)).error_code == Errors.NONE
            await opened(nodes, "keyed", 4)
            bootstrap = [str(n.config.listen) for n in nodes]
            keys = [b"key-%d" % i for i in range(40)]
            where = await asyncio.to_thread(_produce_keyed, bootstrap, "keyed", keys)
            assert set(where.values()) == {0, 1, 2, 3}  # the keys spread
            for p in range(4):
                mine = [k for k in keys if where[k] == p]
                got = await asyncio.to_thread(_read_partition, bootstrap, "keyed", p, len(mine))
                assert got == mine, f"partition {p}"

    run(main())


# ---- deleting a topic, restarts ---------------------------------------------------------------


def test_delete_topics_closes_every_replica_and_deletes_its_directory(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "gone", 3, 3)).error_code == Errors.NONE
            await opened(nodes, "gone", 3)
            answer = await delete_at(nodes, "gone")
            assert answer.error_code == Errors.NONE

            def closed() -> bool:
                return all(
                    not any(tp.topic == "gone" for tp in n.extra_groups)
                    and not any(n.config.data_dir.glob("gone-*"))
                    for n in nodes
                )

            await wait_until(closed, "every replica of gone closed and deleted")
            assert (await metadata(nodes[0], ["gone"])).topics[0].error_code == (  # type: ignore[attr-defined]
                Errors.UNKNOWN_TOPIC_OR_PARTITION
            )
            again = await delete_at(nodes, "gone")
            assert again.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
            own = await delete_at(nodes, "raftcore")
            assert own.error_code == Errors.INVALID_REQUEST
            assert nodes[0].groups[TopicPartition("raftcore", 0)].core is not None

    run(main())


def test_a_restarted_node_opens_its_replicas_from_disk_and_deletes_those_of_deleted_topics(
    tmp_path,
):
    """The replica directories are opened at start, before the metadata log is read again, with
    the voters they were made with; a topic deleted while the node was down has its directories
    deleted only once the node's image has caught up with the log."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            controller = await controller_of(nodes)
            assert (await create_at(nodes, "kept", 2, 3)).error_code == Errors.NONE
            assert (await create_at(nodes, "dropped", 2, 3)).error_code == Errors.NONE
            await opened(nodes, "kept", 2)
            await opened(nodes, "dropped", 2)
            down = next(n for n in nodes if n is not controller)
            await down.stop()
            # a file of its own in each kept replica's directory: gone if the node deleted it
            # (before its image held the topic) and made it again
            for p in (0, 1):
                (down.config.data_dir / f"kept-{p}" / "mark").write_text("kept")
            assert (await delete_at(nodes, "dropped")).error_code == Errors.NONE
            back = RaftNode(down.config)
            nodes[nodes.index(down)] = back
            await back.start()
            internal = ("__cluster_metadata", "__consumer_offsets")
            assert {tp for tp in back.extra_groups if tp.topic not in internal} == {
                TopicPartition(t, p) for t in ("kept", "dropped") for p in (0, 1)
            }
            assert sorted(back.extra_groups[TopicPartition("kept", 0)].core.voter_set) == [1, 2, 3]
            await wait_until(
                lambda: (
                    not any(back.config.data_dir.glob("dropped-*"))
                    and TopicPartition("dropped", 0) not in back.extra_groups
                ),
                "the deleted topic's replicas gone from the restarted node",
            )
            await opened(nodes, "kept", 2)
            for p in (0, 1):
                assert (back.config.data_dir / f"kept-{p}" / PARTITION_PROPERTIES).is_file()
                assert (back.config.data_dir / f"kept-{p}" / "mark").is_file(), p

    run(main())


def test_create_partitions_adds_partitions_placed_over_the_nodes(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            controller = await controller_of(nodes)
            assert (await create_at(nodes, "grows", 2, 2)).error_code == Errors.NONE
            cls = request_spec(ApiKey.CREATE_PARTITIONS).cls
            body = cls(
                topics=[cls.CreatePartitionsTopic(name="grows", count=5, assignments=None)],
                timeout_ms=10_000,
                validate_only=False,
            )
            answer = await raw_request(controller, ApiKey.CREATE_PARTITIONS, 3, body)
            assert [r.error_code for r in answer.results] == [Errors.NONE]  # type: ignore[attr-defined]
            placement = await opened(nodes, "grows", 5)
            assert all(len(r) == 2 for r in placement.values())
            fewer = cls(
                topics=[cls.CreatePartitionsTopic(name="grows", count=3, assignments=None)],
                timeout_ms=10_000,
                validate_only=False,
            )
            answer = await raw_request(controller, ApiKey.CREATE_PARTITIONS, 3, fewer)
            assert [r.error_code for r in answer.results] == [Errors.INVALID_PARTITIONS]  # type: ignore[attr-defined]

    run(main())


# ---- the metadata group's directory -------------------------------------------------------------


@pytest.mark.unformatted
def test_a_data_directory_of_the_previous_release_gets_the_metadata_group_at_its_first_start(
    tmp_path,
):
    """Upgrade in place: formatted before the metadata group (no ``cluster.metadata`` in
    meta.properties, no ``__cluster_metadata-0/``): the node makes it at start, over its static
    voters, and says so in meta.properties, so that losing it later is refused."""
    from test_node import configs

    from raftcore.node.data_dir import format_data_dir

    cfg = configs(tmp_path)[0]
    format_data_dir(cfg.data_dir, cluster_id=cfg.cluster_id, node_id=1, initial_voters=[1, 2, 3])
    meta = cfg.data_dir / META_PROPERTIES
    meta.write_text(
        "".join(
            line
            for line in meta.read_text().splitlines(True)
            if not line.startswith("cluster.metadata")
        )
    )
    import shutil

    shutil.rmtree(cfg.data_dir / METADATA_DIR)

    async def main() -> None:
        node = RaftNode(cfg)
        await node.start()
        try:
            assert (cfg.data_dir / METADATA_DIR / "quorum-state").is_file()
            assert "cluster.metadata=1" in meta.read_text()
            assert sorted(node.metadata.group.core.voter_set) == [1, 2, 3]
        finally:
            await node.stop()

    run(main())
    shutil.rmtree(cfg.data_dir / METADATA_DIR)
    with pytest.raises(RaftcoreError, match="metadata group is missing"):
        run(RaftNode(cfg).start())


def test_a_replica_whose_directory_was_lost_is_not_made_again_empty(tmp_path, caplog):
    """Made again, it would come back empty as the voter it was (its votes and the records it
    acknowledged gone): the node refuses it, once, with one ERROR line, and the partition goes
    on with its other replicas; the node's other replicas open as before."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            controller = await controller_of(nodes)
            assert (await create_at(nodes, "kept", 2, 3)).error_code == Errors.NONE
            await opened(nodes, "kept", 2)
            down = next(n for n in nodes if n is not controller)
            await down.stop()
            shutil.rmtree(down.config.data_dir / "kept-0")
            back = RaftNode(down.config)
            nodes[nodes.index(down)] = back
            with caplog.at_level("ERROR", logger="raftcore.node.node"):
                await back.start()
                await controller_of(nodes)
                await wait_until(
                    lambda: any(
                        "refusing to make the replica" in r.message for r in caplog.records
                    ),
                    "the refusal",
                )
            assert TopicPartition("kept", 1) in back.extra_groups
            assert TopicPartition("kept", 0) not in back.extra_groups
            assert not (back.config.data_dir / "kept-0").exists()
            lines = [r.message for r in caplog.records if "refusing to make" in r.message]
            assert len(lines) == 1 and "kept-0" in lines[0] and "directory is gone" in lines[0]
            # the partition goes on with its two other replicas
            others = [n.extra_groups[TopicPartition("kept", 0)] for n in nodes if n is not back]
            await wait_until(lambda: any(g.is_leader() for g in others), "a leader of kept-0")
            leader = next(g for g in others if g.is_leader())
            await leader.appends().append([(b"k", b"v")], True)

    run(main())


def test_a_node_formatted_to_join_refuses_the_replicas_placed_on_its_id_before(tmp_path):
    """The ledger of a node formatted to join: at its first reconcile, a replica the metadata
    placed on its node id before (on the node it replaces) is refused; one placed later is
    made; a refusal holds across restarts and is forgotten once the topic is gone."""
    from raftcore.node.replica_ledger import ReplicaLedger

    old, new = TopicPartition("old", 0), TopicPartition("new", 0)
    ledger = ReplicaLedger(tmp_path, formatted_to_join=True)
    assert not ledger.may_make(b"\x01" * 16, old)  # placed before it joined
    ledger.reconciled()
    assert ledger.may_make(b"\x02" * 16, new)  # placed since
    ledger.made_now(b"\x02" * 16, new)
    ledger.reconciled()
    again = ReplicaLedger(tmp_path, formatted_to_join=True)
    assert not again.may_make(b"\x01" * 16, old)
    assert not again.may_make(b"\x02" * 16, new)  # made, and its directory gone
    again.placed_here(set())  # both topics gone
    assert again.refused == set()
    founding = ReplicaLedger(tmp_path / "f", formatted_to_join=False)
    assert founding.may_make(b"\x01" * 16, old)  # a founding node's first reconcile makes all


def test_the_metadata_log_is_never_trimmed_whatever_the_nodes_retention_and_snapshots(tmp_path):
    """Every node rebuilds its image from the whole metadata log: retention or a snapshot
    trigger of the node's own (``--retention-ms``, DeleteRecords' snapshots on request) would
    trim it and lose topics at the next start; a snapshot asked of its listener, which has
    none, stopped a node whose quorum snapshots on request."""
    import dataclasses

    from test_node import configs

    from raftcore.node.cluster_metadata import metadata_config

    (cfg, *_) = configs(tmp_path)
    quorum = dataclasses.replace(cfg.quorum, snapshots_on_request=True, snapshot_min_records=5)
    retention = dataclasses.replace(cfg.retention, retention_ms=1000)
    meta = metadata_config(dataclasses.replace(cfg, quorum=quorum, retention=retention))
    assert not meta.quorum.snapshots_on_request and meta.quorum.snapshot_min_records == 0
    assert meta.retention == type(cfg.retention)()
