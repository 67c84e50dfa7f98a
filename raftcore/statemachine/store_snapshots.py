"""A frozen snapshot of the log's snapshot store, read as the state machine's
:class:`~raftcore.statemachine.api.SnapshotReader`: ``end_offset`` from its id, chunks of
(key, value) pairs from its records. What the node hands ``restore`` when the core loads a
snapshot (KIP-630)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from raftcore.errors import CorruptSnapshotError
from raftcore.statemachine.api import MAX_KEY_SIZE, Pair

__all__ = ["StoreSnapshotReader"]

CHUNK_PAIRS = 4096


class StoreSnapshotReader:
    """Wraps a snapshot reader of the store (anything with ``snapshot_id.offset``,
    ``records()`` and ``close()``, as :class:`raftcore.log.snapshots.LogSnapshotReader`).
    A record whose key breaks the key rule cannot come from a key/value state machine's
    snapshot: it is reported as corrupt."""

    def __init__(self, reader: Any, chunk_pairs: int = CHUNK_PAIRS) -> None:
        self.reader = reader
        self.chunk_pairs = chunk_pairs

    @property
    def end_offset(self) -> int:
        return int(self.reader.snapshot_id.offset)

    def __iter__(self) -> Iterator[list[Pair]]:
        records = self.reader.records()
        while chunk := list(itertools.islice(records, self.chunk_pairs)):
            pairs: list[Pair] = []
            for r in chunk:
                key = r.key
                if key is None or not 1 <= len(key) <= MAX_KEY_SIZE:
                    raise CorruptSnapshotError(
                        f"snapshot {self.reader.snapshot_id}: record {r.offset} has "
                        f"{'a null key' if key is None else f'a key of {len(key)} bytes'}"
                    )
                pairs.append((key, r.value))
            yield pairs

    def close(self) -> None:
        self.reader.close()

    def __repr__(self) -> str:
        return f"StoreSnapshotReader({self.reader!r})"
