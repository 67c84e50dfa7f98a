"""Small snapshots for the snapshot tests, built by hand from batches (independently of the
writer) or through a store."""

from __future__ import annotations

from raftcore.records import encode_batch
from raftcore.snapshot import (
    SnapshotHeader,
    SnapshotId,
    SnapshotStore,
    encode_footer_batch,
    encode_header_batch,
)

SID = SnapshotId(120, 3)


def records(n: int, start: int = 0, value_size: int = 20) -> list[tuple[bytes, bytes]]:
    return [(b"key-%08d" % i, bytes([i % 251]) * value_size) for i in range(start, start + n)]


def snapshot_bytes(
    batch_sizes: tuple[int, ...] = (3, 4), *, epoch: int = 3, timestamp: int = 42
) -> bytes:
    """Header batch, one data batch per entry of ``batch_sizes`` (that many records), footer."""
    out = [encode_header_batch(epoch, SnapshotHeader(timestamp), timestamp_ms=7)]
    offset = 1
    for n in batch_sizes:
        out.append(
            encode_batch(records(n, offset), base_offset=offset, leader_epoch=epoch, timestamp_ms=7)
        )
        offset += n
    out.append(encode_footer_batch(offset, epoch, timestamp_ms=7))
    return b"".join(out)


def write_snapshot(
    store: SnapshotStore, snapshot_id: SnapshotId = SID, n: int = 2500, **kwargs
) -> list[tuple[bytes, bytes]]:
    """Write and freeze a snapshot of ``n`` records; returns the records."""
    recs = records(n)
    kwargs.setdefault("last_contained_log_timestamp", 1000 + snapshot_id.end_offset)
    kwargs.setdefault("timestamp_ms", 5)
    with store.writer(snapshot_id, **kwargs) as writer:
        writer.append(recs)
        writer.freeze()
    return recs
