"""Consumer groups with unmodified Kafka clients: confluent-kafka (librdkafka), kafka-python and
aiokafka ``subscribe()`` with a ``group.id`` and ``commit()``, against three in-process nodes
serving a 4-partition topic (tests/test_node.py's ``cluster``; the blocking clients on
threads). The coordinator's node SIGKILLed is tests/test_consumer_group_processes.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from test_consumer_group_coordinator import offsets_leaders
from test_node import cluster, run

from raftcore.node.node import RaftNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC = "raftcore"
PARTITIONS = 4
# Kafka's group.min.session.timeout.ms is 6 s; a heartbeat every 200 ms hears of a rebalance
# at once
CONFLUENT = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 200,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}


def _bootstrap(nodes: list[RaftNode]) -> str:
    return ",".join(str(n.config.listen) for n in nodes if n._started)


def _produce(bootstrap: str, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(TOPIC, value=b"p%d-%d" % (p, i), partition=p)
    assert producer.flush(10) == 0


async def _started(nodes: list[RaftNode], per_partition: int = 0) -> str:
    await offsets_leaders(nodes)
    bootstrap = _bootstrap(nodes)
    if per_partition:
        await asyncio.get_running_loop().run_in_executor(None, _produce, bootstrap, per_partition)
    return bootstrap


class Member:
    """A confluent-kafka consumer polling on its own thread (librdkafka's rebalance callbacks
    run inside poll); ``assigned`` is its assignment as its callbacks last said."""

    def __init__(self, bootstrap: str, group_id: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group_id, **CONFLUENT}
        )
        self.assigned: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> Member:
        self.consumer.subscribe(
            [TOPIC],
            on_assign=lambda c, ps: self.assigned.update(p.partition for p in ps),
            on_revoke=lambda c, ps: self.assigned.difference_update(p.partition for p in ps),
        )
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.1)
            if message is not None and message.error():
                self.errors.append(str(message.error()))

    def close(self) -> None:
        """Leave the group (LeaveGroup) and stop."""
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def _until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)


def test_two_confluent_consumers_of_one_group_split_the_partitions_and_one_left_takes_all(
    tmp_path,
):
    """Classic protocol, relayed: the group leader (a client) assigns, the coordinator hands
    each member its share; a member's LeaveGroup makes the other rejoin and take it all."""

    def clients(bootstrap: str) -> None:
        a = Member(bootstrap, "split").start()
        b = Member(bootstrap, "split").start()
        try:
            _until(
                lambda: bool(a.assigned) and bool(b.assigned),
                15,
                "both members to get partitions",
            )
            assert not a.assigned & b.assigned
            _until(
                lambda: a.assigned | b.assigned == set(range(PARTITIONS)),
                10,
                "every partition assigned",
            )
            a.close()
            _until(lambda: b.assigned == set(range(PARTITIONS)), 10, "the other to take all")
        finally:
            b.close()
        assert not a.errors and not b.errors, (a.errors, b.errors)

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes)
            await asyncio.get_running_loop().run_in_executor(None, clients, bootstrap)

    run(go())


def _read(consumer: Any, count: int, timeout_s: float = 15.0) -> list[Any]:
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            messages.append(message)
    assert len(messages) == count, f"read {len(messages)} of {count}"
    return messages


def test_a_new_confluent_consumer_of_the_group_resumes_from_the_committed_offsets(tmp_path):
    """commit() (synchronous: answered once committed in Raft), close; the next member of the
    group starts each partition at its committed offset, not at auto.offset.reset."""
    from confluent_kafka import Consumer, TopicPartition

    def clients(bootstrap: str) -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": "resume", **CONFLUENT}
        first = Consumer(config)
        first.subscribe([TOPIC])
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for message in _read(first, 10 * PARTITIONS):
            offsets[message.partition()].append(message.offset())
        # the next member is to start at the (2 + p)th record of partition p
        resume = {p: offsets[p][2 + p] for p in range(PARTITIONS)}
        first.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in resume.items()], asynchronous=False
        )
        first.close()
        second = Consumer(config)
        second.subscribe([TOPIC])
        firsts: dict[int, int] = {}
        for message in _read(second, sum(10 - (2 + p) for p in range(PARTITIONS))):
            firsts.setdefault(message.partition(), message.offset())
        seen = second.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
        second.close()
        assert {tp.partition: tp.offset for tp in seen} == resume
        assert firsts == resume

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes, per_partition=10)
            await asyncio.get_running_loop().run_in_executor(None, clients, bootstrap)

    run(go())


def test_kafka_pythons_group_consumer_subscribes_reads_and_commits(tmp_path):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as Tp

    def client(bootstrap: str) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","),
            group_id="kafka-python",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 15
        while got < 5 * PARTITIONS and time.monotonic() < deadline:
            # kafka-python 3.0.12 drops a join whose SyncGroup answer comes after poll's
            # timeout once its leader has assigned (join_group_async leaves the task in flight
            # and need_rejoin() is then False): a poll must outwait the commit of the group's
            # assignment in Raft (docs/consumer-groups.md)
            for records in consumer.poll(timeout_ms=1000).values():
                got += len(records)
        assert got == 5 * PARTITIONS
        consumer.commit()
        for p in range(PARTITIONS):
            assert consumer.committed(Tp(TOPIC, p)) == consumer.position(Tp(TOPIC, p))
        assert consumer.assignment() == {Tp(TOPIC, p) for p in range(PARTITIONS)}
        consumer.close()

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes, per_partition=5)
            await asyncio.get_running_loop().run_in_executor(None, client, bootstrap)

    run(go())


