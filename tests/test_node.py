"""The network node in one process: three RaftNodes on loopback, spoken to over TCP with our
own client pieces and with raw frames. Rules from the issue (transport, cluster id, KIP-951
answers, committed-only fetches, idempotent produce) and from seed 001 (leader discovery)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from node_helpers import (  # noqa: F401 (the in-process cluster; others import it from here)
    CLUSTER_ID,
    FAST,
    Collector,
    _settled,
    bootstrap,
    cluster,
    configs,
    leader_of,
    raw_request,
    run,
)

from raftcore.client import Consumer, Producer
from raftcore.client.cluster import ClusterClient, LeaderHint
from raftcore.client.connection import Connection, ConnectionClosed
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node.local_cluster import free_ports
from raftcore.protocol.api import ApiKey, decode_response, encode_request, request_spec
from raftcore.raft import NotLeaderError
from raftcore.records import encode_batch, iter_batches

pytestmark = pytest.mark.timeout(60)

# ---- the embedding API ----------------------------------------------------------------------


def test_embedded_nodes_commit_appends_in_order_to_every_listener(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            for i in range(5):
                await leader.append([(b"k", b"v%d" % i)], wait=True)
            want = [b"v%d" % i for i in range(5)]
            for _ in range(200):
                if all(n.listener.values == want for n in nodes):
                    break
                await asyncio.sleep(0.02)
            assert [n.listener.values for n in nodes] == [want] * 3
            assert all(n.listener.leaders[-1] == (leader.node_id, 1) for n in nodes)

    run(main())


def test_a_failing_listener_is_logged_and_replication_goes_on(tmp_path, caplog):
    class Failing(Collector):
        def handle_commit(self, batches):  # type: ignore[no-untyped-def]
            raise RuntimeError("application bug")

    async def main():
        async with cluster(tmp_path) as nodes:
            for n in nodes:
                n.listener = Failing()
            leader = await leader_of(nodes)
            _, last = await leader.append([(b"k", b"v")], wait=True)
            _, last = await leader.append([(b"k", b"w")], wait=True)
            assert leader.high_watermark == last + 1

    run(main())
    assert "the listener failed on committed offsets" in caplog.text


def test_append_on_a_follower_raises_not_leader_naming_the_leader(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            with pytest.raises(NotLeaderError) as info:
                await follower.append([(b"k", b"v")])
            assert info.value.leader.leader_id == leader.node_id

    run(main())


def test_graceful_stop_of_the_leader_resigns_and_another_leads_the_next_epoch(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            epoch = leader.leader_and_epoch.epoch
            await leader.stop()
            rest = [n for n in nodes if n is not leader]
            new = await leader_of(rest, timeout_s=5)
            assert new.leader_and_epoch.epoch > epoch

    run(main())


def test_a_stopped_node_opens_no_connection_and_runs_no_step_of_its_core(tmp_path):
    """A step or a request late in a node's close (an answer still in flight, a peer that
    connects meanwhile and is asked what it serves) must not open a connection nobody will
    close (one retried a dead peer for 92 s) nor reach a core whose log is closed
    (LogClosedError stopped the node as a failure)."""

    async def main():
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            await leader_of(nodes)
            await node.stop()
            opened = node.peers.opened
            assert node.peers.get(2) is None and node.peers.opened == opened
            with pytest.raises(ConnectionError, match="not running"):
                await node.request_peer(2, ApiKey.API_VERSIONS, 3, None, 1.0)
            assert node.group.running_core() is None
            node.group.run(lambda now: pytest.fail("a step ran after the close"))
            assert node.failure is None

    run(main())


# ---- the transport --------------------------------------------------------------------------


def test_a_frame_above_the_maximum_closes_the_connection_and_the_node_keeps_serving(tmp_path):
    async def main():
        async with cluster(tmp_path, max_frame_bytes=1024) as nodes:
            node = nodes[0]
            reader, writer = await asyncio.open_connection(
                node.config.listen.host, node.config.listen.port
            )
            writer.write(struct.pack(">i", 4096) + b"x" * 4096)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the node
            writer.close()
            body = request_spec(ApiKey.API_VERSIONS).cls()
            resp = await raw_request(node, ApiKey.API_VERSIONS, 3, body)
            assert resp.error_code == Errors.NONE

    run(main())


def test_api_versions_v4_is_answered_as_kafka_4_clients_ask_it_first(tmp_path):
    """Kafka's Java clients 4.x ask v4 first: an UNSUPPORTED_VERSION would cost every
    connection a second round trip (v3)."""

    async def main():
        async with cluster(tmp_path) as nodes:
            body = request_spec(ApiKey.API_VERSIONS).cls(
                client_software_name="apache-kafka-java", client_software_version="4.1.1"
            )
            resp = await raw_request(nodes[0], ApiKey.API_VERSIONS, 4, body)
            assert resp.error_code == Errors.NONE
            versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert versions[ApiKey.API_VERSIONS] == (0, 4)

    run(main())


def test_an_unknown_api_key_closes_the_connection_without_harming_the_node(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            reader, writer = await asyncio.open_connection(
                node.config.listen.host, node.config.listen.port
            )
            frame = struct.pack(">hhih", 999, 0, 7, -1)
            writer.write(struct.pack(">i", len(frame)) + frame)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            body = request_spec(ApiKey.API_VERSIONS).cls()
            assert (await raw_request(node, ApiKey.API_VERSIONS, 3, body)).error_code == 0

    run(main())


def test_api_versions_at_an_unsupported_version_answers_unsupported_version_with_v0(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            reader, writer = await asyncio.open_connection(
                node.config.listen.host, node.config.listen.port
            )
            frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 42, -1) + b"\x00\x00\x00"
            writer.write(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            cid, resp = decode_response(ApiKey.API_VERSIONS, 0, await reader.readexactly(size))
            writer.close()
            assert cid == 42
            assert resp.error_code == Errors.UNSUPPORTED_VERSION
            versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert versions[ApiKey.FETCH][1] >= 16 and versions[ApiKey.PRODUCE][1] >= 10

    run(main())


def test_garbage_after_a_valid_header_closes_the_connection(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            reader, writer = await asyncio.open_connection(
                node.config.listen.host, node.config.listen.port
            )
            frame = encode_request(ApiKey.METADATA, 12, 5, "t", _metadata_body())[:-3]
            writer.write(struct.pack(">i", len(frame)) + frame)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()

    run(main())


def _metadata_body():  # type: ignore[no-untyped-def]
    cls = request_spec(ApiKey.METADATA).cls
    return cls(topics=[cls.MetadataRequestTopic(name="raftcore")])


def test_a_raft_request_with_another_cluster_id_gets_inconsistent_cluster_id(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            await leader_of(nodes)
            cls = request_spec(ApiKey.VOTE).cls
            body = cls(
                cluster_id="some-other-cluster",
                voter_id=1,
                topics=[
                    cls.TopicData(
                        topic_name="raftcore",
                        partitions=[
                            cls.PartitionData(
                                partition_index=0,
                                candidate_epoch=99,
                                candidate_id=2,
                                last_offset_epoch=99,
                                last_offset=10**9,
                            )
                        ],
                    )
                ],
            )
            resp = await raw_request(nodes[0], ApiKey.VOTE, 1, body)
            assert resp.error_code == Errors.INCONSISTENT_CLUSTER_ID
            assert max(n.leader_and_epoch.epoch for n in nodes) < 99  # nothing changed

    run(main())


# ---- the Kafka client API --------------------------------------------------------------------


def _produce_body(records: bytes, acks: int = -1):  # type: ignore[no-untyped-def]
    cls = request_spec(ApiKey.PRODUCE).cls
    return cls(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            cls.TopicProduceData(
                name="raftcore", partition_data=[cls.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def test_produce_to_a_follower_answers_not_leader_with_current_leader_and_endpoints(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            body = _produce_body(encode_batch([(b"k", b"v")]))
            resp = await raw_request(follower, ApiKey.PRODUCE, 10, body)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
                leader.node_id,
                leader.leader_and_epoch.epoch,
            )
            endpoints = {e.node_id: (e.host, e.port) for e in resp.node_endpoints}
            listen = leader.config.listen
            assert endpoints[leader.node_id] == (listen.host, listen.port)

    run(main())


def test_consumer_fetch_from_a_follower_answers_not_leader_with_current_leader(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            cls = request_spec(ApiKey.FETCH).cls
            body = cls(
                max_wait_ms=0,
                min_bytes=0,
                topics=[
                    cls.FetchTopic(
                        topic_id=follower.config.topic_id,
                        partitions=[
                            cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)
                        ],
                    )
                ],
            )
            resp = await raw_request(follower, ApiKey.FETCH, 16, body)
            part = resp.responses[0].partitions[0]
            assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
            assert part.current_leader.leader_id == leader.node_id
            assert leader.node_id in {e.node_id for e in resp.node_endpoints}

    run(main())


def test_a_retried_idempotent_batch_is_appended_once_and_answered_with_its_first_offsets(
    tmp_path,
):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            data = encode_batch(
                [(b"k", b"a"), (b"k", b"b")], producer_id=77, producer_epoch=0, base_sequence=0
            )
            first = await raw_request(leader, ApiKey.PRODUCE, 10, _produce_body(data))
            again = await raw_request(leader, ApiKey.PRODUCE, 10, _produce_body(data))
            p1 = first.responses[0].partition_responses[0]
            p2 = again.responses[0].partition_responses[0]
            assert (p1.error_code, p2.error_code) == (0, 0)
            assert p1.base_offset == p2.base_offset
            gap = encode_batch([(b"k", b"c")], producer_id=77, producer_epoch=0, base_sequence=5)
            p3 = (await raw_request(leader, ApiKey.PRODUCE, 10, _produce_body(gap))).responses[0]
            assert p3.partition_responses[0].error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
            values = [
                r.value
                for b in iter_batches(leader.log.read(0, 1 << 20))
                if not b.is_control
                for r in b.records()
            ]
            assert values == [b"a", b"b"]

    run(main())


def test_consumers_see_only_committed_records(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"committed")], wait=True)
            for n in nodes:
                if n is not leader:
                    await n.stop(timeout_s=0.1)
            await leader.append([(b"k", b"not committed")])
            assert leader.log.end_offset > leader.high_watermark
            async with Consumer(bootstrap(leader), start="earliest", max_wait_ms=50) as consumer:
                got = []
                for _ in range(5):
                    got.extend(r.value for r in await consumer.poll())
            assert got == [b"committed"]

    run(main())


def test_list_offsets_answers_the_log_start_and_the_high_watermark(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            _, last = await leader.append([(b"k", b"v")] * 10, wait=True)
            async with Consumer(bootstrap(leader)) as consumer:
                assert await consumer.list_offset(-2) == 0
                assert await consumer.list_offset(-1) == leader.high_watermark == last + 1

    run(main())


# ---- the client: KIP-951 leader discovery -------------------------------------------------


def test_learn_leader_accepts_only_a_newer_epoch_and_records_endpoints():
    client = ClusterClient(["127.0.0.1:1"], topic="raftcore")
    client.leader = LeaderHint(1, 5)

    class Ep:
        node_id, host, port = 2, "127.0.0.1", 2

    assert client.learn_leader(2, 5, [Ep]) is False  # same epoch: nothing new
    assert client.learn_leader(2, 6, [Ep]) is True
    assert client.leader == LeaderHint(2, 6)
    assert client.nodes[2] == Endpoint("127.0.0.1", 2)
    assert client.learn_leader(3, 7) is False  # newer, but nowhere to send: refresh first
    assert client.leader == LeaderHint(3, 7)


def test_backoff_grows_exponentially_with_jitter_up_to_the_maximum():
    client = ClusterClient(
        ["127.0.0.1:1"], topic="raftcore", retry_backoff_ms=100, retry_backoff_max_ms=1000
    )
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (5, 1.0), (9, 1.0)]:
        for _ in range(20):
            assert base * 0.8 <= client.backoff_s(attempt) <= base * 1.2


def test_producer_retries_at_a_newer_leader_at_once_without_backoff(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            async with Producer(bootstrap(leader)) as producer:
                await producer.send([(b"k", b"warm-up")])
                # Make the client believe in a stale leader: the follower, an epoch ago.
                producer.cluster.leader = LeaderHint(follower.node_id, 0)
                backoffs = []
                real = producer.cluster.backoff_s
                producer.cluster.backoff_s = lambda a: backoffs.append(a) or real(a)
                await producer.send([(b"k", b"after-move")])
                assert producer.immediate_retries == 1
                assert producer.retries == 0 and backoffs == []
                assert producer.cluster.leader.leader_id == leader.node_id

    run(main())


def test_producer_backs_off_when_the_answer_names_no_newer_leader(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            epoch = leader.leader_and_epoch.epoch
            async with Producer(bootstrap(leader)) as producer:
                await producer.send([(b"k", b"warm-up")])
                producer.cluster.leader = LeaderHint(follower.node_id, epoch)  # same epoch
                backoffs = []
                real = producer.cluster.backoff_s
                producer.cluster.backoff_s = lambda a: backoffs.append(a) or real(a)
                await producer.send([(b"k", b"after-backoff")])
                assert producer.immediate_retries == 0
                assert producer.retries >= 1 and backoffs[0] == 1

    run(main())


def test_a_connection_to_a_closed_port_fails_cleanly():
    async def main():
        (port,) = free_ports(1)
        with pytest.raises((ConnectionClosed, OSError)):
            await Connection.open("127.0.0.1", port, timeout_s=2)

    run(main())


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(5)
    assert len(set(ports)) == 5
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_producer_refuses_an_unknown_compression_up_front():
    with pytest.raises(ValueError, match="brotli"):
        Producer(["127.0.0.1:1"], compression="brotli")


def test_a_record_that_cannot_be_encoded_fails_its_send_and_not_the_producer(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            async with Producer(bootstrap(leader)) as producer:
                with pytest.raises(TypeError):
                    await producer.send([(b"k", 12345)])
                first, last = await producer.send([(b"k", b"fine")])
                assert first == last

    run(main())


def test_interval_flush_acknowledges_without_waiting_for_the_periodic_fsync(tmp_path):
    async def main():
        async with cluster(tmp_path, flush="interval", flush_interval_ms=60_000) as nodes:
            leader = await leader_of(nodes)
            _, last = await asyncio.wait_for(leader.append([(b"k", b"v")], wait=True), 5)
            assert leader.high_watermark == last + 1
            assert leader.log.flushed_offset <= last  # not fsynced yet: the interval is a minute

    run(main())


def test_a_produced_batch_with_a_bad_crc_is_refused_as_corrupt_and_nothing_is_written(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            end = leader.log.end_offset
            data = bytearray(encode_batch([(b"k", b"value")]))
            data[-1] ^= 0xFF  # a byte of the record, covered by the CRC
            resp = await raw_request(leader, ApiKey.PRODUCE, 10, _produce_body(bytes(data)))
            assert resp.responses[0].partition_responses[0].error_code == Errors.CORRUPT_MESSAGE
            assert leader.log.end_offset == end

    run(main())
