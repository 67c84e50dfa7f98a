"""Validation of record batches before anything is appended (Kafka's LogValidator).

A batch whose CRC is right can still hold malformed records: a buggy client computes the CRC
over whatever it wrote. Appended, such a batch would be committed and poison the log, every
reader stopping at it. So the leader checks every record of every produced batch first (and a
follower every record of what its leader sends: :mod:`raftcore.batch_validation`). The walk is
native (``raftcore._native.validation``): it reads each length and varint against the end of its
batch or record and creates no Python object per record.

What is checked, for every batch: the framing (lengths within the request, magic 2, the
batch size limit) and the CRC; then, the CRC vouching for the bytes, the compression codec
(none, gzip, snappy, lz4, zstd; compressed records are decompressed within the decompression
limit and checked the same way), the record count against lastOffsetDelta, and each record:
its length and every varint within bounds, the length equal to what the fields take, offset
deltas, key and value lengths (-1 is null), the header count, header keys non-null and
UTF-8, header values; no bytes after the last record. A producer's batches must also be data
batches (no control or transactional ones), hold at least one record with offset deltas
exactly 0..count-1 and lastOffsetDelta = count - 1, and an idempotent batch needs a base
sequence.

Error codes follow Kafka (KIP-467 adds the index of the bad record and a message to the
Produce response, v8+):

- CORRUPT_MESSAGE: the framing or the CRC is wrong -- the bytes are not what the client
  wrote, and clients retry it (Kafka's CorruptRecordException);
- INVALID_RECORD: the CRC is right, so the client wrote a malformed or forbidden batch, and a
  retry would send it again; clients fail it at once (Kafka's InvalidRecordException, which
  DefaultRecord.readFrom and LogValidator throw for these faults, magic 0 and 1 included);
- MESSAGE_TOO_LARGE: a batch above ``max.message.bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftcore._native.validation import (
    FAULT_CORRUPT,
    FAULT_INVALID,
    FAULT_TOO_LARGE,
    FAULT_UNSUPPORTED_CODEC,
    validate_batches,
)
from raftcore.error_codes import Errors

__all__ = ["Refusal", "validate_produced"]

_ERROR_CODES = {
    FAULT_CORRUPT: Errors.CORRUPT_MESSAGE,
    FAULT_INVALID: Errors.INVALID_RECORD,
    FAULT_TOO_LARGE: Errors.MESSAGE_TOO_LARGE,
    FAULT_UNSUPPORTED_CODEC: Errors.UNSUPPORTED_COMPRESSION_TYPE,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a produced request is refused: Kafka's error code, the index of the batch in the
    request (-1: the request as a whole), the index of the bad record in that batch (-1: the
    batch itself; Produce's RecordErrors call it batch_index), and a reason that names the
    batch, record, field and byte position."""

    error_code: Errors
    batch_index: int
    record_index: int
    reason: str


def validate_produced(data: bytes | memoryview, *, max_batch_bytes: int = 0) -> Refusal | None:
    """None if every record of every batch in ``data`` is well formed and allowed from a
    producer; else the first fault. ``max_batch_bytes`` > 0 limits each batch's size."""
    fault = validate_batches(data, client=True, max_batch_bytes=max_batch_bytes)
    if fault is None:
        return None
    kind, batch_index, record_index, reason = fault
    return Refusal(_ERROR_CODES[kind], batch_index, record_index, reason)
