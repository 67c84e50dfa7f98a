"""One node, many Raft groups: the partitions 0..N-1 of the topic (``--partitions``), each a
Raft group of its own over the same voters, electing its own leader. Three in-process nodes
(tests/test_node.py's ``cluster``) with three partitions, spoken to by kafka-python (on a
thread: it blocks) with an explicit partition; and the rules of the data directory."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from pathlib import Path

import pytest
from kafka_helpers import kafka_python_producer
from test_node import cluster, configs, run  # the in-process cluster and its helpers

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.node import raft_wire
from raftcore.node.data_dir import format_data_dir, group_directory
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, decode_request, encode_response
from raftcore.raft.messages import FetchRequest, Outbound, VoteRequest, VoteResponse
from raftcore.records import encode_batch
from raftcore.topic_partition import TopicPartition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC = "raftcore"
PARTITIONS = 3


def _names() -> list[TopicPartition]:
    return [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]


async def leaders(nodes: list[RaftNode], timeout_s: float = 15.0) -> dict[int, RaftNode]:
    """Each partition's leader, once every running node knows it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    running = [n for n in nodes if n._started]
    while loop.time() < deadline:
        found: dict[int, RaftNode] = {}
        for name in _names():
            led = [n for n in running if n.groups[name].is_leader()]
            if len(led) == 1 and all(
                n.groups[name].leader_and_epoch.leader_id == led[0].node_id for n in running
            ):
                found[name.partition] = led[0]
        if len(found) == PARTITIONS:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"not every one of {PARTITIONS} partitions has a leader known to all")


def _bootstrap(nodes: list[RaftNode]) -> list[str]:
    return [str(n.config.listen) for n in nodes if n._started]


def _produce(bootstrap: list[str], sends: list[tuple[int, bytes]]) -> dict[int, list[int]]:
    """Send each (partition, value) with kafka-python, acks=all; the acknowledged offsets by
    partition."""
    producer = kafka_python_producer(bootstrap)
    try:
        assert producer.partitions_for(TOPIC) == set(range(PARTITIONS))
        futures = [(p, producer.send(TOPIC, value=v, partition=p)) for p, v in sends]
        producer.flush(30)
        offsets: dict[int, list[int]] = {}
        for p, f in futures:
            meta = f.get(timeout=30)
            assert meta.partition == p
            offsets.setdefault(p, []).append(meta.offset)
        return offsets
    finally:
        producer.close(5)


