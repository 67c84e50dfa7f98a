"""The Spark source and sink over every partition of a topic: a three-node cluster (node
processes on loopback) whose topic has 12 partitions, its records keyed and produced by
librdkafka (confluent-kafka, with Kafka's murmur2 partitioner), read by a batch query (a task
per partition at least), a streaming query over three partitions, and written back by the
sink, each key to the partition librdkafka put it in.

One Spark session (local[2], UI off) serves the module; skipped when pyspark, confluent-kafka
or Java is missing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from spark_helpers import java_problem, spark_session

pytest.importorskip("pyarrow", reason="the Spark source yields Arrow batches: pip install pyarrow")
pytest.importorskip("confluent_kafka", reason="librdkafka produces the keyed records")
streaming = pytest.importorskip(
    "pyspark.sql.streaming.datasource", reason="needs pyspark>=4.2: pip install 'raftcore[spark]'"
)
if not hasattr(streaming, "SupportsTriggerAvailableNow"):
    pytest.skip("needs pyspark>=4.2 (admission control, AvailableNow)", allow_module_level=True)
if (_problem := java_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)

from cluster_helpers import FAST, key, run  # noqa: E402

from raftcore.client import describe_quorum  # noqa: E402
from raftcore.client.partitioner import key_partition  # noqa: E402
from raftcore.node.local_cluster import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(300)]

TOPIC = "raftcore"
PARTITIONS = 12
RECORDS = 1200

Placed = dict[bytes, tuple[int, int]]  # key: (partition, offset), as librdkafka was told


def librdkafka_produce(bootstrap: list[str], keys: list[bytes], value: bytes) -> Placed:
    """Produce ``keys`` with librdkafka's murmur2 partitioner (Java's default for keyed
    records), acks=all, idempotent; where each key was acknowledged."""
    from confluent_kafka import Producer

    placed: Placed = {}
    errors: list[object] = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            placed[msg.key()] = (msg.partition(), msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "partitioner": "murmur2_random",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    for k in keys:
        producer.produce(TOPIC, value=value, key=k, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(90) == 0, "librdkafka did not deliver every record in 90 s"
    assert not errors, errors
    return placed


@pytest.fixture(scope="module")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from spark_session(tmp_path_factory.mktemp("spark-jvm"))


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The cluster, and where librdkafka placed the keys key(0)..key(RECORDS - 1)."""
    with LocalCluster(
        tmp_path_factory.mktemp("spark-partitions"), 3, node_args=FAST, partitions=PARTITIONS
    ) as c:
        c.start()
        placed = librdkafka_produce(c.bootstrap, [key(n) for n in range(RECORDS)], b"v")
        yield c, placed


def _read(spark, bootstrap: list[str], **options: object):  # type: ignore[no-untyped-def]
    reader = spark.read.format("raftcore").option("bootstrap", ",".join(bootstrap))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def test_a_batch_read_runs_a_task_per_partition_at_least_and_reads_every_record_once(
    spark, keyed
) -> None:  # type: ignore[no-untyped-def]
    c, placed = keyed
    assert {p for p, _ in placed.values()} == set(range(PARTITIONS))  # every partition has some
    df = _read(spark, c.bootstrap, subscribe=TOPIC, partitionRecords=60)
    assert df.rdd.getNumPartitions() >= PARTITIONS
    every = df.select("topic", "partition", "offset", "key", "value").collect()
    rows = [r for r in every if r.value == b"v"]  # the fixture's (other tests write more)
    got = Counter((r.partition, r.offset) for r in rows)
    assert max(got.values()) == 1  # no record twice
    assert set(got) == set(placed.values())  # and every one of them
    assert {r.topic for r in rows} == {TOPIC}
    assert {bytes(r.key): (r.partition, r.offset) for r in rows} == placed
    matched = _read(spark, c.bootstrap, subscribePattern="raft.*").where("value = X'76'")
    assert matched.count() == RECORDS


