"""Validation of produced record batches before anything is appended (Kafka's LogValidator).

A batch whose CRC is right can still hold malformed records (a buggy client computes the CRC
over whatever it wrote). Appended, such a batch would be committed and poison the log: every
reader stops at it. So the leader decodes every record of every batch first, with the native
decoder, which checks each length and varint against the buffer, the record length against
its fields, offset deltas 0..n-1 in order, the record count and last offset delta against
the records present, header counts and lengths, no bytes after the last record, magic 2, and
for compressed batches the same on the decompressed records (within the decompression limit).
Clients may not send control or transactional batches.

The answer follows Kafka (KIP-467): CORRUPT_MESSAGE for a batch that does not decode,
INVALID_RECORD for one that decodes but is not allowed, with the index of the bad record
(``record_index``, -1 for the batch as a whole) and a reason naming the offset and field.
Nothing of a request is written when any batch of it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError
from raftcore.records import iter_batches

__all__ = ["Refusal", "check_well_formed", "validate_produced"]

_TRANSACTIONAL = 0x10
_CONTROL = 0x20


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a produced request is refused: Kafka's error code, the index of the batch in the
    request, the index of the bad record in that batch (-1: the batch itself), a reason."""

    error_code: int
    batch_index: int
    record_index: int
    reason: str


def validate_produced(data: bytes | memoryview) -> Refusal | None:
    """None if every record of every batch in ``data`` is well formed and allowed."""
    batch_index = -1
    try:
        for batch_index, batch in enumerate(iter_batches(data)):
            if batch.attributes & (_CONTROL | _TRANSACTIONAL):
                kind = "control" if batch.attributes & _CONTROL else "transactional"
                return Refusal(
                    Errors.INVALID_RECORD,
                    batch_index,
                    -1,
                    f"batch {batch_index}: clients may not produce {kind} batches",
                )
            record_index = -1
            try:
                for record_index, _ in enumerate(batch.records()):  # noqa: B007
                    pass
            except CorruptRecordError as exc:
                return Refusal(
                    Errors.CORRUPT_MESSAGE,
                    batch_index,
                    record_index + 1,
                    f"batch {batch_index}, record {record_index + 1}: {exc}",
                )
    except CorruptRecordError as exc:
        index = batch_index + 1
        return Refusal(Errors.CORRUPT_MESSAGE, index, -1, f"batch {index}: {exc}")
    if batch_index < 0:
        return Refusal(Errors.INVALID_RECORD, 0, -1, "no record batch in the request")
    return None


def check_well_formed(data: bytes | memoryview) -> None:
    """Decode every record of every batch (control batches included): raises
    CorruptRecordError naming the batch and the fault. Followers check what a leader sends
    them with it, so a malformed batch never enters a replica's log by replication either."""
    for batch in iter_batches(data):
        for _ in batch.records():
            pass
