"""Protocol-aware recovery on real node processes: a byte flipped on disk inside a committed
record's value, in a sealed segment of one replica, is found (by the scrubber, or on the way out
to a consumer), never served, and written again in place from a peer's intact copy -- on the
leader, on a follower, and on a node that was stopped when the byte flipped. A librdkafka
consumer (``check.crcs`` off, its default) reading from the damaged node gets only the values
the acks=all writer was acknowledged, and no parse error. Every process started is ended by
its pid (LocalCluster.close)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import pytest
from cluster_helpers import (
    FAST,
    a_leader,
    key,
    quorum,
    run,
    running_cluster,
    wait_caught_up,
    wait_for,
)

from raftcore.client import Producer
from raftcore.errors import CorruptRecordError
from raftcore.node.local_cluster import LocalCluster
from raftcore.records import scan_batches, sound_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

TOPIC = "raftcore"
RECORDS, PER_BATCH = 3000, 100  # about 330 KB of batches: five or more sealed segments
SMALL_SEGMENTS = ["--segment-bytes", str(64 * 1024)]
SCRUB_OFTEN = ["--log-scrub-bytes-per-second", str(1 << 30), "--log-scrub-interval-ms", "200"]
SCRUB_OFF = ["--log-scrub-bytes-per-second", "0"]


def value(n: int) -> bytes:
    return b"value-%08d-" % n + b"x" * 80


@pytest.fixture
def start_cluster(tmp_path):
    """``start_cluster(*node_args)``: a 3-node cluster with small segments, a leader elected."""
    with contextlib.ExitStack() as started:

        def start(*args: str) -> LocalCluster:
            node_args = [*FAST, *SMALL_SEGMENTS, *args]
            return started.enter_context(
                running_cluster(tmp_path / "cluster", 3, node_args=node_args, ready=a_leader)
            )

        yield start


def write(cluster: LocalCluster) -> dict[int, bytes]:
    """Write RECORDS records, one batch per send, acks=all; offset -> value acknowledged.
    Returns once every replica holds them (acks=all waits for a majority only)."""

    async def go() -> dict[int, bytes]:
        acked: dict[int, bytes] = {}
        async with Producer(cluster.bootstrap, request_timeout_ms=5000) as producer:
            for start in range(0, RECORDS, PER_BATCH):
                ns = range(start, start + PER_BATCH)
                first, last = await producer.send([(key(n), value(n)) for n in ns])
                acked.update(zip(range(first, last + 1), (value(n) for n in ns), strict=True))
        return acked

    acked = run(go())
    run(wait_caught_up(cluster, cluster.node_ids))
    return acked


def segment_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "log").glob("*.log"))


def batch_holding(data_dir: Path, offset: int) -> bytes | None:
    """The bytes of the batch holding ``offset`` in a node's log, as the disk holds them now
    (the node may be running: the files are only read)."""
    for path in segment_files(data_dir):
        data = path.read_bytes()
        scan = scan_batches(data, check_crc=False)  # headers only: a damaged batch is read too
        for k in range(scan.count):
            if int(scan.base_offsets[k]) <= offset <= int(scan.last_offsets[k]):
                position = int(scan.positions[k])
                return data[position : position + int(scan.sizes[k])]
    return None


def sound(batch: bytes | None) -> bool:
    try:
        return batch is not None and sound_batch(batch) is not None
    except CorruptRecordError:
        return False


def flip_a_value(data_dir: Path, acked: dict[int, bytes]) -> int:
    """Flip one byte inside a record's value, under its batch's CRC, in the middle of the
    second (sealed) segment of a node's log; that record's offset."""
    files = segment_files(data_dir)
    assert len(files) >= 3, f"want sealed segments, found {[f.name for f in files]}"
    data = files[1].read_bytes()
    found = [(offset, at) for offset, v in acked.items() if (at := data.find(v)) >= 0]
    assert found, f"no acknowledged value in {files[1]}"
    offset, at = found[len(found) // 2]
    position = at + 20  # inside the value's padding
    flipped = bytes([data[position] ^ 0x01])
    batch = batch_holding(data_dir, offset)
    assert batch is not None and sound(batch)
    start = data.find(batch)  # the same batch with the byte flipped no longer checks out
    assert not sound(batch[: position - start] + flipped + batch[position - start + 1 :])
    with open(files[1], "r+b") as f:
        f.seek(position)
        f.write(flipped)
        f.flush()
        os.fsync(f.fileno())
    return offset


def wait_repaired(cluster: LocalCluster, victim: int, offset: int, timeout_s: float = 20) -> None:
    """Until the victim's batch holding ``offset`` is, byte for byte, every other replica's,
    and its log says it repaired it (the line follows the write)."""
    peers = [i for i in cluster.node_ids if i != victim]

    def repaired() -> bool:
        ours = batch_holding(cluster.data_dir(victim), offset)
        said = "repaired the damaged batch" in cluster.log_tail(victim, 400)
        return (
            said
            and sound(ours)
            and all(batch_holding(cluster.data_dir(p), offset) == ours for p in peers)
        )

    try:
        wait_for(repaired, timeout_s, f"node {victim}'s batch at {offset} to be repaired")
    except Exception:
        print(cluster.log_tail(victim, 40))
        raise
    for p in peers:  # the peers' copies were sound throughout
        assert sound(batch_holding(cluster.data_dir(p), offset))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def ck_read(bootstrap: str, count: int, timeout_s: float = 30) -> tuple[list, list[str]]:
    """(every (offset, value) delivered, librdkafka's log lines and errors) of a confluent-kafka
    consumer reading the partition from the start until ``count`` offsets came (``check.crcs``
    off: it takes what it is served)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    log = logging.getLogger(f"librdkafka.damage.{bootstrap}")
    log.propagate = False
    collect = _Collect()
    log.addHandler(collect)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "raftcore-damage",  # required; no group is joined (assign)
            "enable.auto.commit": False,
            "check.crcs": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "logger": log,
        }
    )
    delivered: list[tuple[int, bytes]] = []
    offsets: set[int] = set()
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while len(offsets) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                collect.lines.append(f"error: {msg.error()}")
                continue
            delivered.append((msg.offset(), msg.value()))
            offsets.add(msg.offset())
    finally:
        consumer.close()
        log.removeHandler(collect)
    return delivered, collect.lines


