"""Producer-state files: ``<offset>.snapshot`` in the log directory, as Kafka names them.

A file holds the idempotent-produce state (per producer id: its epoch and its last batches)
as of ``offset``: it covers every batch below that offset and none above. Kafka's file keeps
only each producer's last batch; ours keeps all of them (up to sixteen), so a retry of any
remembered batch is still recognised after a restart. Hence our own version numbers.

Format (big-endian), versions 1 and 2::

    version   int16    1 or 2
    crc       uint32   CRC-32C of every byte after this field
    count     int32    number of producers
    count x:  producer_id int64, epoch int16, n int8 (version 1: 0..5, version 2: 0..16),
              n x (first_seq int32, last_seq int32, first_offset int64, last_offset int64)

Version 2 only allows more batches per producer: the leader remembers sixteen since raftcore's
own producer may keep more than five requests in flight (Kafka clients keep five). A file is
written as version 1 when no producer has more than five batches, so a node of the previous
release still reads it; such a node refuses a version 2 file as damaged and scans its log
instead, which is slower and just as safe. Both versions are read.

Files are written whole (temporary file, fsync, rename, fsync of the directory) and read with
every length checked: a damaged file raises :class:`CorruptProducerStateError` naming it, and
the caller falls back to an older one. This module does bytes and files; what to keep, and
when to write, is :mod:`raftcore.kafka.producer_tracker`'s business.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from raftcore._native.crc32c import crc32c
from raftcore.checkpoint import write_atomically
from raftcore.errors import CorruptProducerStateError
from raftcore.log.config import segment_file_prefix

__all__ = [
    "PRODUCER_SNAPSHOT_SUFFIX",
    "MAX_BATCHES",
    "PRODUCER_SNAPSHOT_VERSION",
    "BatchMetadata",
    "ProducerEntry",
    "decode_producer_snapshot",
    "delete_producer_snapshot",
    "delete_producer_snapshots_above",
    "encode_producer_snapshot",
    "producer_snapshot_offsets",
    "producer_snapshot_path",
    "read_producer_snapshot",
    "write_producer_snapshot",
]

PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1  # Kafka's own files are version 1 too, but a different layout
# Batches per producer a version allows: 5 is Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN.
MAX_BATCHES_BY_VERSION = {1: 5, 2: 16}
MAX_BATCHES = MAX_BATCHES_BY_VERSION[2]  # what the leader remembers (producer_state)

_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhb")  # producer id, epoch, number of batches
_BATCH = struct.Struct(">iiqq")  # first seq, last seq, first offset, last offset


class BatchMetadata(NamedTuple):
    """One remembered batch of a producer."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state: its epoch and its last batches, oldest first."""

    producer_id: int
    epoch: int
    batches: tuple[BatchMetadata, ...]


def producer_snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    return Path(directory) / (segment_file_prefix(offset) + PRODUCER_SNAPSHOT_SUFFIX)


def producer_snapshot_offsets(directory: str | os.PathLike[str]) -> list[int]:
    """The offsets of the producer-state files in ``directory``, ascending."""
    found = []
    for p in Path(directory).glob("*" + PRODUCER_SNAPSHOT_SUFFIX):
        stem = p.name[: -len(PRODUCER_SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def encode_producer_snapshot(entries: list[ProducerEntry]) -> bytes:
    """Version 1 when every producer has at most five batches, else version 2."""
    wide = any(len(e.batches) > MAX_BATCHES_BY_VERSION[1] for e in entries)
    version = 2 if wide else PRODUCER_SNAPSHOT_VERSION
    parts = [_COUNT.pack(len(entries))]
    for e in entries:
        if not 0 <= len(e.batches) <= MAX_BATCHES:
            raise ValueError(f"producer {e.producer_id} has {len(e.batches)} batches")
        parts.append(_ENTRY.pack(e.producer_id, e.epoch, len(e.batches)))
        parts.extend(_BATCH.pack(*b) for b in e.batches)
    body = b"".join(parts)
    return _HEADER.pack(version, crc32c(body)) + body


def decode_producer_snapshot(data: bytes, name: str = "producer-state file") -> list[ProducerEntry]:
    """The entries of a file's bytes. Raises CorruptProducerStateError (naming ``name``) for
    anything but a whole, sound file of version 1 or 2."""

    def corrupt(why: str) -> CorruptProducerStateError:
        return CorruptProducerStateError(f"{name}: {why}")

    size = len(data)
    if size < _HEADER.size + _COUNT.size:
        raise corrupt(f"{size} bytes, shorter than a header")
    version, crc = _HEADER.unpack_from(data, 0)
    if version not in MAX_BATCHES_BY_VERSION:
        raise corrupt(f"version {version}, expected 1 or 2")
    max_batches = MAX_BATCHES_BY_VERSION[version]
    view = memoryview(data)[_HEADER.size :]
    if crc32c(view) != crc:
        raise corrupt("CRC mismatch")
    (count,) = _COUNT.unpack_from(view, 0)
    pos = _COUNT.size
    if count < 0 or count > (len(view) - pos) // _ENTRY.size:
        raise corrupt(f"producer count {count} does not fit in {size} bytes")
    entries = []
    for k in range(count):
        if pos + _ENTRY.size > len(view):
            raise corrupt(f"producer {k} of {count} is cut off at byte {pos}")
        pid, epoch, n = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        if pid < 0 or epoch < 0 or not 0 <= n <= max_batches:
            raise corrupt(f"producer {k}: id {pid}, epoch {epoch}, {n} batches")
        if pos + n * _BATCH.size > len(view):
            raise corrupt(f"producer {pid}'s {n} batches are cut off at byte {pos}")
        batches = []
        for _ in range(n):
            b = BatchMetadata(*_BATCH.unpack_from(view, pos))
            pos += _BATCH.size
            if b.first_seq < 0 or b.last_seq < 0 or not 0 <= b.first_offset <= b.last_offset:
                raise corrupt(f"producer {pid} has an impossible batch {tuple(b)}")
            batches.append(b)
        entries.append(ProducerEntry(pid, epoch, tuple(batches)))
    if pos != len(view):
        raise corrupt(f"{len(view) - pos} bytes after the last producer")
    return entries


def write_producer_snapshot(
    directory: str | os.PathLike[str], offset: int, entries: list[ProducerEntry]
) -> Path:
    """Write (atomically, durably) the state as of ``offset``; returns the file's path."""
    path = producer_snapshot_path(directory, offset)
    write_atomically(path, encode_producer_snapshot(entries))
    return path


def read_producer_snapshot(directory: str | os.PathLike[str], offset: int) -> list[ProducerEntry]:
    """Raises CorruptProducerStateError for a damaged file, OSError for an unreadable one."""
    path = producer_snapshot_path(directory, offset)
    return decode_producer_snapshot(path.read_bytes(), str(path))


def delete_producer_snapshot(directory: str | os.PathLike[str], offset: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(producer_snapshot_path(directory, offset))


def delete_producer_snapshots_above(directory: str | os.PathLike[str], offset: int) -> None:
    """Delete the files of offsets above ``offset`` (-1: every file); the caller fsyncs the
    directory when that must be durable."""
    for o in producer_snapshot_offsets(directory):
        if o > offset:
            delete_producer_snapshot(directory, o)
