"""The edges a Kafka user with habits trips on, asked with librdkafka (confluent-kafka) of a
three-node cluster: the getting-started example as pasted, and the AdminClient's
describe_configs and create_topics of the served topic. Consumer groups:
tests/test_consumer_group_clients.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import FAST, a_leader

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.cluster(3, node_args=FAST, ready=a_leader),
]

GETTING_STARTED = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"


def confluent_example() -> str:
    text = GETTING_STARTED.read_text(encoding="utf-8")
    match = re.search(r"With \[confluent-kafka\].*?```python\n(.*?)```", text, re.DOTALL)
    assert match, "getting-started.md lost its confluent-kafka example"
    return match.group(1)


def test_the_getting_started_confluent_kafka_example_runs_as_pasted_and_closes_at_once(
    cluster,
    tmp_path,
):
    """The example's consumer is a group member with librdkafka's default auto-commit: the
    group forms (group.initial.rebalance.delay.ms, 3 s), it reads, and close() commits to the
    coordinator at once."""
    code = confluent_example()
    code = code.replace("127.0.0.1:9091", cluster.endpoint(1))
    code = code.replace("127.0.0.1:9092", cluster.endpoint(2))
    script = tmp_path / "example.py"
    script.write_text(code)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"10 records; the last at offset \d+: b'k9' b'event 9'\n", done.stdout), (
        done.stdout
    )
    assert took < 20, f"the example took {took:.1f} s"  # 3 s to join, 6 s of idle poll


def test_the_admin_client_describes_configs_and_is_refused_creating_the_served_topic_in_words(
    cluster,
):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": ",".join(cluster.bootstrap)})
    topic = ConfigResource("topic", "raftcore")
    configs = admin.describe_configs([topic])[topic].result(10)
    assert {"retention.ms", "retention.bytes", "segment.bytes", "max.message.bytes"} <= set(configs)
    node = ConfigResource("broker", "1")
    assert "message.max.bytes" in admin.describe_configs([node])[node].result(10)
    # other topics are created (tests/test_topics_processes.py); the served one exists
    with pytest.raises(Exception, match="fixed when the data directory is formatted") as err:
        admin.create_topics([NewTopic("raftcore", 1, 1)])["raftcore"].result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(err.value)