def test_aiokafkas_group_consumer_subscribes_reads_and_commits(tmp_path):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as Tp

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes, per_partition=5)
            consumer = AIOKafkaConsumer(
                TOPIC,
                bootstrap_servers=bootstrap,
                group_id="aiokafka",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=200,
            )
            await consumer.start()
            try:
                got = 0
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 15
                while got < 5 * PARTITIONS and loop.time() < deadline:
                    batches = await consumer.getmany(timeout_ms=200)
                    got += sum(len(records) for records in batches.values())
                assert got == 5 * PARTITIONS
                await consumer.commit()
                for p in range(PARTITIONS):
                    tp = Tp(TOPIC, p)
                    assert await consumer.committed(tp) == await consumer.position(tp)
            finally:
                await consumer.stop()

    run(go())


def test_the_admin_client_lists_and_describes_a_group_and_its_committed_offsets(tmp_path):
    """What lag tools ask (ListGroups of every node, DescribeGroups and OffsetFetch of the
    coordinator), asked with confluent-kafka's AdminClient; DeleteGroups refuses a group with
    members and deletes it once its last member left."""
    from confluent_kafka import (
        Consumer,
        ConsumerGroupState,
        ConsumerGroupTopicPartitions,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    def clients(bootstrap: str) -> None:
        # one thread polls and commits: a synchronous commit's answer comes through poll
        member = Consumer({"bootstrap.servers": bootstrap, "group.id": "watched", **CONFLUENT})
        member.subscribe([TOPIC])
        try:

            def assigned() -> bool:
                member.poll(0.1)
                return len(member.assignment()) == PARTITIONS

            _until(assigned, 15, "the assignment")
            member.commit(
                offsets=[TopicPartition(TOPIC, p, 1 + p) for p in range(PARTITIONS)],
                asynchronous=False,
            )
            admin = AdminClient({"bootstrap.servers": bootstrap})
            listed = admin.list_consumer_groups().result(10)
            assert "watched" in {g.group_id for g in listed.valid}, listed.errors
            described = admin.describe_consumer_groups(["watched"])["watched"].result(10)
            assert described.state == ConsumerGroupState.STABLE
            (one,) = described.members
            assert one.host == "/127.0.0.1" and one.client_id == "rdkafka", one
            assert {tp.partition for tp in one.assignment.topic_partitions} == set(
                range(PARTITIONS)
            )
            asked = ConsumerGroupTopicPartitions("watched")
            offsets = admin.list_consumer_group_offsets([asked])["watched"].result(10)
            assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {
                p: 1 + p for p in range(PARTITIONS)
            }
            with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
                admin.delete_consumer_groups(["watched"])["watched"].result(10)
        finally:
            member.close()  # LeaveGroup: the group is Empty now
        admin.delete_consumer_groups(["watched"])["watched"].result(10)
        listed = admin.list_consumer_groups().result(10)
        assert "watched" not in {g.group_id for g in listed.valid}

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes)
            await asyncio.get_running_loop().run_in_executor(None, clients, bootstrap)

    run(go())


def test_aiokafkas_static_member_rejoins_under_its_instance_id_and_reads_on(tmp_path):
    """KIP-345 through JoinGroup v5: a consumer with ``group_instance_id`` joins, commits and
    stops; a new consumer under the same instance id is the same member to the group and
    reads on from the commit."""
    from aiokafka import AIOKafkaConsumer

    def consumer(bootstrap: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id="static",
            group_instance_id="reader-1",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )

    async def read(c: AIOKafkaConsumer, count: int) -> list[Any]:
        got: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while len(got) < count and loop.time() < deadline:
            batches = await c.getmany(timeout_ms=200, max_records=count - len(got))
            got.extend(r for records in batches.values() for r in records)
        assert len(got) == count, f"read {len(got)} of {count}"
        return got

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, group_initial_rebalance_delay_ms=0
        ) as nodes:
            bootstrap = await _started(nodes, per_partition=5)
            first = consumer(bootstrap)
            await first.start()
            try:
                done = await read(first, 2 * PARTITIONS)
                await first.commit()
                committed = {tp.partition: await first.position(tp) for tp in first.assignment()}
            finally:
                await first.stop()
            second = consumer(bootstrap)
            await second.start()
            try:
                rest = await read(second, 5 * PARTITIONS - len(done))
                shard = next(
                    s
                    for n in nodes
                    if (s := n.coordinators.shard_of("static")).coordinator is not None
                )
                group = shard.coordinator.group("static")
                assert group is not None and set(group.static_members) == {"reader-1"}
                # from the commit on: nothing read twice, nothing skipped
                assert all(r.offset >= committed[r.partition] for r in rest)
                assert not {(r.partition, r.offset) for r in done} & {
                    (r.partition, r.offset) for r in rest
                }
            finally:
                await second.stop()

    run(go())
