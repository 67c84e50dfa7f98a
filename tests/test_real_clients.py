"""Kafka clients nobody here wrote -- confluent-kafka (librdkafka) and kafka-python -- produce to
and consume from a three-node raftcore cluster, before and after the leader is killed.

Consumers use ``assign()`` on partition 0 (raftcore has no group coordinator). Every process
the tests start is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from cluster_helpers import FAST, a_leader, quorum, run
from kafka_helpers import kafka_python_producer

from raftcore.client import Consumer
from raftcore.node.local_cluster import LocalCluster
from raftcore.records import iter_batches, scan_batches

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.cluster(3, node_args=FAST, ready=a_leader),
]

TOPIC = "raftcore"


def _kill_leader(cluster: LocalCluster) -> int:
    info = run(quorum(cluster))
    cluster.kill(info.leader_id, signal.SIGKILL)
    return info.leader_id


# ---- confluent-kafka (librdkafka) -----------------------------------------------------------


def _ck_produce(bootstrap: str, values: list[bytes], compression: str = "none") -> list[int]:
    from confluent_kafka import Producer

    offsets: list[int] = []
    errors: list[object] = []

    def delivered(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
            "compression.type": compression,
        }
    )
    for value in values:
        producer.produce(TOPIC, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(90)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors
    return offsets


def _ck_consume(bootstrap: str, expected: int, timeout_s: float = 60) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "raftcore-test",  # required by the client; no group is joined (assign)
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                continue
            values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_confluent_kafka_produces_and_consumes_across_a_leader_kill(cluster):
    bootstrap = ",".join(cluster.bootstrap)
    first = [b"ck-%05d" % n for n in range(2000)]
    offsets = _ck_produce(bootstrap, first)
    assert sorted(offsets) == list(range(min(offsets), min(offsets) + 2000))
    assert _ck_consume(bootstrap, 2000) == first

    _kill_leader(cluster)
    second = [b"ck2-%05d" % n for n in range(2000)]
    _ck_produce(bootstrap, second)
    assert _ck_consume(bootstrap, 4000) == first + second


# ---- kafka-python -------------------------------------------------------------------------------


def _kp_produce(bootstrap: list[str], values: list[bytes]) -> None:
    producer = kafka_python_producer(bootstrap)
    try:
        futures = [producer.send(TOPIC, value=v, partition=0) for v in values]
        producer.flush(60)
        for f in futures:
            f.get(timeout=60)
    finally:
        producer.close(10)


def _kp_consume(bootstrap: list[str], expected: int, timeout_s: float = 60) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        metadata_max_age_ms=1000,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        return values
    finally:
        consumer.close()


def test_kafka_python_produces_and_consumes_across_a_leader_kill(cluster):
    first = [b"kp-%05d" % n for n in range(1000)]
    _kp_produce(cluster.bootstrap, first)
    assert _kp_consume(cluster.bootstrap, 1000) == first

    _kill_leader(cluster)
    second = [b"kp2-%05d" % n for n in range(1000)]
    _kp_produce(cluster.bootstrap, second)
    assert _kp_consume(cluster.bootstrap, 2000) == first + second


# ---- aiokafka (old protocol versions: Produce <= v7, Fetch <= v11, no KIP-951) ---------------


async def _aiokafka_produce(
    bootstrap: list[str], values: list[bytes], compression: str | None = None
) -> list[int]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        request_timeout_ms=5000,
        retry_backoff_ms=100,
        compression_type=compression,
    )
    await producer.start()
    try:
        offsets = []
        for value in values:
            for _ in range(100):  # a send may fail over a leader change: retry it
                try:
                    meta = await producer.send_and_wait(TOPIC, value, partition=0)
                    offsets.append(meta.offset)
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"{value!r} was never acknowledged")
        return offsets
    finally:
        await producer.stop()


async def _aiokafka_consume(bootstrap: list[str], expected: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(values) < expected and loop.time() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            values.extend(m.value for m in batch.get(tp, []))
        return values
    finally:
        await consumer.stop()


def test_aiokafka_produces_and_consumes_across_a_leader_kill(cluster):
    first = [b"ak-%05d" % n for n in range(200)]
    offsets = run(_aiokafka_produce(cluster.bootstrap, first), 120)
    assert offsets == sorted(offsets) and len(set(offsets)) == 200
    assert run(_aiokafka_consume(cluster.bootstrap, 200), 90) == first

    _kill_leader(cluster)
    second = [b"ak2-%05d" % n for n in range(200)]
    run(_aiokafka_produce(cluster.bootstrap, second), 120)
    got = run(_aiokafka_consume(cluster.bootstrap, 400), 90)
    # Without idempotence, a send retried after a lost answer may land twice (at-least-once):
    # every value is there, in order of first appearance.
    assert list(dict.fromkeys(got)) == first + second


def test_confluent_kafka_lists_the_topic_and_its_brokers(cluster):
    """librdkafka's all-topics Metadata v12 (list_topics(), what kcat -L and Kafka UIs send)
    carries 3 bytes after its fields, which Kafka ignores; the node closed the connection."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    bootstrap = ",".join(cluster.bootstrap)
    for client in (
        Producer({"bootstrap.servers": bootstrap}),
        AdminClient({"bootstrap.servers": bootstrap}),
    ):
        metadata = client.list_topics(timeout=10)
        assert list(metadata.topics) == ["raftcore"]
        assert list(metadata.topics["raftcore"].partitions) == [0]
        assert sorted(metadata.brokers) == [1, 2, 3]


# ---- compression -------------------------------------------------------------------------------


def test_snappy_and_lz4_batches_from_librdkafka_and_aiokafka_are_stored_and_read_back(cluster):
    """librdkafka (raw snappy blocks, LZ4 frames) and aiokafka (snappy-java's stream when it
    frames, LZ4 frames) produce compressed batches: the leader validates and stores them, and
    librdkafka reads every record back (its check.crcs on), as our consumer does. A
    confluent-kafka producer with compression.type=snappy had every record refused with
    UNSUPPORTED_COMPRESSION_TYPE."""
    boot = ",".join(cluster.bootstrap)
    sent: list[bytes] = []
    for codec in ("snappy", "lz4"):
        values = [b"%s-ck-%04d " % (codec.encode(), i) * 8 for i in range(300)]
        assert len(_ck_produce(boot, values, compression=codec)) == len(values)
        sent += values
        values = [b"%s-aio-%04d " % (codec.encode(), i) * 8 for i in range(50)]
        assert len(run(_aiokafka_produce(cluster.bootstrap, values, codec), 120)) == len(values)
        sent += values
    assert _ck_consume(boot, len(sent)) == sent

    async def ours() -> list[bytes]:
        async with Consumer(cluster.bootstrap, start="earliest") as consumer:
            got: list[bytes] = []
            while len(got) < len(sent):
                got += [r.value for r in await consumer.poll()]
            return got

    assert run(ours(), 60) == sent
    for node_id in cluster.node_ids:  # the codecs as the producers wrote them, on every node
        assert {"snappy", "lz4"} <= _data_codecs(cluster.data_dir(node_id) / "log"), node_id


def _data_codecs(log_dir) -> set[str]:  # type: ignore[no-untyped-def]
    codecs = set()
    for segment in sorted(log_dir.glob("*.log")):
        data = segment.read_bytes()
        whole = data[: scan_batches(data, check_crc=False).valid_end]
        codecs |= {b.compression for b in iter_batches(whole) if not b.is_control}
    return codecs
