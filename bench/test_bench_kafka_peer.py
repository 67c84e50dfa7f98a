"""Apache Kafka's own broker as the peer, side by side in one run: the same clients produce to a
3-node raftcore cluster (``LocalCluster``) and to a 3-broker Kafka cluster in KRaft mode
(``tests/kafka_peer.py``: Kafka 4.x from its Maven Central jars, every JVM -Xmx512m), with
durability matched both ways:

- **fsync**: raftcore's default, ``--flush always`` (fsync before acknowledging); Kafka with
  ``flush.messages=1`` on the topic (``log.flush.interval.messages=1`` for one topic: every
  record fsynced before it counts);
- **no fsync**: raftcore ``--flush interval`` (an fsync a second); Kafka's default (flushing
  left to the operating system).

Every topic: one partition, three replicas; Kafka's with ``min.insync.replicas=2`` (a record
counts once two of three hold it, as a raftcore majority). Workloads, 100-byte records,
acks=all, idempotent:

- **librdkafka** (confluent-kafka) batched produce: ``CK_CONFIG`` of
  ``test_bench_kafka_clients.py`` (4 MB batches, 20 ms linger), committed records per second
  from the first record handed over to the last one acknowledged;
- **kafka-producer-perf-test** (Kafka's Java producer, ``--throughput -1``, ``batch.size`` 1 MiB,
  ``linger.ms`` 20): the records/s of its summary line (the JVM's start is not in it);
- **kafka-consumer-perf-test**: reads back what the producers wrote (``nMsg.sec``), after an
  untimed first read (none in smoke mode). It needs a consumer group, so against a raftcore
  that serves none it skips with the tool's words.

``extra_info`` carries ``records_per_s``; at the end of the module the raftcore/Kafka ratios of
each workload and durability are printed. One system runs at a time (raftcore's two clusters,
then Kafka's, which serves both durabilities, one topic each). Smoke mode
(``--benchmark-disable``): the fsync durability only, 10,000 records, one round each, a
1-broker Kafka cluster.
Skipped, saying why, without confluent-kafka, Java 17+ or Kafka's jars (fetched by Maven into a
cache once; ``python3 tests/kafka_peer.py fetch``).
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kafka_peer import (
    KafkaCluster,
    consumer_perf_records_per_s,
    kafka_problem,
    producer_perf_records_per_s,
    run_tool,
)
from test_bench_kafka_clients import CK_CONFIG

from raftcore.node.local_cluster import LocalCluster

RECORD_BYTES = 100
RECORDS = 500_000  # librdkafka, a round
PERF_RECORDS = 500_000  # kafka-producer-perf-test, a round
ROUNDS = 3
PERF_ROUNDS = 2
MAX_BATCH = 8 * 1024 * 1024  # what a raftcore node takes; Kafka's topics are set the same

# target -> (system, topic)
TARGETS = {
    "raftcore --flush always": ("raftcore always", "raftcore"),
    "raftcore --flush interval": ("raftcore interval", "raftcore"),
    "Kafka flush.messages=1": ("kafka", "fsync"),
    "Kafka default flush": ("kafka", "default"),
}
DURABILITY = {  # durability -> (raftcore target, Kafka target)
    "fsync": ("raftcore --flush always", "Kafka flush.messages=1"),
    "no fsync": ("raftcore --flush interval", "Kafka default flush"),
}
PERF_PROPS = ["acks=all", "linger.ms=20", "batch.size=1048576", "max.request.size=8388608"]

_RESULTS: dict[tuple[str, str], float] = {}  # (workload, target) -> records/s


class Systems:
    """The one system running at a time (tests are grouped by target, the targets ordered so
    that each system starts once), closed when another is asked for or at the end."""

    def __init__(self, directory: Path, smoke: bool) -> None:
        self.directory = directory
        self.smoke = smoke
        self.name: str | None = None
        self.running: Any = None

    def bootstrap(self, system: str) -> str:
        if self.name != system:
            self.close()
            self.running = self._start(system)
            self.name = system
        return ",".join(self.running.bootstrap)

    def _start(self, system: str) -> Any:
        if system == "kafka":
            problem = kafka_problem()
            if problem is not None:
                pytest.skip(problem)
            size = 1 if self.smoke else 3
            kafka = KafkaCluster(self.directory / "kafka", size)
            try:
                kafka.start()
                _create_topics(kafka, size)
            except BaseException:
                kafka.close()
                raise
            return kafka
        flush = system.split()[1]
        cluster = LocalCluster(
            self.directory / f"raftcore-{flush}", 3, node_args=["--flush", flush]
        )
        try:
            cluster.start()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def close(self) -> None:
        if self.running is not None:
            self.running.close()
        self.running = self.name = None


def _create_topics(kafka: KafkaCluster, size: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": ",".join(kafka.bootstrap)})
    common = {"max.message.bytes": str(MAX_BATCH), "min.insync.replicas": str(min(2, size))}
    topics = [
        NewTopic("fsync", 1, min(3, size), config={**common, "flush.messages": "1"}),
        NewTopic("default", 1, min(3, size), config=common),
    ]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(60)


@pytest.fixture(scope="module")
def systems(tmp_path_factory, request):
    pytest.importorskip("confluent_kafka")
    smoke = bool(request.config.getoption("benchmark_disable"))
    running = Systems(tmp_path_factory.mktemp("kafka-peer"), smoke)
    yield running
    running.close()
    _print_ratios(request.config)


@pytest.fixture(scope="module", params=list(TARGETS))
def target(request, systems):
    if systems.smoke and request.param in DURABILITY["no fsync"]:
        pytest.skip("smoke mode runs one durability, fsync (a real run runs both)")
    system, topic = TARGETS[request.param]
    return request.param, systems.bootstrap(system), topic


def _print_ratios(config: pytest.Config) -> None:
    """Print the ratios past pytest's capture, where a module's teardown otherwise writes."""
    lines = []
    for workload in ("librdkafka", "producer-perf-test", "consumer-perf-test"):
        for durability, (ours, theirs) in DURABILITY.items():
            a, b = _RESULTS.get((workload, ours)), _RESULTS.get((workload, theirs))
            if a and b:
                lines.append(
                    f"  {workload}, {durability}: raftcore {a:,.0f}, Kafka {b:,.0f}: {a / b:.2f}x"
                )
    if not lines:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\nraftcore / Kafka, records per second (> 1: raftcore is faster):")
        print("\n".join(lines), flush=True)


def _record(benchmark, workload: str, name: str, records: int, rates: list[float]) -> None:
    median = statistics.median(rates)  # of the perf tools' two rounds, their mean
    _RESULTS[(workload, name)] = median
    benchmark.extra_info.update(
        {
            "records": records,
            "records_per_s": round(median),
            "best_records_per_s": round(max(rates)),
        }
    )


# ---- librdkafka ---------------------------------------------------------------------------------


def _librdkafka_produce(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import KafkaException, Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, **CK_CONFIG, "error_cb": errors.append})
    producer.produce(topic, value=b"w" * RECORD_BYTES, partition=0)  # warm up, untimed
    if producer.flush(60) != 0:
        raise KafkaException(f"the warm-up record was not delivered to {bootstrap}: {errors}")
    value = b"c" * RECORD_BYTES
    started = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:  # the local queue is full: let librdkafka drain it
                producer.poll(0.005)
        if n % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    assert remaining == 0 and not errors, f"{remaining} records not delivered ({errors})"
    return records / seconds


@pytest.mark.benchmark(group="Kafka as a peer: librdkafka, 100-byte records, acks=all")
def test_librdkafka_batched_produce(benchmark, target, scale):
    name, bootstrap, topic = target
    records = max(10_000, int(RECORDS * scale))
    rates: list[float] = []
    benchmark.pedantic(
        lambda: rates.append(_librdkafka_produce(bootstrap, topic, records)),
        rounds=1 if benchmark.disabled else ROUNDS,
        iterations=1,
    )
    _record(benchmark, "librdkafka", name, records, rates)


# ---- Kafka's perf tools -------------------------------------------------------------------------


@pytest.mark.benchmark(group="Kafka as a peer: kafka-producer-perf-test, 100-byte records")
def test_kafka_producer_perf_test(benchmark, target, scale):
    name, bootstrap, topic = target
    records = max(10_000, int(PERF_RECORDS * scale))
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES)]
    args += ["--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}"]
    args += PERF_PROPS
    rates: list[float] = []

    def once() -> None:
        out = run_tool("kafka-producer-perf-test", args, timeout_s=600)
        assert out.returncode == 0, f"{name}: {out.stdout[-500:]} {out.stderr[-2000:]}"
        rates.append(producer_perf_records_per_s(out.stdout))

    benchmark.pedantic(once, rounds=1 if benchmark.disabled else PERF_ROUNDS, iterations=1)
    _record(benchmark, "producer-perf-test", name, records, rates)


@pytest.mark.benchmark(group="Kafka as a peer: kafka-consumer-perf-test, 100-byte records")
def test_kafka_consumer_perf_test(benchmark, target, scale):
    name, bootstrap, topic = target
    records = max(10_000, int(PERF_RECORDS * scale))  # the producers above wrote more
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records)]
    args += ["--timeout", "30000"]
    rates: list[float] = []

    def refused(out: subprocess.CompletedProcess[str]) -> None:
        """Skip where raftcore serves no consumer group: it refuses FindCoordinator."""
        if out.returncode != 0 and name.startswith("raftcore"):
            words = (out.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            pytest.skip(f"kafka-consumer-perf-test needs a consumer group: {words[:300]}")

    def once() -> None:
        out = run_tool("kafka-consumer-perf-test", args, timeout_s=600)
        refused(out)
        assert out.returncode == 0, f"{name}: {out.stdout[-500:]} {out.stderr[-2000:]}"
        rates.append(consumer_perf_records_per_s(out.stdout))

    if not benchmark.disabled:
        # an untimed first read, outside the rounds: a benchmark whose round skipped leaves
        # pytest-benchmark's summary an empty series (smoke mode keeps no series)
        refused(run_tool("kafka-consumer-perf-test", args, timeout_s=600))
    benchmark.pedantic(once, rounds=1 if benchmark.disabled else PERF_ROUNDS, iterations=1)
    _record(benchmark, "consumer-perf-test", name, records, rates)
