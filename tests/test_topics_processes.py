"""Topics created at run time on three ``raftcore node`` processes, by librdkafka's AdminClient
(confluent-kafka), unmodified: it finds the controller in Metadata, creates a topic of six
partitions with replication factor 3 and one with 2, a librdkafka producer spreads keyed
records over their partitions with its default partitioner, every record is read back from its
own partition, and delete_topics removes both (their replicas' directories go from every
node). Every process is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import time

import pytest
from cluster_helpers import FAST, quorum, run
from test_topics import _produce_keyed, _read_partition

from raftcore.node.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _wait(predicate, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.1)


def _partitions_led(admin, topic: str, count: int) -> bool:  # type: ignore[no-untyped-def]
    found = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
    if found is None or found.error is not None or len(found.partitions) != count:
        return False
    return all(p.leader >= 0 for p in found.partitions.values())


def test_librdkafka_admin_creates_topics_of_three_and_two_replicas_and_deletes_them(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    local = LocalCluster(tmp_path / "cluster", 3, node_args=FAST)
    try:
        local.start()
        run(quorum(local))
        bootstrap = local.bootstrap
        admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})
        _wait(lambda: admin.list_topics(timeout=5).controller_id > 0, "a controller")
        futures = admin.create_topics(
            [NewTopic("three", 6, 3), NewTopic("two", 6, 2)], operation_timeout=20
        )
        for name, future in futures.items():
            assert future.result(30) is None, name
        # answered by the controller once committed; the node asked learns with its next fetch
        _wait(
            lambda: {"three", "two", "raftcore"} <= set(admin.list_topics(timeout=5).topics),
            "both topics in Metadata",
        )
        for name, factor in (("three", 3), ("two", 2)):
            _wait(lambda n=name: _partitions_led(admin, n, 6), f"every partition of {name} led")
            topic = admin.list_topics(topic=name, timeout=5).topics[name]
            assert all(len(p.replicas) == factor for p in topic.partitions.values())
            per_node = [
                sum(1 for p in topic.partitions.values() if n in p.replicas) for n in (1, 2, 3)
            ]
            assert per_node == [6 * factor // 3] * 3  # the replicas spread evenly
            keys = [f"{name}-key-{i}".encode() for i in range(60)]
            where = _produce_keyed(bootstrap, name, keys)
            assert len(set(where.values())) > 1
            for p in range(6):
                mine = [k for k in keys if where[k] == p]
                assert _read_partition(bootstrap, name, p, len(mine)) == mine, f"{name}-{p}"
        again = admin.create_topics([NewTopic("two", 1, 1)], operation_timeout=10)["two"]
        with pytest.raises(Exception, match=r"TOPIC_ALREADY_EXISTS|already exists"):
            again.result(30)
        for name, future in admin.delete_topics(["three", "two"], operation_timeout=20).items():
            assert future.result(30) is None, name
        _wait(
            lambda: not any(any(local.data_dir(n).glob("t*-*")) for n in (1, 2, 3)),
            "every replica directory of the deleted topics gone",
        )
        _wait(
            lambda: not {"three", "two"} & set(admin.list_topics(timeout=5).topics),
            "the deleted topics gone from Metadata",
        )
    finally:
        local.close()
