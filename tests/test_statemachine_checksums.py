"""The LMDB state machine's checksummed values (raftcore.statemachine.checksums): a value
damaged on disk is found when it is read or written into a snapshot, is never served nor
copied, marks the state machine damaged until a restore, and is named in one log line; a
store written before values carried checksums is sealed in place when opened, once."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statemachine_helpers import committed

from raftcore._native.crc32c import crc32c, open_pairs, open_value, seal_pairs, seal_value
from raftcore.records import decode_kv_pairs, encode_batch
from raftcore.statemachine import LmdbStateMachine, MemorySnapshotReader, MemorySnapshotWriter
from raftcore.statemachine.checksums import DamagedValueError

pytestmark = pytest.mark.timeout(60)


def flip_in_file(path: Path, needle: bytes, at: int = 3) -> None:
    """Flip one bit of the byte ``at`` into every copy of ``needle`` in ``path`` (LMDB's
    copy-on-write may leave an old copy in a free page besides the live one)."""
    data = path.read_bytes()
    assert needle in data, f"{needle!r} is not in {path}"
    with open(path, "r+b") as f:
        start = 0
        while (found := data.find(needle, start)) >= 0:
            f.seek(found + at)
            f.write(bytes([data[found + at] ^ 0x04]))
            start = found + 1


def filled(path: Path, n: int = 20) -> LmdbStateMachine:
    sm = LmdbStateMachine(path, map_size=64 << 20)
    sm.apply([committed([(b"key-%03d" % i, b"value-%03d-abcdefgh" % i) for i in range(n)], 0)])
    return sm


# ---- the encoding, against a naive reference ---------------------------------------------------


def naive_seal(key: bytes, value: bytes) -> bytes:
    return crc32c(key + value).to_bytes(4, "big") + value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.none() | st.binary(max_size=80))))
def test_sealing_a_batch_natively_matches_the_naive_crc_of_key_and_value(pairs):
    sealed = seal_pairs(pairs)
    assert sealed == [(k, None if v is None else naive_seal(k, v)) for k, v in pairs]
    live = [(k, s) for k, s in sealed if s is not None]
    assert open_pairs(live) == ([(k, v) for k, v in pairs if v is not None], -1)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=30), st.binary(max_size=60), st.data())
def test_any_flipped_bit_of_a_sealed_value_or_its_key_is_found(key, value, data):
    sealed = seal_value(key, value)
    assert open_value(key, sealed) == value
    bit = data.draw(st.integers(0, len(sealed) * 8 - 1))
    damaged = bytearray(sealed)
    damaged[bit // 8] ^= 1 << (bit % 8)
    assert open_value(key, bytes(damaged)) is None
    other = bytearray(key)
    other[0] ^= 0x01
    assert open_value(bytes(other), sealed) is None
    assert open_pairs([(key, sealed), (key, bytes(damaged))]) == ([(key, value)], 1)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=20) | st.none(), st.none() | st.binary(max_size=80)),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(["none", "gzip", "zstd"]),
)
def test_the_batch_decoder_seals_values_as_seal_pairs_does(pairs, compression):
    """The apply path's sealing (in the one copy the decoder makes) equals the reference's,
    for every record the key rule keeps, compressed batches too."""
    data = encode_batch(pairs, base_offset=10, leader_epoch=1, compression=compression)
    plain = decode_kv_pairs(data)
    sealed = decode_kv_pairs(data, seal=True)
    assert sealed.pairs == seal_pairs(plain.pairs)
    assert (sealed.skipped, sealed.deletes, sealed.records) == (
        plain.skipped,
        plain.deletes,
        plain.records,
    )


def test_a_stored_value_too_short_to_hold_a_checksum_is_damaged():
    assert open_value(b"k", b"abc") is None
    assert open_value(b"k", seal_value(b"k", b"")) == b""


# ---- the state machine ---------------------------------------------------------------------------


def test_a_value_flipped_on_disk_is_never_served_and_the_state_machine_is_marked_damaged(
    tmp_path, caplog
):
    """The read that finds it raises DamagedValueError naming the key; so does every read
    after it, of any key, until a restore; the owner is told once; one ERROR line without
    an owner."""
    sm = filled(tmp_path)
    told: list[DamagedValueError] = []
    assert sm.get(b"key-007") == b"value-007-abcdefgh"
    flip_in_file(tmp_path / "data.mdb", b"value-007-abcdefgh")
    with caplog.at_level("ERROR", logger="raftcore.statemachine.lmdb_kv"):
        with pytest.raises(DamagedValueError, match="key-007") as found:
            sm.get(b"key-007")
        assert found.value.key == b"key-007"
        assert sm.damaged is not None
        with pytest.raises(DamagedValueError):
            sm.get(b"key-001")  # intact, but the state can no longer be trusted
        with pytest.raises(DamagedValueError):
            sm.items()
    lines = [r for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and "key-007" in lines[0].getMessage()
    sm.close()

    sm = filled(tmp_path / "other")
    sm.on_damaged = told.append
    flip_in_file(tmp_path / "other" / "data.mdb", b"value-011-abcdefgh")
    with pytest.raises(DamagedValueError):
        sm.items()
    with pytest.raises(DamagedValueError):
        sm.get(b"key-011")
    assert [e.key for e in told] == [b"key-011"]
    sm.close()


def test_a_damaged_value_is_never_copied_into_a_snapshot(tmp_path):
    sm = filled(tmp_path)
    flip_in_file(tmp_path / "data.mdb", b"value-019-abcdefgh", at=0)
    writer = MemorySnapshotWriter()
    with pytest.raises(DamagedValueError, match="key-019"):
        sm.snapshot(writer)
    copied = [pair for chunk in writer.chunks for pair in chunk]
    assert all(v.startswith(b"value-") and v.endswith(b"-abcdefgh") for _, v in copied)
    assert not any(k == b"key-019" for k, _ in copied)
    with pytest.raises(DamagedValueError):  # marked: no later snapshot either
        sm.snapshot(MemorySnapshotWriter())
    sm.close()


def test_a_restore_replaces_the_damaged_state_and_clears_the_mark(tmp_path):
    sm = filled(tmp_path)
    writer = MemorySnapshotWriter()
    sm.snapshot(writer)
    intact = sm.items()
    flip_in_file(tmp_path / "data.mdb", b"value-004-abcdefgh")
    with pytest.raises(DamagedValueError):
        sm.get(b"key-004")
    sm.restore(MemorySnapshotReader(writer.chunks, writer.end_offset))
    assert sm.damaged is None
    assert sm.items() == intact and sm.get(b"key-004") == b"value-004-abcdefgh"
    sm.close()


def test_a_store_without_checksums_is_sealed_in_place_once_when_opened(tmp_path, caplog):
    """Format raftcore-kv-1 (plain values) becomes raftcore-kv-2 (sealed values) in one write
    transaction at open; the values and the applied offset are kept, and a second open
    finds nothing to do."""
    env = lmdb.open(str(tmp_path), max_dbs=2, map_size=64 << 20)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    pairs = [(b"k%05d" % i, b"plain-%d" % i) for i in range(10_000)]
    with env.begin(write=True) as txn:
        txn.put(b"format", b"raftcore-kv-1", db=meta)
        txn.put(b"applied_offset", (12_345).to_bytes(8, "big"), db=meta)
        txn.cursor(data).putmulti(pairs)
    env.close()
    with caplog.at_level("INFO", logger="raftcore.statemachine.lmdb_kv"):
        with LmdbStateMachine(tmp_path, map_size=64 << 20) as sm:
            assert sm.applied_offset == 12_345
            assert sm.items() == pairs
        with LmdbStateMachine(tmp_path, map_size=64 << 20) as sm:
            assert sm.get(b"k00042") == b"plain-42"
    lines = [r.getMessage() for r in caplog.records if "sealed" in r.getMessage()]
    assert len(lines) == 1 and "10000 values" in lines[0]
    env = lmdb.open(str(tmp_path), max_dbs=2, map_size=64 << 20)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    with env.begin() as txn:
        assert txn.get(b"format", db=meta) == b"raftcore-kv-2"
        stored = txn.get(b"k00042", db=data)
    env.close()
    assert stored == seal_value(b"k00042", b"plain-42")


def test_damage_a_reader_met_in_a_state_since_restored_is_not_reported_again(tmp_path, monkeypatch):
    """A snapshot reads from one transaction: when the damage it meets was already reported
    (by a read) and the state restored since, the report is stale, and the owner is not told
    twice (the node would start a second, redundant rebuild). The snapshot is still refused."""
    import threading

    from raftcore.statemachine import lmdb_kv

    monkeypatch.setattr(lmdb_kv, "SNAPSHOT_CHUNK_PAIRS", 4)
    sm = filled(tmp_path)
    intact = MemorySnapshotWriter()
    sm.snapshot(intact)
    told: list[DamagedValueError] = []
    sm.on_damaged = told.append
    flip_in_file(tmp_path / "data.mdb", b"value-019-abcdefgh")

    class Meanwhile(MemorySnapshotWriter):
        """At the snapshot's first chunk, on other threads: a read meets the damage, then
        the rebuild restores the intact state."""

        def append(self, chunk):  # type: ignore[no-untyped-def]
            if not self.chunks:

                def read_then_restore() -> None:
                    with pytest.raises(DamagedValueError):
                        sm.get(b"key-019")
                    sm.restore(MemorySnapshotReader(intact.chunks, intact.end_offset))

                other = threading.Thread(target=read_then_restore)
                other.start()
                other.join(10)
            super().append(chunk)

    with pytest.raises(DamagedValueError, match="key-019"):
        sm.snapshot(Meanwhile())
    assert [e.key for e in told] == [b"key-019"]  # the read's report only
    assert sm.damaged is None and sm.get(b"key-019") == b"value-019-abcdefgh"
    sm.close()
