"""Snapshot ids and the names of snapshot files (KIP-630, Kafka's ``Snapshots.java``).

A snapshot id is (end offset, epoch): the snapshot holds the state of the log up to, not
including, ``end_offset``, and ``epoch`` is the epoch of the record at ``end_offset - 1``.
The files live in the log's directory, beside the segments:

    00000000000000000100-0000000003.checkpoint                 a frozen snapshot
    00000000000000000100-0000000003-8f1c2a.checkpoint.part     one being written or received
    00000000000000000100-0000000003.checkpoint.deleted         one being deleted

The offset takes characters [0, 20) and the epoch [21, 31), both zero-padded decimal, as
Kafka formats and parses them; a ``.part`` file carries a random tail after the id so that two
writers of one id never share a file (Kafka's ``Files.createTempFile``).
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path

from raftcore.offsets import OffsetAndEpoch

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "DAMAGED_SUFFIX",
    "DELETED_SUFFIX",
    "PART_SUFFIX",
    "SUFFIX",
    "SnapshotFileKind",
    "SnapshotId",
    "SnapshotPath",
    "damaged_path",
    "deleted_path",
    "parse_snapshot_path",
    "snapshot_path",
]

SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
DAMAGED_SUFFIX = ".checkpoint.damaged"

OFFSET_WIDTH = 20
EPOCH_WIDTH = 10
_MAX_OFFSET = 2**63 - 1  # a Kafka offset is an int64
_MAX_EPOCH = 2**31 - 1  # an epoch an int32

_FROZEN_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
_DELETED_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint\.deleted")
_DAMAGED_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint\.damaged")
# Kafka's temp files have a random number after the id; ours a random token. Any tail is a
# partial file of that id.
_PART_NAME = re.compile(r"(\d{20})-(\d{10})(?:-[^/]*)?\.checkpoint\.part")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SnapshotId(OffsetAndEpoch):
    """The id of a snapshot: its exclusive end offset and the epoch of its last record.

    An :class:`~raftcore.offsets.OffsetAndEpoch` (``offset`` is the end offset): it orders as
    one, epoch first, then offset (snapshots of one log have both growing together, so this is
    also the order of their end offsets), and equals the plain value with the same offset and
    epoch. What it adds: Kafka's integer ranges, checked when it is made, and the file names.
    """

    def __post_init__(self) -> None:
        if not 0 <= self.offset <= _MAX_OFFSET:
            raise ValueError(f"snapshot end offset {self.offset} is outside 0..2**63-1")
        if not 0 <= self.epoch <= _MAX_EPOCH:
            raise ValueError(f"snapshot epoch {self.epoch} is outside 0..2**31-1")

    @classmethod
    def of(cls, value: OffsetAndEpoch) -> SnapshotId:
        """The snapshot id of an (offset, epoch) position, checked; itself if it is one."""
        if isinstance(value, SnapshotId):
            return value
        return cls(value.offset, value.epoch)

    @property
    def end_offset(self) -> int:
        """The offset after the last record the snapshot covers (``offset``, by its name)."""
        return self.offset

    @property
    def last_contained_offset(self) -> int:
        """The offset of the last record the snapshot covers (``end_offset - 1``)."""
        return self.offset - 1

    @property
    def stem(self) -> str:
        """``<20-digit end offset>-<10-digit epoch>``, the name without a suffix."""
        return f"{self.offset:0{OFFSET_WIDTH}d}-{self.epoch:0{EPOCH_WIDTH}d}"

    @property
    def file_name(self) -> str:
        """The frozen snapshot's file name."""
        return self.stem + SUFFIX

    def __repr__(self) -> str:
        return f"SnapshotId(end_offset={self.offset}, epoch={self.epoch})"

    def __str__(self) -> str:
        return f"(end offset {self.offset}, epoch {self.epoch})"


# The snapshot ``kafka-storage format`` writes; never served to followers (kraft.md 1.8).
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


class SnapshotFileKind(enum.Enum):
    FROZEN = "frozen"  # <id>.checkpoint: complete, verified, read-only
    PART = "part"  # <id>-<tail>.checkpoint.part: being written or received
    DELETED = "deleted"  # <id>.checkpoint.deleted: renamed on its way to being unlinked
    DAMAGED = "damaged"  # <id>.checkpoint.damaged: failed its checks, set aside, kept


@dataclass(frozen=True, slots=True)
class SnapshotPath:
    """A snapshot file found in a directory: where it is, its id, and which kind it is."""

    path: Path
    snapshot_id: SnapshotId
    kind: SnapshotFileKind


def snapshot_path(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> Path:
    """Where the frozen snapshot ``snapshot_id`` lives in ``directory``."""
    return Path(directory) / snapshot_id.file_name


def deleted_path(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> Path:
    """The name a snapshot takes while it is being deleted."""
    return Path(directory) / (snapshot_id.stem + DELETED_SUFFIX)


def damaged_path(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> Path:
    """The name a snapshot that failed its checks is set aside under (kept, never read)."""
    return Path(directory) / (snapshot_id.stem + DAMAGED_SUFFIX)


def parse_snapshot_path(path: str | os.PathLike[str]) -> SnapshotPath | None:
    """The snapshot file ``path`` names, or None when its name is not a snapshot file's
    (segments, indexes, checkpoints and strangers alike)."""
    path = Path(path)
    name = path.name
    for pattern, kind in (
        (_FROZEN_NAME, SnapshotFileKind.FROZEN),
        (_PART_NAME, SnapshotFileKind.PART),
        (_DELETED_NAME, SnapshotFileKind.DELETED),
        (_DAMAGED_NAME, SnapshotFileKind.DAMAGED),
    ):
        m = pattern.fullmatch(name)
        if m is not None:
            offset, epoch = int(m.group(1)), int(m.group(2))
            if offset > _MAX_OFFSET or epoch > _MAX_EPOCH:
                return None
            return SnapshotPath(path, SnapshotId(offset, epoch), kind)
    return None
