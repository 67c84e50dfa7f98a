"""One batch header parser (``_native/batch_header.pxd``) for every native module that reads
record batches: the record reader (``iter_batches``, ``scan_batches``, ``find_batch``), the
columnar decoder, the key/value decoder and produce validation.

So they refuse the same damaged headers -- each in its own words, but never one accepting
what another refuses -- and a corrupt header byte is an error, never a read past the end.
Legacy message sets (magic 0 and 1) keep their size at byte 8 and magic at byte 16 but may be
shorter than a v2 header: they are named by their magic, not by their length.
"""

from __future__ import annotations

import struct

import crc32c as crc32c_package
import pytest

from raftcore._native.columnar import decode_columns
from raftcore._native.validation import FAULT_CORRUPT, FAULT_INVALID, validate_batches
from raftcore.errors import CorruptRecordError
from raftcore.records import (
    decode_kv_pairs,
    encode_batch,
    find_batch,
    iter_batches,
    scan_batches,
    span_batches,
)

T = 1_700_000_000_000
GOOD = encode_batch([(b"k", b"v"), (b"k2", b"v2")], timestamp_ms=T)


def fresh_crc(data: bytes | bytearray) -> bytes:
    """The CRC recomputed, so that the damage itself is what a reader sees."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c_package.crc32c(bytes(out[21:])))
    return bytes(out)


def patched(fmt: str, at: int, value: int) -> bytes:
    data = bytearray(GOOD)
    struct.pack_into(fmt, data, at, value)
    return fresh_crc(data)


DAMAGED = {
    "an empty tail of 5 bytes": GOOD[:5],
    "a header cut before the magic byte": GOOD[:16],
    "a header cut after the magic byte": GOOD[:17],
    "a header cut at 40 bytes": GOOD[:40],
    "a batch one byte short": GOOD[:-1],
    "a negative length": patched(">i", 8, -1),
    "a length of 0": patched(">i", 8, 0),
    "a length one below the header": patched(">i", 8, 48),
    "a length past the end": patched(">i", 8, len(GOOD)),
    "a huge length": patched(">i", 8, 2**31 - 1),
    "magic 0": patched(">b", 16, 0),
    "magic 1": patched(">b", 16, 1),
    "magic 3": patched(">b", 16, 3),
    "magic 0xFF": patched(">B", 16, 0xFF),
    "a negative base offset": patched(">q", 0, -1),
    "a negative record count": patched(">i", 57, -1),
    "a negative last offset delta": patched(">i", 23, -1),
    "more records than the bytes can hold": patched(">i", 57, 1000),
}


def refusals(data: bytes) -> dict[str, bool]:
    """For each reader of batches, whether it refuses ``data`` (one batch, maybe damaged)."""
    out = {}
    try:
        list(iter_batches(data))
        out["iter_batches"] = False
    except CorruptRecordError:
        out["iter_batches"] = True
    out["scan_batches"] = scan_batches(data).error is not None
    for name, read in (
        ("find_batch", lambda: find_batch(data, 10**9)),
        ("span_batches", lambda: span_batches(data, 0, -1, 1 << 20)),
        ("decode_columns", lambda: decode_columns(data)),
        ("decode_kv_pairs", lambda: decode_kv_pairs(data)),
    ):
        try:
            read()
            out[name] = False
        except CorruptRecordError:
            out[name] = True
    fault = validate_batches(data, client=False)
    assert fault is None or fault[0] in (FAULT_CORRUPT, FAULT_INVALID)
    out["validate_batches"] = fault is not None
    return out


def test_every_reader_accepts_a_sound_batch():
    assert not any(refusals(GOOD).values())


@pytest.mark.parametrize("data", DAMAGED.values(), ids=DAMAGED.keys())
def test_every_reader_refuses_a_damaged_header(data):
    assert all(refusals(data).values()), refusals(data)


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_set_is_named_by_its_magic_not_its_length(magic):
    """A v0/v1 message of 27 bytes: its length field (15) is below a v2 header, but what is
    wrong is the format."""
    legacy = struct.pack(">qiIb", 0, 15, 0, magic) + bytes(10)  # offset, size, crc, magic
    with pytest.raises(CorruptRecordError, match=f"magic is {magic}, only magic 2") as info:
        list(iter_batches(legacy))
    assert info.value.position == 0
    kind, _, _, reason = validate_batches(legacy)
    assert kind == FAULT_INVALID and f"magic {magic}" in reason


def test_fewer_bytes_than_length_and_magic_are_a_truncated_header():
    for cut in (12, 16):
        with pytest.raises(CorruptRecordError, match="a batch header needs 61"):
            list(iter_batches(GOOD[:cut]))
        assert "a batch header needs 61" in scan_batches(GOOD[:cut]).error


def test_the_record_reader_and_the_columnar_decoder_say_the_same():
    for name, data in DAMAGED.items():
        with pytest.raises(CorruptRecordError) as by_records:
            list(iter_batches(data))
        with pytest.raises(CorruptRecordError) as by_columns:
            decode_columns(data)
        assert str(by_records.value) == str(by_columns.value), name
        assert by_records.value.position == by_columns.value.position == 0, name
