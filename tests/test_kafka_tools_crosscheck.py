"""Apache Kafka's own command-line tools, run unmodified (their Java main classes from the
Maven Central release, tests/kafka_peer.py) against a 3-node raftcore cluster: what raftcore
serves they do, and what it does not serve fails at once with words, never a hang.

Skipped, saying why, without Java 17+ or Kafka's jars (fetched into a cache by Maven once:
``python3 tests/kafka_peer.py fetch``, which .ci/run does). Each tool is a JVM start (2-5 s
here), so the module holds a handful of them.
"""

from __future__ import annotations

import time

import pytest
from cluster_helpers import FAST, run
from kafka_peer import kafka_problem, producer_perf_records_per_s, run_tool

from raftcore.client import Consumer
from raftcore.node.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "raftcore"
# A refusal must come back well inside the time a hang would take: a tool's JVM starts in
# 2-5 s on this 2-core machine under load, and the tools' own request timeout is 30 s or more.
REFUSAL_BOUND_S = 25.0


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    problem = kafka_problem()
    if problem is not None:
        pytest.skip(problem)
    with LocalCluster(tmp_path_factory.mktemp("kafka-tools"), 3, node_args=FAST) as cluster:
        cluster.start()
        yield ",".join(cluster.bootstrap)


def _high_watermark(bootstrap: str) -> int:
    async def ask() -> int:
        async with Consumer(bootstrap.split(","), topic=TOPIC) as consumer:
            return await consumer.list_offset(-1)

    return run(ask())


def _tool(name: str, args: list[str], timeout_s: float = 90.0):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    out = run_tool(name, args, timeout_s=timeout_s)
    return out, time.monotonic() - started


def test_kafka_topics_describe_names_the_served_topic_its_partition_and_replicas(bootstrap):
    out, _ = _tool("kafka-topics", ["--bootstrap-server", bootstrap, "--describe"])
    assert out.returncode == 0, out.stderr
    assert f"Topic: {TOPIC}\t" in out.stdout, out.stdout
    assert "PartitionCount: 1" in out.stdout and "ReplicationFactor: 3" in out.stdout
    assert "Replicas: 1,2,3" in out.stdout and "Isr: 1,2,3" in out.stdout, out.stdout


def test_producer_perf_test_with_acks_all_commits_every_record_and_console_consumer_reads_them(
    bootstrap,
):
    records = 2000
    before = _high_watermark(bootstrap)
    args = ["--topic", TOPIC, "--num-records", str(records), "--record-size", "100"]
    args += ["--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}"]
    args += ["acks=all", "linger.ms=5"]
    out, _ = _tool("kafka-producer-perf-test", args)
    assert out.returncode == 0, out.stderr
    assert f"{records} records sent" in out.stdout, out.stdout
    assert producer_perf_records_per_s(out.stdout) > 0
    assert _high_watermark(bootstrap) - before == records

    # assign() to the partition and keep no offsets: no group coordinator needed
    args = ["--bootstrap-server", bootstrap, "--topic", TOPIC, "--partition", "0"]
    args += ["--offset", str(before), "--max-messages", str(records), "--timeout-ms", "20000"]
    args += ["--consumer-property", "enable.auto.commit=false"]
    out, _ = _tool("kafka-console-consumer", args)
    assert out.returncode == 0, out.stderr
    values = out.stdout.splitlines()
    assert len(values) == records and all(len(v) == 100 for v in values), values[:3]
    assert f"Processed a total of {records} messages" in out.stderr


# What raftcore does not serve today: the tool exits non-zero, quickly, and its words say what.
# Each case also names what the tool prints once raftcore serves it, so that the test holds on
# both sides of that change (topics, groups and offsets are being added).
REFUSED = {
    "kafka-topics --create of a second topic": (
        "kafka-topics",
        ["--create", "--topic", "another", "--partitions", "1", "--replication-factor", "3"],
        "raftcore serves one topic",
        "Created topic another.",
    ),
    "kafka-consumer-groups --list": (
        "kafka-consumer-groups",
        ["--list"],
        "The node does not support LIST_GROUPS",
        "",
    ),
    # FindCoordinator is answered INVALID_REQUEST with raftcore's reason in errorMessage; the
    # Java consumer drops that message and prints only its exception's generic text.
    "kafka-consumer-perf-test (a consumer group)": (
        "kafka-consumer-perf-test",
        ["--topic", TOPIC, "--messages", "1", "--timeout", "10000"],
        "InvalidRequestException",
        "nMsg.sec",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_tool_asking_for_what_raftcore_does_not_serve_fails_at_once_with_words(bootstrap, case):
    tool, args, refused, served = REFUSED[case]
    out, seconds = _tool(tool, ["--bootstrap-server", bootstrap, *args], timeout_s=60)
    said = out.stdout + out.stderr
    if out.returncode == 0:  # served by now
        assert served in said, said
    else:
        assert refused in said, said
        assert seconds < REFUSAL_BOUND_S, f"{case} took {seconds:.1f} s to fail"