def _consume(bootstrap: list[str], partition: int, expected: int) -> list[bytes]:
    """The values of ``partition`` from its start, read with kafka-python (at least
    ``expected`` of them, or what came within 15 s)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        metadata_max_age_ms=1000,
    )
    try:
        tp = KafkaTopicPartition(TOPIC, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                values.extend(r.value for r in records)
        return values
    finally:
        consumer.close()


def _values(tag: str, count: int = 20) -> dict[int, list[bytes]]:
    return {p: [f"{tag}-p{p}-{n:03d}".encode() for n in range(count)] for p in range(PARTITIONS)}


async def _produce_all(nodes: list[RaftNode], values: dict[int, list[bytes]]) -> None:
    sends = [
        (p, v) for n in range(len(values[0])) for p, vs in values.items() for v in vs[n : n + 1]
    ]
    await asyncio.to_thread(_produce, _bootstrap(nodes), sends)


async def _read_back(nodes: list[RaftNode], expected: dict[int, list[bytes]]) -> None:
    for p, values in expected.items():
        got = await asyncio.to_thread(_consume, _bootstrap(nodes), p, len(values))
        assert got == values, f"partition {p}"


# ---- a cluster of three nodes, three partitions ----------------------------------------------


def test_every_partition_is_a_raft_group_of_its_own_in_its_own_directory(tmp_path, monkeypatch):
    """... and the groups' requests to a peer share its connection, where an answer is
    matched to its request by (peer, correlation id): the node draws every id from one
    source, so no two requests to a peer ever carry the same one."""
    sent: list[tuple[int, int, int]] = []  # (node, peer, correlation id) of each request
    encode = raft_wire.encode_request

    def spied(node, out, name=None):  # type: ignore[no-untyped-def]
        sent.append((node.config.node_id, out.destination, out.correlation_id))
        return encode(node, out, name)

    monkeypatch.setattr(raft_wire, "encode_request", spied)

    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            led = await leaders(nodes)
            await asyncio.sleep(0.3)  # the leaders' fetch traffic, too
            assert sorted(led) == list(range(PARTITIONS))
            for node in nodes:
                # and __consumer_offsets' partitions (tests/test_consumer_group_coordinator.py)
                assert [n for n in node.groups if n.topic == TOPIC] == _names()
                for name in _names():
                    group = node.groups[name]
                    assert group.directory == group_directory(
                        node.config.data_dir, TOPIC, name.partition
                    )
                    assert (group.directory / "quorum-state").is_file()
                    assert (group.directory / "log").is_dir()
            # partition 0 stays in the data directory itself, the others beside it
            assert nodes[0].groups[_names()[2]].directory == nodes[0].config.data_dir / "raftcore-2"
            assert len(sent) > 3 * PARTITIONS
            assert len(set(sent)) == len(sent), "a correlation id used twice towards a peer"

    run(go())


def test_records_produced_to_each_partition_are_read_back_from_that_partition_only_in_order(
    tmp_path,
):
    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            await leaders(nodes)
            values = _values("a")
            await _produce_all(nodes, values)
            await _read_back(nodes, values)
            # each group's log holds its own partition's records, and nothing of the others'
            for node in nodes:
                for name in _names():
                    log = node.groups[name].log
                    assert log is not None
                    held = [r.value for b in log.batches() if not b.is_control for r in b.records()]
                    assert all(v.startswith(f"a-p{name.partition}-".encode()) for v in held)

    run(go())


def test_a_partition_index_beyond_the_topic_is_unknown_topic_or_partition(tmp_path):
    from raftcore.client.connection import Connection
    from raftcore.protocol.api import request_spec

    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            await leaders(nodes)
            cls = request_spec(ApiKey.PRODUCE).cls
            batch = encode_batch([(b"k", b"v")])
            body = cls(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    cls.TopicProduceData(
                        name=TOPIC,
                        partition_data=[cls.PartitionProduceData(index=PARTITIONS, records=batch)],
                    )
                ],
            )
            listen = nodes[0].config.listen
            conn = await Connection.open(listen.host, listen.port)
            try:
                answer = await conn.request(ApiKey.PRODUCE, 9, body, timeout_s=5)
            finally:
                await conn.close()
            part = answer.responses[0].partition_responses[0]
            assert (part.index, part.error_code) == (PARTITIONS, Errors.UNKNOWN_TOPIC_OR_PARTITION)

    run(go())


def test_stopping_a_node_its_partitions_get_new_leaders_and_nothing_acknowledged_is_lost(
    tmp_path,
):
    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            led = await leaders(nodes)
            before = _values("b")
            await _produce_all(nodes, before)
            # the node leading the most partitions stops (gracefully: it resigns each)
            victim = max(nodes, key=lambda n: sum(1 for v in led.values() if v is n))
            moved = [p for p, n in led.items() if n is victim]
            await victim.stop(timeout_s=1.0)
            rest = [n for n in nodes if n is not victim]
            after = await leaders(rest)
            for p in moved:
                assert after[p] is not victim
            more = _values("c")
            await _produce_all(rest, more)
            await _read_back(rest, {p: before[p] + more[p] for p in before})

    run(go())


def test_a_restart_keeps_every_partitions_records(tmp_path):
    async def go() -> None:
        cfgs = configs(tmp_path, partitions=PARTITIONS)
        nodes = [RaftNode(cfg) for cfg in cfgs]
        values = _values("d")
        try:
            for n in nodes:
                await n.start()
            await leaders(nodes)
            await _produce_all(nodes, values)
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.5)
        nodes = [RaftNode(cfg) for cfg in cfgs]
        try:
            for n in nodes:
                await n.start()
            await leaders(nodes)
            await _read_back(nodes, values)
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.5)

    run(go())


# ---- the data directory ------------------------------------------------------------------------


def _formatted(tmp_path: Path, partitions: int = PARTITIONS):  # type: ignore[no-untyped-def]
    cfg = configs(tmp_path, partitions=partitions)[0]
    format_data_dir(
        cfg.data_dir,
        cluster_id=cfg.cluster_id,
        node_id=cfg.node_id,
        initial_voters=list(cfg.voters),
        partitions=partitions,
    )
    return cfg


def test_format_makes_every_partitions_directory_and_records_their_count(tmp_path):
    cfg = _formatted(tmp_path)
    assert "partitions=3" in (cfg.data_dir / "meta.properties").read_text().splitlines()
    for p in range(PARTITIONS):
        assert (group_directory(cfg.data_dir, TOPIC, p) / "quorum-state").is_file()
    assert (cfg.data_dir / "raftcore-1").is_dir() and (cfg.data_dir / "raftcore-2").is_dir()
    # a partition's directory is named after the topic: a name Kafka would refuse is refused
    with pytest.raises(RaftcoreError, match="a topic name is 1 to 249 of the letters"):
        format_data_dir(
            tmp_path / "other",
            cluster_id="c",
            node_id=1,
            initial_voters=[1],
            topic="../x",
            partitions=2,
        )
    assert not (tmp_path / "other").exists()


@pytest.mark.unformatted
def test_a_node_refuses_to_start_when_a_formatted_partitions_directory_is_missing(tmp_path):
    """A group that found nothing would start as an empty voter: two of them are a majority
    that elects a leader without the acknowledged records."""
    cfg = _formatted(tmp_path)
    shutil.rmtree(cfg.data_dir / "raftcore-2")
    node = RaftNode(cfg)
    with pytest.raises(RaftcoreError, match=r"raftcore-2/quorum-state of raftcore partition 2"):
        run(node.start())
    assert not (cfg.data_dir / "raftcore-2").exists()  # nothing made in its place
    assert not (cfg.data_dir / "log").exists()  # nor anything opened


@pytest.mark.unformatted
def test_a_node_refuses_to_start_with_another_partition_count_than_its_format(tmp_path):
    cfg = _formatted(tmp_path, partitions=1)
    node = RaftNode(dataclasses.replace(cfg, partitions=PARTITIONS))
    with pytest.raises(RaftcoreError, match=r"formatted with 1 partition\(s\).*--partitions 3"):
        run(node.start())
    assert not (cfg.data_dir / "raftcore-1").exists()


# ---- the wire: each group's messages name its partition -----------------------------------------


def _wire_node(tmp_path: Path):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from raftcore.node.peers import AddressBook

    cfg = configs(tmp_path, partitions=PARTITIONS)[0]
    return SimpleNamespace(config=cfg, address_book=AddressBook(cfg))


def test_a_groups_requests_and_answers_name_its_own_partition(tmp_path):
    node = _wire_node(tmp_path)
    name = TopicPartition(TOPIC, 2)
    vote = VoteRequest(node.config.cluster_id, 4, 1, 3, 17, voter_id=2)
    fetch = FetchRequest(node.config.cluster_id, 1, 17, 3, 4, 100, 1 << 20)
    for message in (vote, fetch):
        _, _, frame = raft_wire.encode_request(node, Outbound(2, 7, message, -1, True), name)
        header, body = decode_request(frame)
        named, _, back = raft_wire.decode_request(node, header, body)
        assert named == name
        assert back == message
    answer = VoteResponse(Errors.NONE, -1, 4, True)
    body = raft_wire.encode_response(node, Outbound(1, 7, answer), ApiKey.VOTE, 2, name)
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.VOTE, 2, 7, body))
    assert raft_wire.decode_response(node, ApiKey.VOTE, 2, frame, name) == answer
    # an answer naming another partition than its request's never reaches that group's core
    with pytest.raises(RaftcoreError, match="names partition 2"):
        raft_wire.decode_response(node, ApiKey.VOTE, 2, frame, TopicPartition(TOPIC, 1))


def test_each_group_has_its_own_request_in_flight_to_a_peer_and_gets_its_answer(tmp_path):
    """The rule "one request in flight per peer" is each core's: a newer request of another
    group to the same peer does not make the first one's answer go unheard."""
    import itertools
    from types import SimpleNamespace

    from raftcore.node.messaging import Messaging
    from raftcore.node.peers import AddressBook

    cfg = configs(tmp_path, partitions=PARTITIONS)[0]
    stepped: list[tuple[TopicPartition, int]] = []  # (group, correlation id) answers reached

    class Group:
        def __init__(self, name: TopicPartition) -> None:
            self.name = name
            core = SimpleNamespace(handle=lambda *a: None)
            self.running_core = lambda: core

        def run(self, step):  # type: ignore[no-untyped-def]
            stepped.append((self.name, len(stepped)))

    groups = {name: Group(name) for name in _names()}
    ids = itertools.count(1)
    messaging = Messaging(
        cfg,
        prefix="[node 1]",
        address_book=AddressBook(cfg),
        metrics=SimpleNamespace(peer_sent_bytes=0, peer_received_bytes=0),  # type: ignore[arg-type]
        kafka=None,  # type: ignore[arg-type]
        sasl=None,
        groups=groups,  # type: ignore[arg-type]
        admin_handle=lambda header, body: None,  # type: ignore[arg-type,return-value]
        correlation_ids=ids,
    )
    messaging.peers = SimpleNamespace(get=lambda peer: SimpleNamespace(send=lambda f: True))  # type: ignore[assignment]
    first, second = _names()[1], _names()[2]
    vote = VoteRequest(cfg.cluster_id, 4, 1, 3, 17, voter_id=2)
    messaging.send(first, Outbound(2, next(ids), vote, -1, True))  # correlation id 1
    messaging.send(second, Outbound(2, next(ids), vote, -1, True))  # 2, to the same peer
    for name, cid in ((first, 1), (second, 2)):
        answer = VoteResponse(Errors.NONE, -1, 4, True)
        body = raft_wire.encode_response(messaging, Outbound(1, cid, answer), ApiKey.VOTE, 2, name)
        frame = b"".join(bytes(p) for p in encode_response(ApiKey.VOTE, 2, cid, body))
        messaging._response_handler(2)(cid, frame)  # the peer answers each request
    assert [g for g, _ in stepped] == [first, second]


