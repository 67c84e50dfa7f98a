"""The key/value fast path (``raftcore.records.decode_kv_pairs``): the same pairs as the Record
path for every batch, the key rule applied the same way on every replica, and a corrupt byte
an error, never a crash or a wrong answer."""

from __future__ import annotations

import pytest
from crafted_batches import batch, record, refresh_crc
from hypothesis import given, settings
from hypothesis import strategies as st
from record_strategies import build_batch, compressions, example_count, record_lists

from raftcore.errors import CorruptRecordError
from raftcore.records import decode_kv_pairs, encode_batch, encode_control_batch, iter_batches


def reference_pairs(data: bytes, from_offset: int = 0, max_key_size: int = 511):
    """The naive answer, from Record objects."""
    pairs, skipped = [], []
    for b in iter_batches(data):
        for r in b.records():
            if r.offset < from_offset:
                continue
            if r.key is None or not 1 <= len(r.key) <= max_key_size:
                skipped.append(r.offset)
            else:
                pairs.append((r.key, r.value))
    return pairs, skipped


@pytest.mark.slow
@settings(max_examples=example_count(300), deadline=None)
@given(
    recs=record_lists,
    compression=compressions,
    base=st.integers(0, 2**40),
    cut=st.integers(0, 9),
    max_key_size=st.sampled_from([1, 16, 511]),
)
def test_the_pairs_are_those_of_the_record_path(recs, compression, base, cut, max_key_size):
    data = build_batch(recs, compression=compression, base_offset=base)
    got = decode_kv_pairs(data, base + cut, max_key_size)
    pairs, skipped = reference_pairs(data, base + cut, max_key_size)
    assert got.pairs == pairs
    assert [offset for offset, _ in got.skipped] == skipped
    assert got.deletes == sum(v is None for _, v in pairs)
    assert got.records == len(pairs) + len(skipped)
    assert (got.base_offset, got.last_offset) == (base, base + len(recs) - 1)


def test_a_null_value_is_a_delete_and_a_bad_key_is_skipped_with_its_offset_and_reason():
    data = encode_batch(
        [(b"a", b"1"), (None, b"2"), (b"", b"3"), (b"x" * 512, b"4"), (b"b", None)],
        base_offset=10,
    )
    got = decode_kv_pairs(data)
    assert got.pairs == [(b"a", b"1"), (b"b", None)]
    assert got.deletes == 1
    assert [offset for offset, _ in got.skipped] == [11, 12, 13]
    assert "null key" in got.skipped[0][1]
    assert "512 bytes" in got.skipped[2][1]


def test_a_control_batch_is_refused():
    with pytest.raises(ValueError, match="control batch"):
        decode_kv_pairs(encode_control_batch(2, b"\x00\x00"))


def test_a_batch_with_a_wrong_crc_is_refused_unless_the_caller_checked_it():
    data = bytearray(encode_batch([(b"k", b"v")]))
    data[-2] ^= 0xFF  # the value (the last byte is the header count)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_kv_pairs(bytes(data))
    assert decode_kv_pairs(bytes(data), check_crc=False).pairs == [(b"k", bytes([ord("v") ^ 0xFF]))]


def test_exactly_one_whole_batch_is_expected():
    data = encode_batch([(b"k", b"v")])
    with pytest.raises(CorruptRecordError, match="one whole batch"):
        decode_kv_pairs(data + data)
    with pytest.raises(CorruptRecordError):
        decode_kv_pairs(data[:-1])
    with pytest.raises(CorruptRecordError, match="61 bytes"):
        decode_kv_pairs(data[:30])


@pytest.mark.parametrize(
    ("records", "kw", "match"),
    [
        ([record(0), record(0)], {}, "out of order"),
        ([record(0), record(5)], {"last_delta": 1}, "out of order"),
        ([record(0, length_adjust=1)], {}, "disagrees|does not fit|truncated"),
        ([record(0, length_adjust=-1)], {}, "disagrees|does not fit|bad"),
        ([record(0, key=b"k", key_length=50)], {}, "key length"),
        ([record(0, header_count=3)], {}, "header"),
        ([record(0, headers=((b"h", b"v"),), header_count=2)], {}, "header"),
        ([record(0)], {"count": 2}, "claims|truncated"),
        ([record(0), record(1)], {"count": 1}, "follow the last"),
    ],
)
def test_malformed_records_are_refused_with_a_reason(records, kw, match):
    with pytest.raises(CorruptRecordError, match=match):
        decode_kv_pairs(batch(records, **kw))


@pytest.mark.slow
@settings(max_examples=example_count(400), deadline=None)
@given(
    recs=record_lists,
    position=st.integers(0, 10_000),
    xor=st.integers(1, 255),
    fresh_crc=st.booleans(),
)
def test_a_corrupt_byte_is_an_error_or_the_record_paths_answer_never_a_crash(
    recs, position, xor, fresh_crc
):
    """Any byte flipped (with or without a fresh CRC): the fast path either refuses the batch
    or answers what the Record path answers on the same bytes."""
    data = bytearray(build_batch(recs))
    position %= len(data)
    data[position] ^= xor
    mutated = refresh_crc(data) if fresh_crc else bytes(data)
    try:
        want = reference_pairs(mutated)
    except (CorruptRecordError, ValueError):
        want = None
    try:
        got = decode_kv_pairs(mutated)
        got = (got.pairs, [offset for offset, _ in got.skipped])
    except CorruptRecordError:
        got = None
    except ValueError:  # the flip made it a control batch, or a compression codec
        got = None
    assert got == want
