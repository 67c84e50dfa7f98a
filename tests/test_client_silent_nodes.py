"""A client among nodes that do not answer (issue 12's audit, on real processes): a hung node
(SIGSTOPped: the kernel accepts its connections, nothing answers) must not cost the client
the other nodes, a hung leader must not hold describe-quorum past its --timeout-ms, and a
node that closes every connection unanswered (a plaintext client at a TLS or SASL listener)
is a lasting answer, not a reason to retry until the timeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from raftcore.client import Consumer, ProduceError, Producer, admin
from raftcore.client import cluster as cluster_module
from raftcore.client.cluster import ClusterClient, LeaderHint, UnreachableError
from raftcore.client.consumer import ConsumeError
from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.node import Endpoint, NodeConfig, RaftNode
from raftcore.node.local_cluster import free_ports


@contextlib.asynccontextmanager
async def lone_leader(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A one-node cluster in this process, once it leads; its port."""
    (port,) = free_ports(1)
    config = NodeConfig(1, {1: Endpoint("127.0.0.1", port)}, str(tmp_path / "n1"), "c")
    node = RaftNode(config)
    await node.start()
    try:
        while not node.is_leader():
            await asyncio.sleep(0.02)
        yield port
    finally:
        await node.stop()


@pytest.mark.slow
def test_a_silent_bootstrap_address_does_not_cost_the_client_the_answering_one(
    silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the silent address asked first, Metadata must still reach the live node well
    within the timeout: each address gets a share of it, not the whole. (A SIGSTOPped node
    among three bootstrap addresses failed describe-quorum 'cannot reach A (timed out),
    B (timed out), C (timed out)' two runs in three, the live nodes never asked.)"""
    monkeypatch.setattr(cluster_module.random, "shuffle", lambda items: None)

    async def scenario() -> float:
        async with lone_leader(tmp_path) as port:
            client = ClusterClient(
                [f"127.0.0.1:{silent_port}", f"127.0.0.1:{port}"], request_timeout_ms=4000
            )
            started = time.monotonic()
            try:
                await client.refresh_metadata()
            finally:
                await client.close()
            assert client.leader == LeaderHint(1, client.leader.epoch)  # type: ignore[union-attr]
            return time.monotonic() - started

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert elapsed < 3.0, f"found the leader after {elapsed:.2f} s"


def test_describe_quorum_gives_up_on_a_silent_leader_at_its_timeout_naming_it(
    silent_port: int,
) -> None:
    """The leader the nodes name stops answering (SIGSTOP): describe-quorum --timeout-ms 800
    must end near 0.8 s, naming the leader and its address; it waited for the connection's
    own 30 s request timeout and said only 'no leader answered DescribeQuorum in time'."""
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> tuple[str, float]:
        client = ClusterClient([str(silent)], request_timeout_ms=800)

        async def metadata_names_the_silent_leader(timeout_s: float | None = None) -> None:
            client.nodes = {2: silent}
            client.leader = LeaderHint(2, 7)

        client.refresh_metadata = metadata_names_the_silent_leader  # type: ignore[method-assign]
        started = time.monotonic()
        try:
            await admin.describe_quorum_with(client, timeout_s=0.8)
        except RaftcoreError as exc:
            return str(exc), time.monotonic() - started
        finally:
            await client.close()
        raise AssertionError("no error")

    message, elapsed = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert elapsed < 2.0, f"gave up after {elapsed:.2f} s"
    assert f"node 2 at {silent}" in message and "timed out" in message, message


def test_a_node_that_closes_every_connection_fails_the_client_fast(closing_port: int) -> None:
    """A plaintext client at a TLS listener (or without the client certificate or SASL
    login it requires) is closed unanswered, every time: that is as lasting as a refusal,
    so a client that no node ever answered gives up after its short grace, as for a
    refusal, not at its timeout (it retried for 10 s, the node logging each attempt)."""

    async def refresh() -> tuple[str, float]:
        client = ClusterClient([f"127.0.0.1:{closing_port}"], request_timeout_ms=8000)
        started = time.monotonic()
        try:
            await client.refresh_metadata()
        except UnreachableError as exc:
            return str(exc), time.monotonic() - started
        finally:
            await client.close()
        raise AssertionError("no error")

    message, elapsed = asyncio.run(asyncio.wait_for(refresh(), 20))
    assert elapsed < 2.5, f"gave up after {elapsed:.2f} s"
    assert "the node closed the connection" in message, message


def test_an_idempotent_producer_asks_a_silent_leader_for_its_id_only_its_request_timeout(
    silent_port: int,
) -> None:
    """InitProducerId to a hung leader waited the connection's own 30 s, not the producer's
    request timeout: `raftcore produce` (--timeout-ms 10000) with a SIGSTOPped leader took
    30.6 s though a new leader was elected within 3 s."""
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        producer = Producer(
            [str(silent)], request_timeout_ms=800, delivery_timeout_ms=500, idempotent=True
        )

        async def metadata_names_the_silent_leader(timeout_s: float | None = None) -> None:
            producer.cluster.nodes = {2: silent}
            producer.cluster.leader = LeaderHint(2, 7)

        producer.cluster.refresh_metadata = metadata_names_the_silent_leader  # type: ignore[method-assign]
        await metadata_names_the_silent_leader()
        started = time.monotonic()
        try:
            await producer._init_producer_id()
        except ProduceError:
            return time.monotonic() - started
        finally:
            await producer.cluster.close()
        raise AssertionError("no error")

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert elapsed < 2.0, f"gave up after {elapsed:.2f} s"


def test_a_consumer_asks_a_silent_leader_for_an_offset_only_its_request_timeout(
    silent_port: int,
) -> None:
    """ListOffsets to a hung leader waited the connection's own 30 s: `raftcore consume`
    (--timeout-ms 10000) with a SIGSTOPped leader took 30.6 s to print its first record."""
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        consumer = Consumer([str(silent)], request_timeout_ms=800)
        consumer.cluster.nodes = {2: silent}
        consumer.cluster.leader = LeaderHint(2, 7)
        started = time.monotonic()
        try:
            await consumer.list_offset(-2)  # EARLIEST
        except asyncio.TimeoutError:
            return time.monotonic() - started
        finally:
            await consumer.cluster.close()
        raise AssertionError("no error")

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert elapsed < 2.0, f"gave up after {elapsed:.2f} s"


def test_the_exactly_once_writer_asks_a_silent_leader_only_until_its_deadline(
    silent_port: int,
) -> None:
    """DescribeProducers (where an exactly-once write resumes) to a hung leader waited the
    connection's own 30 s, past the caller's timeout."""
    from raftcore.client.resumable import ExactlyOnceError, last_sequence

    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        client = ClusterClient([str(silent)], request_timeout_ms=5000)
        client.nodes = {2: silent}
        client.leader = LeaderHint(2, 7)
        client.refresh_metadata = lambda timeout_s=None: asyncio.sleep(0)  # type: ignore[method-assign]
        started = time.monotonic()
        try:
            await last_sequence(client, "raftcore", 1, timeout_s=0.8)
        except ExactlyOnceError:
            return time.monotonic() - started
        finally:
            await client.close()
        raise AssertionError("no error")

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert elapsed < 2.0, f"gave up after {elapsed:.2f} s"


@pytest.mark.slow
def test_a_consumer_whose_leader_went_silent_asks_the_others_before_retrying(
    silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its request to the leader timed out, the consumer must learn the new leader
    from another node before it retries: it retried the stale leader while a background
    refresh was still asking the silent node first, and `raftcore consume` with a
    SIGSTOPped leader took two request timeouts (20.8 s) instead of one."""
    monkeypatch.setattr(cluster_module.random, "shuffle", lambda items: None)
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        async with lone_leader(tmp_path) as port:
            consumer = Consumer([f"127.0.0.1:{port}"], request_timeout_ms=1000)
            await consumer.start()
            epoch = consumer.cluster.leader.epoch  # type: ignore[union-attr]
            # what it knew a moment ago: leader 2, now hung (the silent node listed first)
            consumer.cluster.nodes = {2: silent, 1: Endpoint("127.0.0.1", port)}
            consumer.cluster.leader = LeaderHint(2, epoch)
            started = time.monotonic()
            try:
                await consumer.poll()
            finally:
                await consumer.close()
            return time.monotonic() - started

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert elapsed < 1.7, f"first poll after {elapsed:.2f} s"


@pytest.mark.slow
def test_a_producer_whose_leader_went_silent_asks_the_others_before_resending(
    silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer's side of the same rule: after a Produce to the leader timed out, it
    learns the new leader before it sends again (it resent to the stale one)."""
    monkeypatch.setattr(cluster_module.random, "shuffle", lambda items: None)
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        async with lone_leader(tmp_path) as port:
            producer = Producer([f"127.0.0.1:{port}"], request_timeout_ms=1000, idempotent=False)
            cluster = producer.cluster
            await cluster.refresh_metadata()
            epoch = cluster.leader.epoch  # type: ignore[union-attr]
            cluster.nodes = {2: silent, 1: Endpoint("127.0.0.1", port)}  # leader 2, now hung
            cluster.leader = LeaderHint(2, epoch)

            async def start_keeping_what_it_knew(timeout_s: float | None = None) -> None:
                cluster._refresh_task = asyncio.ensure_future(cluster._refresh_loop())

            cluster.start = start_keeping_what_it_knew  # type: ignore[method-assign]
            started = time.monotonic()
            async with producer:
                await producer.send([(b"k", b"v")])
            return time.monotonic() - started

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert elapsed < 1.7, f"acknowledged after {elapsed:.2f} s"


@pytest.mark.slow
def test_an_idempotent_producer_whose_leader_went_silent_asks_the_others_first(
    silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """InitProducerId timed out on a hung leader: the metadata refresh that follows asks the
    other nodes first (it gave the hung node its share of the timeout first: raftcore
    produce with a SIGSTOPped leader took 13.8 s with --timeout-ms 10000)."""
    monkeypatch.setattr(cluster_module.random, "shuffle", lambda items: None)
    silent = Endpoint("127.0.0.1", silent_port)

    async def scenario() -> float:
        async with lone_leader(tmp_path) as port:
            producer = Producer([f"127.0.0.1:{port}"], request_timeout_ms=3000)
            cluster = producer.cluster
            try:
                await cluster.refresh_metadata()
                epoch = cluster.leader.epoch  # type: ignore[union-attr]
                cluster.nodes = {2: silent, 1: Endpoint("127.0.0.1", port)}
                cluster.leader = LeaderHint(2, epoch)
                started = time.monotonic()
                await producer._init_producer_id()
                return time.monotonic() - started
            finally:
                await cluster.close()

    elapsed = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert elapsed < 3.8, f"a producer id after {elapsed:.2f} s"


def test_list_offsets_retries_a_leader_that_is_not_ready_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new leader answers ListOffsets NOT_LEADER_OR_FOLLOWER until it has committed in its
    epoch (KIP-595: no high watermark before that). The consumer's list_offset must retry it
    as it retries a leader change, not raise: the Kafka-clients benchmark, asking for the high
    watermark of a cluster just started, failed CI with "ListOffsets: NOT_LEADER_OR_FOLLOWER"."""
    from raftcore.kafka import server
    from raftcore.protocol.api import ApiKey

    real = server.HANDLERS[ApiKey.LIST_OFFSETS]
    answered: list[int] = []

    def not_ready_twice(broker, body, version):  # type: ignore[no-untyped-def]
        resp = real(broker, body, version)
        if len(answered) < 2:
            resp.topics[0].partitions[0].error_code = Errors.NOT_LEADER_OR_FOLLOWER
        answered.append(resp.topics[0].partitions[0].error_code)
        return resp

    monkeypatch.setitem(server.HANDLERS, ApiKey.LIST_OFFSETS, not_ready_twice)

    async def scenario() -> int:
        async with (
            lone_leader(tmp_path) as port,
            Consumer([f"127.0.0.1:{port}"], request_timeout_ms=5000) as consumer,
        ):
            return await consumer.list_offset(-2)  # EARLIEST

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == 0
    assert answered == [Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_LEADER_OR_FOLLOWER, 0]


def test_list_offsets_raises_an_error_that_is_not_a_leader_change_at_once(
    tmp_path: Path,
) -> None:
    """An unknown topic is an answer, not a reason to retry until the timeout."""

    async def scenario() -> float:
        async with (
            lone_leader(tmp_path) as port,
            Consumer([f"127.0.0.1:{port}"], topic="raftcore", request_timeout_ms=5000) as consumer,
        ):
            consumer.topic = "no-such-topic"
            started = time.monotonic()
            with pytest.raises(ConsumeError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await consumer.list_offset(-1)
            return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) < 1.0