def parse_errors(lines: list[str]) -> list[str]:
    words = ("PROTOERR", "MessageSetSize", "parse", "BAD_MSG", "CRC", "corrupt")
    return [line for line in lines if any(w.lower() in line.lower() for w in words)]


def assert_read_as_acknowledged(cluster: LocalCluster, acked: dict[int, bytes], via: str) -> None:
    delivered, lines = ck_read(via, len(acked))
    assert not parse_errors(lines), parse_errors(lines)[:3]
    wrong = [(o, v) for o, v in delivered if acked.get(o) != v]  # a repeat is no harm
    assert not wrong, f"{len(wrong)} records not as acknowledged, e.g. {wrong[0]}"
    assert {o for o, _ in delivered} == set(acked)


def leader_and_followers(cluster: LocalCluster) -> tuple[int, list[int]]:
    leader = run(quorum(cluster)).leader_id
    return leader, [i for i in cluster.node_ids if i != leader]


def test_a_byte_flipped_on_the_running_leader_is_never_served_and_is_repaired_from_a_peer(
    start_cluster,
):
    cluster = start_cluster(*SCRUB_OFTEN)
    acked = write(cluster)
    leader, _ = leader_and_followers(cluster)
    offset = flip_a_value(cluster.data_dir(leader), acked)
    # read at once, from the damaged leader, while the scrubber and the handover run
    assert_read_as_acknowledged(cluster, acked, cluster.endpoint(leader))
    wait_repaired(cluster, leader, offset)
    log = cluster.log_tail(leader, 400)
    assert "damaged batch at offset" in log and "found scrubbing" in log
    assert_read_as_acknowledged(cluster, acked, ",".join(cluster.bootstrap))


def test_a_byte_flipped_on_a_running_follower_is_repaired_from_the_leaders_copy(start_cluster):
    cluster = start_cluster(*SCRUB_OFTEN)
    acked = write(cluster)
    _, followers = leader_and_followers(cluster)
    offset = flip_a_value(cluster.data_dir(followers[0]), acked)
    wait_repaired(cluster, followers[0], offset)
    log = cluster.log_tail(followers[0], 400)
    assert "found scrubbing" in log
    assert_read_as_acknowledged(cluster, acked, ",".join(cluster.bootstrap))


def test_a_byte_flipped_while_a_node_was_stopped_is_repaired_after_it_starts(start_cluster):
    cluster = start_cluster(*SCRUB_OFTEN)
    acked = write(cluster)
    leader, _ = leader_and_followers(cluster)
    assert cluster.stop(leader) == 0
    offset = flip_a_value(cluster.data_dir(leader), acked)
    cluster.start_node(leader)
    wait_repaired(cluster, leader, offset)
    assert cluster.alive(leader)  # it did not crash on its damaged log
    log = cluster.log_tail(leader, 400)
    assert "Traceback" not in log and "found scrubbing" in log
    assert_read_as_acknowledged(cluster, acked, ",".join(cluster.bootstrap))


def test_a_librdkafka_consumer_reading_a_damaged_leader_gets_only_acknowledged_values(
    start_cluster,
):
    """No scrubber: the damage is first met serving the consumer. The consumer gets the sound
    batches before it, then (the damaged range unserved: KAFKA_STORAGE_ERROR, then a handover)
    the intact copy from the new leader -- never the flipped byte, and no parse error."""
    cluster = start_cluster(*SCRUB_OFF)
    acked = write(cluster)
    leader, _ = leader_and_followers(cluster)
    offset = flip_a_value(cluster.data_dir(leader), acked)
    assert_read_as_acknowledged(cluster, acked, cluster.endpoint(leader))
    log = cluster.log_tail(leader, 400)
    assert "found serving a consumer" in log
    wait_repaired(cluster, leader, offset)  # as a follower, once it handed over