# ---- the command line ------------------------------------------------------------------------


def test_raftcore_format_partitions_and_a_node_missing_one_is_refused_in_one_line(tmp_path, capsys):
    from test_cli_node_startup import finish, node_argv, start_node

    from raftcore.cli import main
    from raftcore.node.local_cluster import free_ports

    data = tmp_path / "data"
    argv = ["format", f"--data-dir={data}", "--cluster-id=c", "--id=1", "--standalone"]
    assert main([*argv, f"--partitions={PARTITIONS}"]) == 0
    assert "3 partition(s) of raftcore" in capsys.readouterr().out
    shutil.rmtree(data / "raftcore-1")
    (port,) = free_ports(1)
    for given, says in (
        (PARTITIONS, f"{data / 'raftcore-1' / 'quorum-state'} of raftcore partition 1 is missing"),
        (2, "formatted with 3 partition(s), but the node is started with --partitions 2"),
    ):
        code, err = finish(start_node(node_argv(data, port, f"--partitions={given}"), tmp_path))
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1, err
        assert says in lines[0], err
    assert not (data / "raftcore-1").exists() and not (data / "log").exists()


def _idempotent_produce(bootstrap: list[str], sends: list[tuple[int, bytes]]) -> None:
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer(
        {"bootstrap.servers": ",".join(bootstrap), "enable.idempotence": True, "acks": "all"}
    )
    for p, v in sends:
        producer.produce(
            TOPIC, value=v, partition=p, on_delivery=lambda e, m: e and failed.append(str(e))
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed


def test_an_idempotent_librdkafka_producer_writes_each_partition_once_in_order(tmp_path):
    """One producer id, a sequence of its own in each partition (each group's producer
    state): every partition gets its records once, in order."""

    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            await leaders(nodes)
            values = _values("e", 50)
            sends = [(p, v) for n in range(50) for p, vs in values.items() for v in vs[n : n + 1]]
            await asyncio.to_thread(_idempotent_produce, _bootstrap(nodes), sends)
            await _read_back(nodes, values)

    run(go())


@pytest.mark.slow
def test_processes_a_killed_node_leaves_every_partition_led_and_its_restart_keeps_the_records(
    tmp_path,
):
    """``raftcore node --partitions 3`` processes (LocalCluster formats and starts them): one
    is SIGKILLed after acknowledged writes to every partition; the others lead every
    partition and take more; once it is restarted, every partition reads back all of its
    records, in order (asked through it)."""
    import signal

    from cluster_helpers import FAST

    from raftcore.node.local_cluster import LocalCluster

    local = LocalCluster(tmp_path / "cluster", 3, node_args=FAST, partitions=PARTITIONS)
    try:
        local.start()
        sends = [(p, v) for p, vs in _values("f").items() for v in vs]
        _produce(local.bootstrap, sends)
        local.kill(1, signal.SIGKILL)
        rest = [local.endpoint(2), local.endpoint(3)]
        more = _values("g")
        _produce(rest, [(p, v) for p, vs in more.items() for v in vs])
        local.start_node(1)
        first = _values("f")
        for p in range(PARTITIONS):
            assert _consume([local.endpoint(1)], p, 40) == first[p] + more[p], f"partition {p}"
        assert (local.data_dir(1) / "raftcore-2" / "log").is_dir()
    finally:
        local.close()


def test_describe_quorum_watch_of_a_partition_the_topic_lacks_ends_at_once(tmp_path):
    """Asking again will not make the partition: the watch ends at its first answer
    (UnknownTopicError; ``run_watch`` prints it and exits 1) instead of printing it forever."""
    import io

    from raftcore.cli.quorum_watch import watch_quorum
    from raftcore.client.cluster import UnknownTopicError

    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            await leaders(nodes)
            out = io.StringIO()
            with pytest.raises(UnknownTopicError, match=f"partition {PARTITIONS}"):
                await asyncio.wait_for(
                    watch_quorum(_bootstrap(nodes), out, partition=PARTITIONS, interval_s=0.1),
                    10,
                )
            assert out.getvalue() == ""

    run(go())
