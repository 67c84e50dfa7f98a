"""In-memory pieces of the state-machine API: a snapshot writer and reader (for tests, and
until the file-backed store is adapted), and a dict-backed key/value state machine -- the
naive reference the LMDB one is checked against, and a state machine for applications whose
state fits in memory and that rebuild it from snapshots and the log on restart (as Kafka's
controllers do)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from raftcore.statemachine.api import (
    Pair,
    SnapshotReader,
    SnapshotWriter,
    StateMachineError,
)
from raftcore.statemachine.conditions import Outcomes, conditions_of, refuse_damaged
from raftcore.statemachine.kv_batches import decode_batches

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch
    from raftcore.records import KvPairs

__all__ = ["DictStateMachine", "MemorySnapshotReader", "MemorySnapshotWriter"]

CHUNK_PAIRS = 4096


class MemorySnapshotReader:
    """A snapshot held in memory: its chunks of (key, value) pairs and its end offset.
    Iterable any number of times."""

    def __init__(self, chunks: Iterable[Sequence[Pair]], end_offset: int) -> None:
        if end_offset < 0:
            raise ValueError(f"a snapshot's end offset is >= 0, got {end_offset}")
        self.chunks = [list(chunk) for chunk in chunks]
        self._end_offset = end_offset

    @classmethod
    def from_pairs(
        cls, pairs: Iterable[Pair], end_offset: int, chunk_pairs: int = CHUNK_PAIRS
    ) -> MemorySnapshotReader:
        it = iter(pairs)
        return cls(iter(lambda: list(itertools.islice(it, chunk_pairs)), []), end_offset)

    @property
    def end_offset(self) -> int:
        return self._end_offset

    def __iter__(self) -> Iterator[Sequence[Pair]]:
        return iter(self.chunks)

    def pairs(self) -> list[Pair]:
        return [pair for chunk in self.chunks for pair in chunk]

    def __repr__(self) -> str:
        return f"MemorySnapshotReader(end_offset={self._end_offset}, chunks={len(self.chunks)})"


class MemorySnapshotWriter:
    """Keeps what a state machine writes: ``start(end_offset)`` once, ``append`` any number of
    times, then ``freeze()`` gives the reader. Each chunk is copied (the caller may reuse its
    list)."""

    def __init__(self) -> None:
        self.end_offset: int | None = None
        self.chunks: list[list[Pair]] = []
        self.frozen = False

    def start(self, end_offset: int) -> None:
        if self.end_offset is not None:
            raise StateMachineError(
                f"snapshot writer started twice ({self.end_offset}, then {end_offset})"
            )
        if self.frozen:
            raise StateMachineError("snapshot writer is frozen")
        self.end_offset = end_offset

    def append(self, records: Sequence[Pair]) -> None:
        if self.end_offset is None:
            raise StateMachineError("snapshot writer: append before start(end_offset)")
        if self.frozen:
            raise StateMachineError(f"snapshot {self.end_offset} is frozen: no more appends")
        self.chunks.append(list(records))

    def freeze(self) -> MemorySnapshotReader:
        if self.end_offset is None:
            raise StateMachineError("snapshot writer: freeze before start(end_offset)")
        self.frozen = True
        reader = MemorySnapshotReader((), self.end_offset)
        reader.chunks = self.chunks
        return reader

    @property
    def pair_count(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)

    def __repr__(self) -> str:
        return (
            f"MemorySnapshotWriter(end_offset={self.end_offset}, pairs={self.pair_count}, "
            f"frozen={self.frozen})"
        )


class DictStateMachine:
    """A key/value state machine in a dict. Applies, snapshots and restores under one lock, so
    a snapshot taken from another thread is one consistent view (it copies the dict, then
    writes the copy outside the lock). Not durable: a new one starts at offset 0."""

    def __init__(self, *, log_prefix: str = "") -> None:
        self.data: dict[bytes, bytes] = {}
        self._applied = 0
        self._lock = threading.Lock()
        self.prefix = log_prefix
        self.skipped_records = 0
        # The verdicts of conditional writes, for the writers waiting (conditions.py).
        self.outcomes = Outcomes()

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, batches: list[CommittedBatch]) -> None:
        if not batches:
            return
        decoded, end, skipped = decode_batches(batches, self._applied, prefix=self.prefix)
        with self._lock:
            data = self.data
            decided: list[tuple[int, bool]] = []
            for kv in decoded:
                if kv.conditions is not None:
                    self._apply_conditional(kv, decided)
                elif kv.deletes:
                    for key, value in kv.pairs:
                        if value is None:
                            data.pop(key, None)
                        else:
                            data[key] = value
                else:  # no deletes: every value is bytes
                    data.update(cast("list[tuple[bytes, bytes]]", kv.pairs))
            self._applied = end
            self.skipped_records += skipped
        if decided:
            self.outcomes.record(decided)

    def _apply_conditional(self, kv: KvPairs, decided: list[tuple[int, bool]]) -> None:
        """As the LMDB state machine decides conditions (conditions.py), on the dict."""
        conditions = conditions_of(kv)
        data = self.data
        for index, (key, value) in enumerate(kv.pairs):
            condition = conditions.get(index)
            if condition is not None:
                if condition.problem is not None:
                    refuse_damaged(self.prefix, key, condition)
                    holds = False
                else:
                    holds = data.get(key) == condition.expected
                decided.append((condition.offset, holds))
                if not holds:
                    continue
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value

    def snapshot(self, writer: SnapshotWriter) -> int:
        with self._lock:
            items = sorted(self.data.items())
            end = self._applied
        writer.start(end)
        for i in range(0, len(items), CHUNK_PAIRS):
            writer.append(items[i : i + CHUNK_PAIRS])
        return end

    def restore(self, reader: SnapshotReader) -> None:
        data: dict[bytes, bytes] = {}
        for chunk in reader:
            for key, value in chunk:
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
        with self._lock:
            self.data = data
            self._applied = reader.end_offset

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"DictStateMachine(applied_offset={self._applied}, keys={len(self.data)})"
