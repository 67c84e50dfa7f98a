"""Producer-state files (``<offset>.snapshot``): the format keeps all remembered batches of
every producer (sixteen: version 2; version 1 files, five at most, are still read and still
written when they suffice), and a damaged file is an error naming it -- never a crash, never
wrong state."""

from __future__ import annotations

import struct

import pytest

from raftcore._native.crc32c import crc32c
from raftcore.errors import CorruptProducerStateError
from raftcore.kafka.producer_state import REMEMBERED_BATCHES, Duplicate, ProducerStateManager
from raftcore.log.producer_snapshots import (
    PRODUCER_SNAPSHOT_VERSION,
    decode_producer_snapshot,
    encode_producer_snapshot,
    producer_snapshot_offsets,
    producer_snapshot_path,
    read_producer_snapshot,
    write_producer_snapshot,
)


def seven_batches_each(pids=(3, 1 << 40, 77), rounds: int = 7) -> ProducerStateManager:
    """Producers that each appended ``rounds`` batches of three records."""
    m = ProducerStateManager()
    offset = 0
    for round_ in range(rounds):
        for pid in pids:
            m.record(pid, 2, round_ * 3, 3, first_offset=offset, last_offset=offset + 2)
            offset += 3
    return m


def test_a_file_round_trips_all_sixteen_remembered_batches_of_every_producer(tmp_path):
    rounds = REMEMBERED_BATCHES + 2
    m = seven_batches_each(rounds=rounds)
    path = write_producer_snapshot(tmp_path, 9 * rounds, m.entries())
    assert path.name == f"{9 * rounds:020d}.snapshot"
    assert producer_snapshot_offsets(tmp_path) == [9 * rounds]
    assert path.read_bytes()[:2] == struct.pack(">h", 2)  # more than five: version 2
    restored = ProducerStateManager()
    restored.restore(read_producer_snapshot(tmp_path, 9 * rounds))
    assert restored.entries() == m.entries()
    assert REMEMBERED_BATCHES == 16
    assert [len(e.batches) for e in restored.entries()] == [16, 16, 16]
    # Every one of the sixteen is a duplicate, with its first offsets; the seventeenth-last
    # is gone.
    for round_ in range(2, rounds):
        verdict = restored.check(77, 2, round_ * 3, 3)
        assert verdict == Duplicate(round_ * 9 + 6, round_ * 9 + 8)
    assert not isinstance(restored.check(77, 2, 3, 3), Duplicate)


def test_a_file_of_at_most_five_batches_per_producer_stays_version_1_and_is_read(tmp_path):
    """The previous release reads version 1 only: files it can read are still written so."""
    m = ProducerStateManager()
    for n in range(5):
        m.record(8, 0, n, 1, first_offset=n, last_offset=n)
    data = encode_producer_snapshot(m.entries())
    assert data[:2] == struct.pack(">h", 1)
    assert decode_producer_snapshot(data) == m.entries()
    m.record(8, 0, 5, 1, first_offset=5, last_offset=5)
    assert encode_producer_snapshot(m.entries())[:2] == struct.pack(">h", 2)


def test_the_layout_is_version_crc32c_count_then_producers():
    m = ProducerStateManager()
    m.record(5, 1, 0, 2, first_offset=10, last_offset=11)
    data = encode_producer_snapshot(m.entries())
    body = struct.pack(">iqhb", 1, 5, 1, 1) + struct.pack(">iiqq", 0, 1, 10, 11)
    assert data == struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(body)) + body


def _with_crc(body: bytes) -> bytes:
    """A file whose CRC is right, so the reader must catch the damage by its lengths."""
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(body)) + body


def _version_2(body: bytes) -> bytes:
    return struct.pack(">hI", 2, crc32c(body)) + body


def _damaged_files() -> dict[str, bytes]:
    good = encode_producer_snapshot(seven_batches_each(rounds=5).entries())
    body = good[6:]
    entry = struct.pack(">qhb", 9, 0, 1) + struct.pack(">iiqq", 0, 0, 0, 0)
    files = {
        "empty": b"",
        "header only": good[:6],
        "version 0": struct.pack(">h", 0) + good[2:],
        "count too large": _with_crc(struct.pack(">i", 4) + entry),
        "negative count": _with_crc(struct.pack(">i", -1) + entry),
        "six batches": _with_crc(struct.pack(">i", 1) + entry[:10] + b"\x06" + entry[11:]),
        "version 2, seventeen batches": _version_2(
            struct.pack(">i", 1) + entry[:10] + b"\x11" + entry[11:]
        ),
        "version 3": struct.pack(">h", 3) + good[2:],
        "batches cut off": _with_crc(struct.pack(">i", 1) + entry[:-1]),
        "a byte after the end": _with_crc(struct.pack(">i", 1) + entry + b"\x00"),
        "negative producer id": _with_crc(struct.pack(">i", 1) + b"\xff" * 8 + entry[8:]),
        "last offset before first": _with_crc(
            struct.pack(">i", 1) + entry[:11] + struct.pack(">iiqq", 0, 0, 5, 4)
        ),
    }
    for cut in range(1, len(body), 7):
        files[f"cut at {6 + cut}"] = good[: 6 + cut]
    for at in range(0, len(good), 5):
        for bit in (0, 7):
            flipped = bytearray(good)
            flipped[at] ^= 1 << bit
            files[f"bit {bit} of byte {at} flipped"] = bytes(flipped)
    return files


@pytest.mark.parametrize(("what", "data"), list(_damaged_files().items()))
def test_a_damaged_file_raises_corrupt_producer_state_naming_it(what, data):
    with pytest.raises(CorruptProducerStateError, match="the-file"):
        decode_producer_snapshot(data, "the-file")


def test_only_twenty_digit_names_are_producer_state_files(tmp_path):
    write_producer_snapshot(tmp_path, 4096, [])
    (tmp_path / "4096.snapshot").write_bytes(b"")
    (tmp_path / "00000000000000004096-0000000003.checkpoint").write_bytes(b"")
    assert producer_snapshot_offsets(tmp_path) == [4096]
    assert producer_snapshot_path(tmp_path, 4096).read_bytes() == encode_producer_snapshot([])
