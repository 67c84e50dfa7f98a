"""What a snapshot file holds, and the check that a file is a whole, sound snapshot.

A snapshot is record batches v2 back to back, in Kafka's released layout (KIP-630,
``RecordsSnapshotWriter``):

1. one control batch whose first record is a SnapshotHeader (control type 3); Kafka may add a
   KRaftVersion (5) and a Voters (6) record after it in the same batch;
2. data batches holding the state, each at most 8 MiB (``MAX_BATCH_BYTES``);
3. one control batch holding a single SnapshotFooter (control type 4).

Offsets inside a snapshot start at 0 and run on without gaps across every batch, header and
footer included; they are not log offsets (Kafka PR #10786). Every batch carries the snapshot
id's epoch as its partition leader epoch.

The two control values are Kafka messages serialized at version 0 with the flexible encoding
(``SnapshotHeaderRecord.json``, ``SnapshotFooterRecord.json``)::

    SnapshotHeader: Version int16, LastContainedLogTimestamp int64, tagged fields
    SnapshotFooter: Version int16, tagged fields

(the tagged-field section is an unsigned varint count, then per field its tag, size and bytes;
raftcore writes none, so it is a single 0 byte).

Kafka checks only the batch CRCs and the header when it reads a snapshot, and nothing at all
before it installs one downloaded from its leader: a torn download can replace a follower's
log. ``verify_snapshot`` checks everything, and raftcore runs it before a snapshot is renamed
into place, installed or served.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from raftcore._native.segment import MappedFile
from raftcore._native.validation import validate_batches
from raftcore.errors import CorruptRecordError, CorruptSnapshotError
from raftcore.offsets import OffsetAndEpoch
from raftcore.records import (
    BatchBuilder,
    ControlRecordType,
    control_record_key,
    iter_batches,
    scan_batches,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "SnapshotFooter",
    "SnapshotHeader",
    "SnapshotSummary",
    "encode_footer_batch",
    "encode_header_batch",
    "verify_snapshot",
    "verify_snapshot_file",
]

# Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES: no batch of a snapshot (or of the log) is larger.
MAX_BATCH_BYTES = 8 * 1024 * 1024
# Kafka's metadata SnapshotEmitter.DEFAULT_BATCH_SIZE: records per data batch.
MAX_BATCH_RECORDS = 1024

# With a progress callback, the record walk runs over pieces of whole batches of about this size.
PROGRESS_PIECE_BYTES = 64 * 1024 * 1024

# Control records Kafka's writer may put in the header batch after the SnapshotHeader.
_HEADER_BATCH_EXTRAS = frozenset({ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS})

_CONTROL_FLAG = 0x20
_TRANSACTIONAL_FLAG = 0x10
_RECORDS_COUNT_AT = 57  # byte position of RecordsCount in a batch

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


def _read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise CorruptRecordError(f"truncated unsigned varint in a {what}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _skip_tagged_fields(data: bytes, pos: int, what: str) -> int:
    """Skip a flexible message's tagged-field section (unknown tags are kept by Kafka and
    ignored here), and require the message to end there."""
    count, pos = _read_uvarint(data, pos, what)
    for _ in range(count):
        _, pos = _read_uvarint(data, pos, what)
        size, pos = _read_uvarint(data, pos, what)
        if size > len(data) - pos:
            raise CorruptRecordError(f"a tagged field of {size} bytes runs past the {what}")
        pos += size
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes after the end of the {what}")
    return pos


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """The SnapshotHeader control record (type 3): ``last_contained_log_timestamp`` is the
    append time of the last log record the snapshot covers (retention by time uses it)."""

    last_contained_log_timestamp: int
    version: int = 0

    def encode(self) -> bytes:
        return _I16.pack(self.version) + _I64.pack(self.last_contained_log_timestamp) + b"\x00"

    @classmethod
    def decode(cls, data: bytes) -> SnapshotHeader:
        if len(data) < 10:
            raise CorruptRecordError(f"a SnapshotHeader of {len(data)} bytes, need at least 11")
        (version,) = _I16.unpack_from(data, 0)
        (timestamp,) = _I64.unpack_from(data, 2)
        _skip_tagged_fields(data, 10, "SnapshotHeader")
        return cls(timestamp, version)


@dataclass(frozen=True, slots=True)
class SnapshotFooter:
    """The SnapshotFooter control record (type 4): it marks the end of the snapshot."""

    version: int = 0

    def encode(self) -> bytes:
        return _I16.pack(self.version) + b"\x00"

    @classmethod
    def decode(cls, data: bytes) -> SnapshotFooter:
        if len(data) < 2:
            raise CorruptRecordError(f"a SnapshotFooter of {len(data)} bytes, need at least 3")
        (version,) = _I16.unpack_from(data, 0)
        _skip_tagged_fields(data, 2, "SnapshotFooter")
        return cls(version)


def encode_header_batch(
    epoch: int,
    header: SnapshotHeader,
    *,
    timestamp_ms: int,
    extra_records: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """The first batch of a snapshot: a control batch at offset 0 holding the SnapshotHeader,
    then ``extra_records`` -- (control key, value) pairs, which may only be KRaftVersion and
    Voters records (as Kafka writes them for kraft.version 1)."""
    builder = BatchBuilder(
        base_offset=0, leader_epoch=epoch, timestamp_ms=timestamp_ms, control=True
    )
    builder.append(control_record_key(ControlRecordType.SNAPSHOT_HEADER), header.encode())
    for key, value in extra_records:
        if _control_type(key) not in _HEADER_BATCH_EXTRAS:
            raise ValueError(
                f"only KRaftVersion and Voters records may follow the snapshot header, "
                f"got control type {_control_type(key)}"
            )
        builder.append(key, value)
    return builder.build()


def encode_footer_batch(base_offset: int, epoch: int, *, timestamp_ms: int) -> bytes:
    """The last batch of a snapshot: a control batch holding only the SnapshotFooter."""
    builder = BatchBuilder(
        base_offset=base_offset, leader_epoch=epoch, timestamp_ms=timestamp_ms, control=True
    )
    builder.append(control_record_key(ControlRecordType.SNAPSHOT_FOOTER), SnapshotFooter().encode())
    return builder.build()


def _control_type(key: bytes | None) -> int:
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            f"a control record key of {0 if key is None else len(key)} bytes, need 4"
        )
    return _I16.unpack_from(key, 2)[0]


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    """What ``verify_snapshot`` found in a sound snapshot.

    ``batch_count`` counts every batch, header and footer included; ``record_count`` counts
    only the data records (what a restore applies); ``header_extras`` holds the (control type,
    value) of records after the SnapshotHeader in the first batch (Kafka's KRaftVersion and
    Voters); ``compressed`` says whether any batch is compressed.
    """

    size: int
    epoch: int
    batch_count: int
    record_count: int
    header: SnapshotHeader
    footer: SnapshotFooter
    header_extras: tuple[tuple[int, bytes], ...] = ()
    compressed: bool = False


def verify_snapshot(
    buffer: Buffer,
    *,
    snapshot_id: OffsetAndEpoch | None = None,
    expected_size: int | None = None,
    check_records: bool = True,
    name: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SnapshotSummary:
    """Check that ``buffer`` is a whole, sound snapshot and describe it.

    Checked, in order: the size (not empty; ``expected_size`` when given, the Size a leader
    announced in FetchSnapshot); framing exact to the last byte; every batch's CRC (and, with
    ``check_records``, every record); at least a header and a footer batch; the first batch a
    control batch whose first record is a SnapshotHeader, followed in it only by KRaftVersion
    or Voters records; the last batch a control batch holding exactly one SnapshotFooter; no
    control batch and no transactional batch in between; offsets from 0 without gaps and each
    batch's record count equal to its offset span; one epoch on every batch
    (``snapshot_id.epoch`` when given). The record walk (lengths, varints, offset deltas,
    record counts; compressed batches decompressed) is on by default because a CRC only
    vouches for what the writer wrote; Kafka's reader does not walk.

    ``progress(done_bytes, size)`` is called as the record walk goes (for a command line); it
    does not change what is checked.

    Raises CorruptSnapshotError naming ``name`` (the file, also its ``path``) and the byte
    position of the first problem; never any other exception for bad bytes.
    """
    view = memoryview(buffer).cast("B")
    size = len(view)

    def corrupt(reason: str, position: int | None) -> CorruptSnapshotError:
        where = "" if position is None else f" at byte position {position}"
        return CorruptSnapshotError(f"{name or 'snapshot'}: {reason}{where}", name, position)

    if size == 0:
        raise corrupt("the snapshot is empty", 0)
    if expected_size is not None and size != expected_size:
        raise corrupt(
            f"the snapshot has {size} bytes, expected {expected_size}", min(size, expected_size)
        )
    # Framing first. The CRCs are checked here, or by the record walk, which checks them too
    # (one pass over the bytes instead of two) and reports the first bad batch in file order.
    scan = scan_batches(view, check_crc=not check_records)
    if scan.error is not None:
        raise corrupt(scan.error, scan.error_position)
    count = scan.count
    positions = scan.positions
    if check_records:
        if progress is None:
            fault = validate_batches(view, client=False)
        else:
            fault = _validate_in_pieces(view, positions, scan.sizes, progress)
        if fault is not None:
            _, batch_index, _, reason = fault
            raise corrupt(reason, int(positions[batch_index]) if 0 <= batch_index < count else None)
    if count < 2:
        what = (
            "a header batch and a footer batch" if count == 0 else "a footer batch after the header"
        )
        raise corrupt(f"{count} record batch(es); a snapshot needs {what}", size)

    # Batch kinds: control first and last, data in between, nothing transactional.
    attributes = scan.attributes
    control = (attributes & _CONTROL_FLAG) != 0
    if not control[0]:
        raise corrupt("the first batch is not a control batch (no snapshot header)", 0)
    if not control[-1]:
        raise corrupt(
            "the last batch is not a control batch (no snapshot footer)", int(positions[-1])
        )
    inner = np.flatnonzero(control[1:-1])
    if inner.size:
        raise corrupt(
            "a control batch between the header and the footer", int(positions[inner[0] + 1])
        )
    transactional = np.flatnonzero((attributes & _TRANSACTIONAL_FLAG) != 0)
    if transactional.size:
        raise corrupt("a transactional batch in a snapshot", int(positions[transactional[0]]))

    # Offsets: 0, 1, 2, ... across every batch, each batch's records filling its offset span.
    base, last = scan.base_offsets, scan.last_offsets
    if base[0] != 0:
        raise corrupt(f"the first batch starts at offset {int(base[0])}, not 0", 0)
    gaps = np.flatnonzero(base[1:] != last[:-1] + 1)
    if gaps.size:
        k = int(gaps[0]) + 1
        raise corrupt(
            f"batch {k} starts at offset {int(base[k])}, the one before ends at {int(last[k - 1])}",
            int(positions[k]),
        )
    counts = _record_counts(view, positions)
    short = np.flatnonzero(counts != last - base + 1)
    if short.size:
        k = int(short[0])
        raise corrupt(
            f"batch {k} holds {int(counts[k])} records for offsets {int(base[k])}..{int(last[k])}",
            int(positions[k]),
        )

    epochs = scan.epochs
    epoch = int(epochs[0])
    if snapshot_id is not None and epoch != snapshot_id.epoch:
        raise corrupt(f"the header batch has epoch {epoch}, the snapshot id {snapshot_id.epoch}", 0)
    other = np.flatnonzero(epochs != epoch)
    if other.size:
        k = int(other[0])
        raise corrupt(
            f"batch {k} has epoch {int(epochs[k])}, the snapshot {epoch}", int(positions[k])
        )

    # The control records themselves.
    sizes = scan.sizes
    header, extras = _read_header_batch(view, 0, int(sizes[0]), corrupt)
    footer = _read_footer_batch(view, int(positions[-1]), int(sizes[-1]), corrupt)

    return SnapshotSummary(
        size=size,
        epoch=epoch,
        batch_count=count,
        record_count=int(counts[1:-1].sum()) if count > 2 else 0,
        header=header,
        footer=footer,
        header_extras=extras,
        compressed=bool(np.any((attributes & 0x07) != 0)),
    )


def _validate_in_pieces(
    view: memoryview,
    positions: np.ndarray,
    sizes: np.ndarray,
    progress: Callable[[int, int], None],
) -> tuple[int, int, int, str] | None:
    """``validate_batches`` over pieces of whole batches, calling ``progress`` after each. A
    fault is reported as the walk over the whole buffer reports it: the walk is run again from
    the start to the end of the faulty piece, so batch indexes and byte positions are the
    buffer's, not the piece's."""
    total = len(view)
    start = 0
    count = len(positions)
    while start < count:
        begin = int(positions[start])
        end_index = int(np.searchsorted(positions, begin + PROGRESS_PIECE_BYTES, side="left"))
        end_index = max(end_index, start + 1)
        end = int(positions[end_index - 1]) + int(sizes[end_index - 1])
        if validate_batches(view[begin:end], client=False) is not None:
            return validate_batches(view[:end], client=False)
        progress(end, total)
        start = end_index
    return None


def _record_counts(view: memoryview, positions: np.ndarray) -> np.ndarray:
    """RecordsCount (int32 at byte 57) of every batch, read straight from the bytes."""
    data = np.frombuffer(view, dtype=np.uint8)
    at = positions[:, None] + (_RECORDS_COUNT_AT + np.arange(4))
    return (
        data[at]
        .astype(np.uint32)
        .dot(np.array([1 << 24, 1 << 16, 1 << 8, 1], np.uint32))
        .astype(np.int32)
    )


def _control_records(
    view: memoryview, position: int, size: int, corrupt
) -> list[tuple[int, bytes]]:
    try:
        (batch,) = iter_batches(view[position : position + size], position)
        return [(_control_type(r.key), r.value or b"") for r in batch.records()]
    except CorruptRecordError as exc:
        pos = exc.position if exc.position is not None else position
        raise corrupt(str(exc), pos) from None


def _read_header_batch(
    view: memoryview, position: int, size: int, corrupt
) -> tuple[SnapshotHeader, tuple[tuple[int, bytes], ...]]:
    records = _control_records(view, position, size, corrupt)
    control_type, value = records[0]
    if control_type != ControlRecordType.SNAPSHOT_HEADER:
        raise corrupt(
            f"the first control record has type {control_type}, not a snapshot header (3)", position
        )
    try:
        header = SnapshotHeader.decode(value)
    except (CorruptRecordError, struct.error) as exc:
        raise corrupt(f"unreadable snapshot header: {exc}", position) from None
    for control_type, _ in records[1:]:
        if control_type not in _HEADER_BATCH_EXTRAS:
            raise corrupt(
                f"a control record of type {control_type} in the header batch (only "
                f"KRaftVersion and Voters may follow the header)",
                position,
            )
    return header, tuple(records[1:])


def _read_footer_batch(view: memoryview, position: int, size: int, corrupt) -> SnapshotFooter:
    records = _control_records(view, position, size, corrupt)
    if len(records) != 1:
        raise corrupt(f"the footer batch holds {len(records)} records, not one footer", position)
    control_type, value = records[0]
    if control_type != ControlRecordType.SNAPSHOT_FOOTER:
        raise corrupt(
            f"the last control record has type {control_type}, not a snapshot footer (4)", position
        )
    try:
        return SnapshotFooter.decode(value)
    except (CorruptRecordError, struct.error) as exc:
        raise corrupt(f"unreadable snapshot footer: {exc}", position) from None


def verify_snapshot_file(
    path: str | os.PathLike[str],
    *,
    snapshot_id: OffsetAndEpoch | None = None,
    expected_size: int | None = None,
    check_records: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> SnapshotSummary:
    """``verify_snapshot`` over the file at ``path`` (mapped, not read into memory). Works on a
    ``.part`` file before its rename as on a frozen snapshot before it is served or loaded."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        mapping = MappedFile(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    if len(mapping) == 0:
        raise CorruptSnapshotError(
            f"{path}: the snapshot is empty at byte position 0", str(path), 0
        )
    return verify_snapshot(
        mapping.view(0, len(mapping)),
        snapshot_id=snapshot_id,
        expected_size=expected_size,
        check_records=check_records,
        name=str(path),
        progress=progress,
    )
