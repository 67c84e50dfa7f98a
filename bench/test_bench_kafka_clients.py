"""What a Kafka client gets from a raftcore cluster, side by side in one run: confluent-kafka
(librdkafka) and kcat producing to a 3-node cluster (``LocalCluster``, every append fsynced,
``--flush always``), beside raftcore's own producer.

Workload: 100-byte records, acks=all, idempotent, no compression; committed records per second
from the first record handed to the client to the last one acknowledged (median of the rounds,
and the best round, in ``extra_info``). Each client runs with its best throughput settings:

- confluent-kafka: ``CK_CONFIG`` (large batches, a short linger, a deep local queue, no
  per-record delivery callback; ``poll`` drains the reports);
- kcat: ``-P -l FILE`` (one record per line of a file of N lines) with the same ``-X``
  settings; its time includes starting the process and fetching metadata (a few ms);
- raftcore's producer: batches of ``BATCH`` (and 10x ``BATCH``) records, ``IN_FLIGHT``
  unanswered.

Every round checks that the high watermark moved by exactly the records sent. The cluster is
shared by the three benchmarks of this module (one set of node processes, one log).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from bench_helpers import send_window

from raftcore.client import Consumer, Producer
from raftcore.node.local_cluster import LocalCluster

RECORD_BYTES = 100
RECORDS = 1_000_000
ROUNDS = 3
BATCH = 1000
IN_FLIGHT = 5
TOPIC = "raftcore"
GROUP = "Kafka clients: produce 100-byte records to a 3-node cluster, acks=all, idempotent"

# librdkafka's producer settings for throughput (its CONFIGURATION.md), the best of a sweep on
# this cluster (linger.ms 0/5/20; 10,000 records or 1 MB a batch against 100,000 or 4 MB: the
# large batches gave 240-270k records/s against 135-195k): batches of up to 4 MB (the node takes
# up to 8 MiB), a 20 ms linger, a local queue deep enough for the whole round.
CK_CONFIG = {
    "acks": "all",
    "enable.idempotence": True,
    "compression.type": "none",
    "linger.ms": 20,
    "batch.num.messages": 100_000,
    "batch.size": 4_000_000,
    "message.max.bytes": 8_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "message.timeout.ms": 120_000,
}


def _high_watermark(bootstrap: list[str]) -> int:
    async def ask() -> int:
        async with Consumer(bootstrap, topic=TOPIC) as consumer:
            return await consumer.list_offset(-1)

    return asyncio.run(ask())


def _record_stats(benchmark, records: int, runs: list[float]) -> None:
    median = sorted(runs)[len(runs) // 2]
    benchmark.extra_info.update(
        {
            "records": records,
            "records_per_s": round(records / median),
            "best_records_per_s": round(records / min(runs)),
        }
    )


def _rounds(benchmark, cluster: LocalCluster, records: int, produce, untimed: int = 0) -> None:
    """``produce(records)`` returns its seconds; each round must move the high watermark by
    exactly ``records`` (+ ``untimed`` warm-up records)."""
    runs: list[float] = []

    def once() -> None:
        before = _high_watermark(cluster.bootstrap)
        runs.append(produce(records))
        moved = _high_watermark(cluster.bootstrap) - before
        assert moved == records + untimed, f"{records} records sent, the watermark moved {moved}"

    benchmark.pedantic(once, rounds=1 if benchmark.disabled else ROUNDS, iterations=1)
    _record_stats(benchmark, records, runs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("kafka-clients"), 3) as c:
        c.start()
        yield c


def _records(scale: float) -> int:
    return max(10 * BATCH, int(RECORDS * scale))


# ---- raftcore's producer ------------------------------------------------------------------------


async def _raftcore_produce(bootstrap: list[str], records: int, batch: int) -> float:
    payload = [(None, bytes([n % 251]) * RECORD_BYTES) for n in range(batch)]
    async with Producer(bootstrap, max_in_flight=IN_FLIGHT) as producer:
        await producer.send(payload[:1])  # untimed warm-up: connection, producer id
        return await send_window(producer, payload, records, IN_FLIGHT)


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("batch", [BATCH, 10 * BATCH])
def test_raftcore_producer(benchmark, cluster, scale, batch):
    """``batch``: records per batch; 1,000 is the cluster benchmark's shape, 10,000 (~1.1 MB)
    is nearer to librdkafka's batches here."""

    def produce(records: int) -> float:
        return asyncio.run(_raftcore_produce(cluster.bootstrap, records, batch))

    _rounds(benchmark, cluster, _records(scale), produce, untimed=1)


# ---- confluent-kafka ----------------------------------------------------------------------------


def _confluent_produce(bootstrap: list[str], records: int) -> float:
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as CKProducer

    errors: list[object] = []
    producer = CKProducer(
        {"bootstrap.servers": ",".join(bootstrap), **CK_CONFIG, "error_cb": errors.append}
    )
    producer.produce(TOPIC, value=b"w" * RECORD_BYTES, partition=0)  # warm up, untimed
    if producer.flush(60) != 0:
        raise KafkaException(f"the warm-up record was not delivered: {errors}")
    value = b"c" * RECORD_BYTES
    started = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:  # the local queue is full: let librdkafka drain it
                producer.poll(0.005)
        if n % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    assert remaining == 0, f"{remaining} records not delivered ({errors})"
    assert not errors, errors
    return seconds


@pytest.mark.benchmark(group=GROUP)
def test_confluent_kafka_producer(benchmark, cluster, scale):
    pytest.importorskip("confluent_kafka")

    def produce(records: int) -> float:
        return _confluent_produce(cluster.bootstrap, records)

    # one untimed warm-up record a round
    _rounds(benchmark, cluster, _records(scale), produce, untimed=1)


# ---- kcat ---------------------------------------------------------------------------------------


@pytest.mark.benchmark(group=GROUP)
def test_kcat_producer(benchmark, cluster, scale, tmp_path):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not on the PATH (Debian: apt install kcat)")
    records = _records(scale)
    lines = tmp_path / "records.txt"
    line = b"k" * RECORD_BYTES + b"\n"
    lines.write_bytes(line * records)
    settings = [arg for key, value in CK_CONFIG.items() for arg in ("-X", f"{key}={value}")]
    settings = [s.replace("=True", "=true") for s in settings]
    command = [kcat, "-P", "-b", ",".join(cluster.bootstrap), "-t", TOPIC, "-p", "0"]
    command += [*settings, "-l", str(lines)]

    def produce(count: int) -> float:
        started = time.perf_counter()
        out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        seconds = time.perf_counter() - started
        assert out.returncode == 0, out.stderr
        return seconds

    _rounds(benchmark, cluster, records, produce)
