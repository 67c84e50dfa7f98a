"""Kafka record batch v2: encode records into batches, walk and validate batches, iterate
records. The byte work is native (``raftcore._native.records``); this module is its public face
and adds control records. ``to_arrow`` / ``iter_arrow`` (from :mod:`raftcore.columnar`) decode
batches straight into ``pyarrow.RecordBatch`` objects.

>>> data = encode_batch([(b"k", b"v"), (None, b"w", [("h", b"x")])], base_offset=5, leader_epoch=2)
>>> [(r.offset, r.key, r.value) for b in iter_batches(data) for r in b.records()]
[(5, b'k', b'v'), (6, None, b'w')]
"""

from __future__ import annotations

import enum
import struct
from typing import Any

from raftcore._native.kv_records import DEFAULT_MAX_KEY_SIZE, KvPairs, decode_kv_pairs
from raftcore._native.records import (
    COMPRESSION_NAMES,
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    BatchScan,
    Record,
    RecordBatch,
    check_batch_crcs,
    encode_batch,
    encode_batch_kv,
    find_batch,
    get_max_decompressed_size,
    iter_batches,
    restamp_batches,
    restamp_scanned,
    scan_batches,
    set_max_decompressed_size,
    span_batches,
)
from raftcore.columnar import arrow_schema, iter_arrow, to_arrow
from raftcore.errors import CorruptRecordError, UnsupportedCompressionError

__all__ = [
    "COMPRESSION_NAMES",
    "sound_batch",
    "DEFAULT_MAX_KEY_SIZE",
    "RECORD_BATCH_OVERHEAD",
    "BatchBuilder",
    "BatchScan",
    "ControlRecordType",
    "CorruptRecordError",
    "KvPairs",
    "Record",
    "RecordBatch",
    "UnsupportedCompressionError",
    "arrow_schema",
    "check_batch_crcs",
    "control_record_key",
    "decode_kv_pairs",
    "encode_batch",
    "encode_batch_kv",
    "encode_control_batch",
    "find_batch",
    "get_max_decompressed_size",
    "iter_arrow",
    "iter_batches",
    "parse_control_record_key",
    "restamp_batches",
    "restamp_scanned",
    "scan_batches",
    "set_max_decompressed_size",
    "span_batches",
    "to_arrow",
]


class ControlRecordType(enum.IntEnum):
    """Control record types, with the numbers Kafka released (``ControlRecordType.java``).

    KIP-595's draft gave LeaderChange the number 3; the released numbering is this one.
    """

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_KEY_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")


def control_record_key(control_type: int) -> bytes:
    """The key of a control record: key version (0) and type, both int16."""
    return _CONTROL_KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def parse_control_record_key(key: bytes | None) -> int:
    """The type of a control record key. As Kafka does, the type is read at byte 2 and an
    unknown key version is accepted; a key shorter than 4 bytes is corrupt."""
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            f"control record key of {0 if key is None else len(key)} bytes, need 4"
        )
    return _CONTROL_KEY.unpack_from(key)[1]


def encode_control_batch(
    control_type: int,
    value: bytes,
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    timestamp_ms: int | None = None,
) -> bytes:
    """A control batch (attribute bit 5) holding one control record of ``control_type`` whose
    value is ``value`` (for KRaft records, the message serialized at version 0)."""
    return encode_batch(
        [(control_record_key(control_type), value)],
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        timestamp_ms=timestamp_ms,
        control=True,
    )


def sound_batch(data: Any) -> tuple[bytes, int, int, int]:
    """(bytes, base offset, last offset, epoch) of the first batch of ``data``, which must be
    sound; CorruptRecordError otherwise."""
    scan = scan_batches(data, check_crc=True)
    if scan.count == 0:
        raise CorruptRecordError(f"no sound batch in the copy ({scan.error})")
    size = int(scan.sizes[0])
    start = int(scan.positions[0])
    return (
        bytes(memoryview(data)[start : start + size]),
        int(scan.base_offsets[0]),
        int(scan.last_offsets[0]),
        int(scan.epochs[0]),
    )
