"""A consumer whose offset is out of range is told so in an answer every client can parse, and
resets as it does against Kafka (``auto.offset.reset``): past the log end, and below the log
start after DeleteRecords moved it.

Kafka's brokers answer a partition-level error with -1 offsets and an empty record set
(``MemoryRecords.EMPTY``). A null record set (size -1 on the wire) is what librdkafka cannot
parse ("invalid MessageSetSize -1"): it logged a PROTOERR for every Fetch answer, about 1,700
lines a second, never saw OFFSET_OUT_OF_RANGE, and never read again.

Real clients against real node processes: confluent-kafka (librdkafka, its log routed here and
checked for protocol errors), kafka-python and aiokafka beside it. Every process is ended by its
pid (LocalCluster.close).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from cluster_helpers import FAST, consume_all, quorum, run

from raftcore.client import Producer
from raftcore.node.local_cluster import LocalCluster

TOPIC = "raftcore"
PAST_END = 10_000
BELOW_START = 5


def trimmed(c: LocalCluster) -> None:
    """The module's cluster, made ready once: one node with snapshots (DeleteRecords needs
    one), 100 records, DeleteRecords before offset 40 (the log start moves there or past, to
    a snapshot), then 60 more records. The records in the log are ``cluster.kept``, as
    raftcore's own consumer reads them."""
    run(quorum(c))
    run(_produce(c.bootstrap, [b"r%03d" % n for n in range(100)]))
    c.log_start = _delete_records(c.bootstrap[0], 40)  # type: ignore[attr-defined]
    run(_produce(c.bootstrap, [b"r%03d" % n for n in range(100, 160)]))
    c.kept = run(consume_all(c.bootstrap, 60))  # type: ignore[attr-defined]
    assert c.log_start > BELOW_START and c.kept[-1] == b"r159"  # type: ignore[attr-defined]


pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.cluster(
        1,
        node_args=[*FAST, "--state-machine", "lmdb", "--snapshot-min-records", "1000000"],
        ready=trimmed,
        shared=True,
    ),
]


async def _produce(bootstrap: list[str], values: list[bytes]) -> None:
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        await producer.send([(v, v) for v in values])  # keys for consume_all


def _delete_records(bootstrap: str, offset: int) -> int:
    import kafka
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        result = admin.delete_records({kafka.TopicPartition(TOPIC, 0): offset}, timeout_ms=5000)
        ((_tp, info),) = result.items()
        low = info["low_watermark"] if isinstance(info, dict) else info
        assert low >= offset
        return low
    finally:
        admin.close()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _ck_read(bootstrap: str, offset: int, reset: str, count: int, timeout_s: float = 20):
    """(values, librdkafka's log lines) of a confluent-kafka consumer assigned ``offset``."""
    from confluent_kafka import Consumer, TopicPartition

    log = logging.getLogger(f"librdkafka.{reset}.{offset}")
    log.propagate = False
    collect = _Collect()
    log.addHandler(collect)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "raftcore-out-of-range",  # required; no group is joined (assign)
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
            "fetch.wait.max.ms": 100,
            "logger": log,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offset)])
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
        for _ in range(3):  # the log lines of the last answers
            consumer.poll(0.1)
    finally:
        consumer.close()
        log.removeHandler(collect)
    return values, collect.lines


def _protocol_errors(lines: list[str]) -> list[str]:
    return [line for line in lines if "PROTOERR" in line or "MessageSetSize" in line]


@pytest.mark.parametrize("offset", [PAST_END, BELOW_START], ids=["past-the-end", "below-start"])
def test_a_librdkafka_consumer_out_of_range_resets_to_earliest_and_reads_the_log(cluster, offset):
    values, lines = _ck_read(cluster.bootstrap[0], offset, "earliest", len(cluster.kept))
    assert not _protocol_errors(lines), _protocol_errors(lines)[:3]
    assert values == cluster.kept


@pytest.mark.parametrize("offset", [PAST_END, BELOW_START], ids=["past-the-end", "below-start"])
def test_a_librdkafka_consumer_out_of_range_resets_to_latest_and_reads_what_comes(cluster, offset):
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    # Wait until the consumer has reset and reached the log end (_PARTITION_EOF), then write.
    log = logging.getLogger(f"librdkafka.latest.{offset}")
    log.propagate = False
    collect = _Collect()
    log.addHandler(collect)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap[0],
            "group.id": "raftcore-out-of-range",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            "logger": log,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offset)])
        deadline = time.monotonic() + 15
        at_end = None
        while at_end is None and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end = msg.offset()
        assert at_end is not None, "the consumer never reached the log end"
        assert at_end != offset  # it reset
        fresh = [b"new-%d-%d" % (offset, n) for n in range(5)]
        run(_produce(cluster.bootstrap, fresh))
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(values) < len(fresh) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
        assert values == fresh
    finally:
        consumer.close()
        log.removeHandler(collect)
    assert not _protocol_errors(collect.lines), _protocol_errors(collect.lines)[:3]


def test_kafka_python_out_of_range_resets_to_earliest(cluster):
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap[0],
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, PAST_END)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < len(cluster.kept) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
        assert values[: len(cluster.kept)] == cluster.kept
    finally:
        consumer.close()


def test_aiokafka_out_of_range_resets_to_earliest(cluster):
    async def main() -> list[bytes]:
        import aiokafka

        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap[0],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek(tp, BELOW_START)
            values: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(values) < len(cluster.kept) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value for r in records)
            return values
        finally:
            await consumer.stop()

    values = asyncio.run(asyncio.wait_for(main(), 60))
    assert values[: len(cluster.kept)] == cluster.kept
