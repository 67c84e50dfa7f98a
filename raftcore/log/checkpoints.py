"""The log's checkpoint files: the log start offset, the clean point (recovery point) and the
high watermark (the committed offset, raftcore.raft.committed).

A log start or clean point checkpoint that cannot be read is reported and ignored: the log
then starts at its first segment, or recovery checks every segment. A high watermark
checkpoint that cannot be read raises: read as 0 it would let a leader truncate committed
records (raftcore.node.committed_checkpoint)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from raftcore.checkpoint import parse_ints, read_checkpoint, write_checkpoint
from raftcore.errors import CorruptCheckpointError
from raftcore.log.config import (
    CHECKPOINT_VERSION,
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _CleanPoint:
    """Bytes of segment ``segment_base`` before ``position`` -- and all earlier segments -- are
    durable and were checked; ``offset`` is the offset at that position."""

    offset: int
    segment_base: int
    position: int


def _read_one_line(path: Path, count: int) -> list[int] | None:
    """The ``count`` integers of a one-line checkpoint, or None without the file; raises
    CorruptCheckpointError (naming the file) for one that cannot be read."""
    lines = read_checkpoint(path, CHECKPOINT_VERSION)
    if lines is None:
        return None
    if len(lines) != 1:
        raise CorruptCheckpointError(f"{path}: expected one line, got {len(lines)}")
    return parse_ints(path, lines[0], 2, count)


def read_log_start_offset(directory: Path) -> int | None:
    try:
        ints = _read_one_line(directory / LOG_START_OFFSET_FILE, 1)
        return None if ints is None else ints[0]
    except CorruptCheckpointError as exc:
        logger.warning("[log %s] %s; using the first segment's base offset", directory, exc)
        return None


def write_log_start_offset(directory: Path, log_start: int) -> None:
    write_checkpoint(directory / LOG_START_OFFSET_FILE, CHECKPOINT_VERSION, [str(log_start)])


def read_clean_point(directory: Path) -> _CleanPoint | None:
    try:
        ints = _read_one_line(directory / RECOVERY_POINT_FILE, 3)
        return None if ints is None else _CleanPoint(*ints)
    except CorruptCheckpointError as exc:
        logger.warning("[log %s] %s; recovering every segment", directory, exc)
        return None


def write_clean_point(directory: Path, c: _CleanPoint) -> None:
    write_checkpoint(
        directory / RECOVERY_POINT_FILE,
        CHECKPOINT_VERSION,
        [f"{c.offset} {c.segment_base} {c.position}"],
    )


def read_high_watermark(directory: Path) -> int | None:
    """The checkpointed high watermark, or None without the file. Raises
    CorruptCheckpointError (naming the file) for one that cannot be read."""
    ints = _read_one_line(directory / HIGH_WATERMARK_FILE, 1)
    return None if ints is None else ints[0]


def write_high_watermark(directory: Path, offset: int) -> None:
    write_checkpoint(directory / HIGH_WATERMARK_FILE, CHECKPOINT_VERSION, [str(offset)])
