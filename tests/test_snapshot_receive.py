"""Receiving a snapshot from the leader in FetchSnapshot chunks: unaligned slices appended at
their position, resumable after a lost connection, verified whole before the rename (Kafka
freezes a download unchecked; NEXT-WAVE 1.1)."""

from __future__ import annotations

import os
import random

import pytest
from snapshot_helpers import SID, write_snapshot

from raftcore.errors import (
    CorruptSnapshotError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotPositionError,
)
from raftcore.snapshot import SnapshotId, SnapshotStore


@pytest.fixture
def leader(tmp_path):
    store = SnapshotStore(tmp_path / "leader")
    recs = write_snapshot(store, SID, n=4000)
    reader = store.open(SID)
    yield reader, recs
    reader.close()


@pytest.fixture
def follower(tmp_path):
    return SnapshotStore(tmp_path / "follower")


def fetch(reader, receiver, max_bytes, *, stop_at=None):
    """What the follower's FetchSnapshot loop does: ask from receiver.position, append."""
    while not receiver.complete:
        if stop_at is not None and receiver.position >= stop_at:
            return
        chunk = reader.slice(receiver.position, max_bytes)
        receiver.append(receiver.position, chunk, size=reader.size)


def test_a_snapshot_received_in_chunks_is_the_leaders_byte_for_byte(leader, follower):
    reader, recs = leader
    receiver = follower.receive(SID, source=1)
    assert receiver.position == 0 and receiver.size is None
    rng = random.Random(7)
    while not receiver.complete:
        chunk = reader.slice(receiver.position, rng.randint(1, 50_000))
        receiver.append(receiver.position, chunk, size=reader.size)
    summary = receiver.freeze()
    assert follower.ids() == [SID] and follower.receiving() == []
    assert follower.path_of(SID).read_bytes() == reader.path.read_bytes()
    assert summary == reader.summary
    with follower.open(SID) as mine:
        assert [(r.key, r.value) for r in mine.records()] == recs
    assert os.listdir(follower.directory) == [SID.file_name]


def test_a_lost_connection_resumes_at_the_bytes_already_received(leader, follower):
    reader, _ = leader
    receiver = follower.receive(SID, source=1)
    fetch(reader, receiver, 10_000, stop_at=150_000)
    received = receiver.position
    assert 150_000 <= received < reader.size
    # The connection drops; later the follower is told again to fetch this snapshot.
    resumed = follower.receive(SID, source=1)
    assert resumed is receiver and resumed.position == received
    fetch(reader, resumed, 64_000)
    resumed.freeze()
    assert follower.path_of(SID).read_bytes() == reader.path.read_bytes()


def test_a_download_from_another_leader_starts_over(leader, follower):
    """Another leader's file of the same id may differ (compression, timestamps): its bytes
    must not continue the first leader's."""
    reader, _ = leader
    first = follower.receive(SID, source=1)
    fetch(reader, first, 10_000, stop_at=50_000)
    second = follower.receive(SID, source=2)
    assert second is not first and second.position == 0 and not first.active
    assert len(os.listdir(follower.directory)) == 1  # the first .part is gone
    fetch(reader, second, 100_000)
    second.freeze()
    assert follower.ids() == [SID]


def test_a_chunk_that_does_not_start_where_the_last_ended_is_refused(leader, follower):
    reader, _ = leader
    receiver = follower.receive(SID)
    receiver.append(0, reader.slice(0, 1000), size=reader.size)
    for position in (0, 999, 1001):
        with pytest.raises(SnapshotPositionError, match="expected 1000"):
            receiver.append(position, reader.slice(position, 10), size=reader.size)
    with pytest.raises(SnapshotPositionError, match="the size is"):
        receiver.append(1000, reader.slice(1000, 10), size=reader.size + 1)
    with pytest.raises(SnapshotPositionError, match="runs past"):
        receiver.append(1000, b"x" * reader.size, size=reader.size)
    assert receiver.position == 1000 and receiver.active


def test_an_incomplete_download_is_not_frozen_and_keeps_its_bytes(leader, follower):
    reader, _ = leader
    receiver = follower.receive(SID, source=1)
    fetch(reader, receiver, 10_000, stop_at=30_000)
    with pytest.raises(SnapshotPositionError, match="only 30000 of"):
        receiver.freeze()
    assert receiver.active and receiver.position == 30_000 and follower.ids() == []


def test_a_corrupt_download_is_never_renamed_and_is_fetched_again(leader, follower):
    reader, recs = leader
    receiver = follower.receive(SID, source=1)
    data = bytearray(reader.path.read_bytes())
    data[len(data) // 2] ^= 0x08  # damaged on the way, under a transport that did not notice
    for position in range(0, len(data), 30_000):
        receiver.append(position, data[position : position + 30_000], size=len(data))
    with pytest.raises(CorruptSnapshotError, match="CRC") as info:
        receiver.freeze()
    assert info.value.path.endswith(".checkpoint.part")
    assert os.listdir(follower.directory) == [] and follower.ids() == []
    assert not receiver.active and follower.receiving() == []
    again = follower.receive(SID, source=1)
    assert again.position == 0
    fetch(reader, again, 1 << 20)
    again.freeze()
    with follower.open(SID) as mine:
        assert [(r.key, r.value) for r in mine.records()] == recs


def test_a_download_of_a_different_snapshot_under_the_id_is_refused(tmp_path, follower):
    """A leader serving a file whose batches carry another epoch than the id it names."""
    other = SnapshotStore(tmp_path / "other")
    wrong = SnapshotId(SID.end_offset, SID.epoch + 1)
    write_snapshot(other, wrong, n=10)
    data = other.path_of(wrong).read_bytes()
    receiver = follower.receive(SID)
    receiver.append(0, data, size=len(data))
    with pytest.raises(CorruptSnapshotError, match="epoch"):
        receiver.freeze()
    assert follower.ids() == []


def test_a_snapshot_already_stored_is_not_received_again(leader, follower):
    reader, _ = leader
    receiver = follower.receive(SID)
    fetch(reader, receiver, 1 << 20)
    receiver.freeze()
    with pytest.raises(SnapshotExistsError):
        follower.receive(SID)
    with pytest.raises(SnapshotError, match="frozen receiver"):
        receiver.append(0, b"x", size=1)


def test_part_files_of_downloads_are_removed_at_start_and_by_close(leader, follower, tmp_path):
    reader, _ = leader
    receiver = follower.receive(SID, source=1)
    fetch(reader, receiver, 10_000, stop_at=20_000)
    assert len(os.listdir(follower.directory)) == 1
    assert SnapshotStore(follower.directory).ids() == []  # a restart: .part files go
    assert os.listdir(follower.directory) == []
    other = follower.receive(SnapshotId(999, 9))
    other.append(0, b"abc", size=10)
    follower.close()
    assert os.listdir(follower.directory) == [] and follower.receiving() == []


def test_a_download_can_be_sent_with_sendfile_over_a_socket(leader, follower):
    import socket

    reader, _ = leader
    receiver = follower.receive(SID)
    a, b = socket.socketpair()
    with a, b:
        while not receiver.complete:
            offset, length = reader.slice_range(receiver.position, 32_768)
            sent = os.sendfile(a.fileno(), reader.fileno(), offset, length)
            got = bytearray()
            while len(got) < sent:
                got += b.recv(sent - len(got))
            receiver.append(offset, got, size=reader.size)
    receiver.freeze()
    assert follower.path_of(SID).read_bytes() == reader.path.read_bytes()