def test_assign_and_json_offsets_read_those_partitions_between_those_offsets(spark, keyed) -> None:  # type: ignore[no-untyped-def]
    c, placed = keyed
    by_partition: dict[int, list[int]] = {}
    for p, o in placed.values():
        by_partition.setdefault(p, []).append(o)
    lo3, lo7 = min(by_partition[3]), min(by_partition[7])
    df = _read(
        spark,
        c.bootstrap,
        assign=json.dumps({TOPIC: [3, 7]}),
        startingOffsets=json.dumps({TOPIC: {"3": lo3 + 2, "7": -2}}),
        endingOffsets=json.dumps({TOPIC: {"3": -1, "7": lo7 + 5}}),
    )
    got = sorted(
        (r.partition, r.offset)
        for r in df.select("partition", "offset", "value").collect()
        if r.value == b"v"  # the fixture's (other tests write more)
    )
    expected = sorted(
        [(3, o) for o in by_partition[3] if o >= lo3 + 2]
        + [(7, o) for o in by_partition[7] if o < lo7 + 5]
    )
    assert got == expected


def _available_now(spark, bootstrap: list[str], checkpoint: Path, **options: object):  # type: ignore[no-untyped-def]
    """Run a streaming query with Trigger.AvailableNow to its end; each micro-batch's
    (partition, offset) pairs."""
    batches: list[list[tuple[int, int]]] = []

    def collect(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batches.append([(r[0], r[1]) for r in df.select("partition", "offset").collect()])

    reader = spark.readStream.format("raftcore").option("bootstrap", ",".join(bootstrap))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the AvailableNow query did not finish in 120 s"
    assert query.exception() is None
    return batches


def test_a_stream_over_three_partitions_reads_everything_once_across_a_leader_kill(
    spark, keyed, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """maxOffsetsPerTrigger bounds each micro-batch over the three partitions together; the
    node leading partition 1 is SIGKILLed, and a second run from the checkpoint, reading from
    the new leaders, reads only what was produced since."""
    c, placed = keyed
    three = {0, 1, 2}
    options = {"assign": json.dumps({TOPIC: sorted(three)}), "maxOffsetsPerTrigger": 40}
    first = _available_now(spark, c.bootstrap, tmp_path / "ckpt", **options)
    expected = {v for v in placed.values() if v[0] in three}
    assert len([b for b in first if b]) >= len(expected) // 40
    assert all(len(b) <= 40 for b in first)
    read = [po for b in first for po in b]
    assert len(read) == len(set(read)) and set(read) == expected
    c.kill(run(describe_quorum(c.bootstrap, partition=1)).leader_id)
    more = librdkafka_produce(c.bootstrap, [b"more-%04d" % n for n in range(300)], b"m")
    second = _available_now(spark, c.bootstrap, tmp_path / "ckpt", **options)
    again = [po for b in second for po in b]
    assert sorted(again) == sorted(v for v in more.values() if v[0] in three)


def test_the_sink_puts_each_key_where_librdkafkas_murmur2_puts_it_or_where_a_row_says(
    spark, keyed
) -> None:  # type: ignore[no-untyped-def]
    """... once, when the job is run again with its writeId."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    c, placed = keyed
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("partition", IntegerType()),
        ]
    )
    rows = [(key(n), b"sink", None) for n in range(0, RECORDS, 3)]
    rows += [(b"pinned-%d" % n, b"pinned", 5) for n in range(20)]
    df = spark.createDataFrame(rows, schema).repartition(3)
    for _ in range(2):  # the same write again: every partition's writer finds its rows there
        write = df.write.format("raftcore").option("bootstrap", ",".join(c.bootstrap))
        write.option("writeId", "keyed").mode("append").save()
    back = _read(spark, c.bootstrap).where("value IN ('sink', 'pinned')")
    written = [(bytes(r.key), bytes(r.value), r.partition) for r in back.collect()]
    sunk = {k: p for k, v, p in written if v == b"sink"}
    assert len(sunk) == len([w for w in written if w[1] == b"sink"]) == len(rows) - 20  # once
    assert sunk == {k: placed[k][0] for k, _, _ in rows[:-20]}  # where librdkafka put them
    assert all(key_partition(k, PARTITIONS) == p for k, p in sunk.items())
    assert sorted(p for _, v, p in written if v == b"pinned") == [5] * 20
