"""The segmented log: Kafka record batches in size-rolled segment files, a sparse offset index
per segment, the leader-epoch cache, and crash recovery.

Directory layout (see docs/storage-format.md)::

    00000000000000000000.log     record batches, back to back
    00000000000000000000.index   sparse offset index: (relative offset, position) int32 pairs
    00000000000000004096.log     the next segment, named by its base offset
    ...
    leader-epoch-checkpoint      epoch -> start offset, Kafka's text format
    log-start-offset-checkpoint  the log start offset
    recovery-point-checkpoint    the clean point: bytes before it are durable and checked
    high-watermark-checkpoint    the committed offset, written by a node (raftcore.raft.committed)
    <end offset>-<epoch>.checkpoint   a snapshot (raftcore.snapshot), beside the segments
    00000000000000004096.snapshot     producer state as of that offset (producer_snapshots)
    .lock                        held (flock) while the log is open

Invariants kept by every operation:
- segments are contiguous: each segment's base offset is the previous segment's end offset;
- batches within the log have contiguous offsets and non-decreasing leader epochs;
- the log start offset lies in [first segment's base, end offset];
- once the directory holds a snapshot, one reaches the log start offset (Kafka's rule);
- everything before the recovery point is fsynced and was CRC-checked (by the writer or by
  recovery); recovery checks everything after it, batch by batch, and cuts a torn tail.

Reads return zero-copy memoryviews over a memory map. A view stays readable after the log
is truncated, deleted or closed (it then reads zeros where bytes were truncated away); it does
not see later appends.

The package, one idea a module:

- ``config``: :class:`LogConfig` and the names of the directory's files;
- ``segment``: one segment -- its file, memory map and sparse offset index;
- ``checkpoints``: the log-start-offset and recovery-point (clean point) checkpoint files;
- ``recovery``: opening a directory -- its lock, and recovery from an unclean shutdown;
- ``segmented_log``: :class:`SegmentedLog`, the log's public face;
- ``snapshots``: its snapshots (KIP-630) -- the snapshot store in the same directory, checked
  against the log, behind the raft core's ``SnapshotLog`` protocol;
- ``observer``: what the log tells the one observer of its changes it may have;
- ``producer_snapshots``: the producer-state files' format (their policy is the node's).
"""

from raftcore.log.config import CHECKPOINT_VERSION as CHECKPOINT_VERSION
from raftcore.log.config import DELETED_SUFFIX as DELETED_SUFFIX
from raftcore.log.config import INDEX_SUFFIX as INDEX_SUFFIX
from raftcore.log.config import INT32_MAX as INT32_MAX
from raftcore.log.config import LOCK_FILE as LOCK_FILE
from raftcore.log.config import LOG_START_OFFSET_FILE as LOG_START_OFFSET_FILE
from raftcore.log.config import LOG_SUFFIX as LOG_SUFFIX
from raftcore.log.config import RECOVERY_POINT_FILE as RECOVERY_POINT_FILE
from raftcore.log.config import LogConfig
from raftcore.log.config import segment_file_prefix as segment_file_prefix
from raftcore.log.segment import VERIFY_PIECE_BYTES as VERIFY_PIECE_BYTES
from raftcore.log.segment import entries_before as entries_before
from raftcore.log.segment import first_discontinuity as first_discontinuity
from raftcore.log.segmented_log import SegmentedLog

__all__ = ["LogConfig", "SegmentedLog"]
