"""Snapshot files (KIP-630) in Kafka's released format, in the log's directory.

``<20-digit end offset>-<10-digit epoch>.checkpoint``: a SnapshotHeader control batch, data
batches of at most 8 MiB, a SnapshotFooter control batch; written as ``.part``, verified whole,
fsynced, made read-only, renamed, directory fsynced.

- :class:`SnapshotStore` -- the directory: list, open (verified), write, receive, delete;
- :class:`SnapshotWriter` -- a local snapshot being written (``append``, ``freeze``, ``abort``);
- :class:`SnapshotReceiver` -- a snapshot arriving from the leader in FetchSnapshot chunks;
- :class:`SnapshotReader` -- a frozen snapshot: batches and records, or byte slices;
- :class:`SnapshotId`, :func:`verify_snapshot` / :func:`verify_snapshot_file`,
  :class:`SnapshotSummary`, :class:`SnapshotHeader`, :class:`SnapshotFooter`.

This layer sits below the raft core and does not import the log. See docs/storage-format.md.
"""

from raftcore.errors import (
    CorruptSnapshotError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
    SnapshotPositionError,
)
from raftcore.snapshot.format import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    SnapshotFooter,
    SnapshotHeader,
    SnapshotSummary,
    encode_footer_batch,
    encode_header_batch,
    verify_snapshot,
    verify_snapshot_file,
)
from raftcore.snapshot.ids import (
    BOOTSTRAP_SNAPSHOT_ID,
    SnapshotFileKind,
    SnapshotId,
    SnapshotPath,
    parse_snapshot_path,
    snapshot_path,
)
from raftcore.snapshot.reader import SnapshotReader
from raftcore.snapshot.receiver import SnapshotReceiver
from raftcore.snapshot.store import SnapshotStore
from raftcore.snapshot.writer import SnapshotWriter

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "CorruptSnapshotError",
    "SnapshotError",
    "SnapshotExistsError",
    "SnapshotFileKind",
    "SnapshotFooter",
    "SnapshotHeader",
    "SnapshotId",
    "SnapshotNotFoundError",
    "SnapshotPath",
    "SnapshotPositionError",
    "SnapshotReader",
    "SnapshotReceiver",
    "SnapshotStore",
    "SnapshotSummary",
    "SnapshotWriter",
    "encode_footer_batch",
    "encode_header_batch",
    "parse_snapshot_path",
    "snapshot_path",
    "verify_snapshot",
    "verify_snapshot_file",
]
