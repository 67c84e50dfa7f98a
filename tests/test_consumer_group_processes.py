"""Committed offsets across a SIGKILL of the coordinator's node: ``raftcore node --partitions 4``
processes (LocalCluster), a confluent-kafka consumer group commits, the node that coordinates
the group is killed, and a new member of the group, asking the other two nodes, is handed the
same offsets by the new coordinator (the commit was answered once committed in Raft)."""

from __future__ import annotations

import signal
import time

import pytest
from cluster_helpers import FAST, run

from raftcore.client.connection import Connection
from raftcore.error_codes import Errors
from raftcore.node.local_cluster import LocalCluster
from raftcore.protocol.api import ApiKey, request_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC = "raftcore"
PARTITIONS = 4
CONSUMER = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 200,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
}


async def _coordinator_of(endpoint: str, group_id: str, timeout_s: float = 15.0) -> int:
    """The node id FindCoordinator names for ``group_id``, once one is known."""
    host, port = endpoint.rsplit(":", 1)
    cls = request_spec(ApiKey.FIND_COORDINATOR).cls
    deadline = time.monotonic() + timeout_s
    while True:
        conn = await Connection.open(host, int(port))
        try:
            answer = await conn.request(ApiKey.FIND_COORDINATOR, 0, cls(key=group_id), timeout_s=5)
        finally:
            await conn.close()
        if answer.error_code == Errors.NONE:
            return int(answer.node_id)
        assert time.monotonic() < deadline, f"no coordinator for {group_id}: {answer.error_code}"
        time.sleep(0.1)


def test_an_offset_committed_before_the_coordinators_node_is_killed_is_served_after(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    local = LocalCluster(
        tmp_path / "cluster",
        3,
        node_args=[*FAST, "--group-initial-rebalance-delay-ms=0"],
        partitions=PARTITIONS,
    )
    try:
        local.start()
        bootstrap = ",".join(local.bootstrap)
        producer = Producer({"bootstrap.servers": bootstrap})
        for p in range(PARTITIONS):
            for i in range(5):
                producer.produce(TOPIC, value=b"%d-%d" % (p, i), partition=p)
        assert producer.flush(15) == 0
        first = Consumer({"bootstrap.servers": bootstrap, "group.id": "durable", **CONSUMER})
        first.subscribe([TOPIC])
        read: dict[int, int] = {}
        deadline = time.monotonic() + 20
        while len(read) < PARTITIONS and time.monotonic() < deadline:
            message = first.poll(0.2)
            if message is not None and not message.error():
                read.setdefault(message.partition(), message.offset() + 1)
        assert sorted(read) == list(range(PARTITIONS)), "a record of every partition read"
        wanted = [TopicPartition(TOPIC, p, o) for p, o in sorted(read.items())]
        first.commit(offsets=wanted, asynchronous=False)  # answered once committed in Raft
        coordinator = run(_coordinator_of(local.endpoint(1), "durable"))
        local.kill(coordinator, signal.SIGKILL)
        first.close()  # its LeaveGroup finds the new coordinator, or times out: either is fine
        rest = ",".join(local.endpoint(n) for n in local.node_ids if n != coordinator)
        second = Consumer({"bootstrap.servers": rest, "group.id": "durable", **CONSUMER})
        try:
            seen = second.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 20)
            assert {tp.partition: tp.offset for tp in seen} == read
            assert run(_coordinator_of(rest.split(",")[0], "durable")) != coordinator
        finally:
            second.close()
    finally:
        local.close()
