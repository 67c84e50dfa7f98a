"""Idempotent produce: the leader remembers, per producer id, its epoch and its last sixteen
batches (sequence range and offsets), as Kafka's ProducerStateManager does with five.

- a batch whose sequence range is one of those remembered is a retry: it is answered with the
  offsets it got the first time, and nothing is appended;
- a batch must continue its producer's sequence (last sequence + 1, wrapping at 2^31-1); a
  new producer (or a new producer epoch) starts at 0; otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- an older producer epoch is fenced (INVALID_PRODUCER_EPOCH).

Why sixteen, not Kafka's five: a producer may have as many batches in flight as the leader
remembers, since after a lost answer it resends every unanswered batch, and the oldest must
still be recognised (else it is refused as out of order, and a producer that resumes an
identity fails). Kafka clients never have more than five in flight, so they see no change;
raftcore's own producer (:mod:`raftcore.client.producer`) may ask for up to sixteen.

Every replica keeps the table current as its log grows (:mod:`raftcore.kafka.producer_tracker`
records each appended batch and persists the table in ``<offset>.snapshot`` files), so a new
leader has it already. ``rebuild`` scans a whole log, for a table without such files.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from raftcore.error_codes import Errors
from raftcore.log.producer_snapshots import MAX_BATCHES, BatchMetadata, ProducerEntry

__all__ = ["REMEMBERED_BATCHES", "Duplicate", "ProducerStateManager"]

INT32_MAX = 0x7FFFFFFF
REMEMBERED_BATCHES = MAX_BATCHES  # 16: what producer-state files keep too
_READ_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log, at these offsets."""

    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=REMEMBERED_BATCHES)
    )  # oldest first


def _next_sequence(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def check(
        self, producer_id: int, producer_epoch: int, first_seq: int, count: int
    ) -> int | Duplicate:
        """Errors.NONE if the batch may be appended, a Duplicate for a retry, or an error
        code. Batches without a producer id (-1) are not tracked."""
        if producer_id < 0:
            return Errors.NONE
        if first_seq < 0:
            return Errors.INVALID_RECORD
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        producer = self._producers.get(producer_id)
        if producer is None:
            return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        if producer_epoch < producer.epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if producer_epoch > producer.epoch:
            return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        batches = producer.batches
        # The next batch, the common case, first: it cannot be a retry of one remembered (the
        # 16 remembered batches are far too few records to wrap the sequence around to it).
        if batches and first_seq == _next_sequence(batches[-1][1]):
            return Errors.NONE
        for seq0, seq1, off0, off1 in batches:
            if seq0 == first_seq and seq1 == last_seq:
                return Duplicate(off0, off1)
        if not producer.batches:
            return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        if first_seq != _next_sequence(producer.batches[-1][1]):
            return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        return Errors.NONE

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        count: int,
        *,
        first_offset: int,
        last_offset: int,
    ) -> None:
        """Remember an appended batch."""
        if producer_id < 0:
            return
        producer = self._producers.get(producer_id)
        if producer is None or producer_epoch > producer.epoch:
            producer = self._producers[producer_id] = _Producer(producer_epoch)
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        producer.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))

    def record_scanned(self, scan: Any, start: int = 0, stop: int | None = None) -> None:
        """Remember batches ``start..stop-1`` of a ``scan_batches`` result (offsets as in
        the log)."""
        stop = scan.count if stop is None else stop
        pids = scan.producer_ids
        for i in range(start, stop):
            pid = int(pids[i])
            if pid >= 0:
                first, last = int(scan.base_offsets[i]), int(scan.last_offsets[i])
                self.record(
                    pid,
                    int(scan.producer_epochs[i]),
                    int(scan.base_sequences[i]),
                    last - first + 1,
                    first_offset=first,
                    last_offset=last,
                )

    def replay(self, log: Any, from_offset: int) -> int:
        """Remember the log's batches from ``from_offset`` (a batch boundary), or from the log
        start offset if that is higher; returns how many batches were read."""
        from raftcore.records import scan_batches

        offset = max(from_offset, log.log_start_offset)
        end = log.end_offset
        replayed = 0
        while offset < end:
            scan = scan_batches(log.read(offset, _READ_BYTES), check_crc=False)
            if scan.count == 0:
                break
            self.record_scanned(scan)  # files are written at batch boundaries
            replayed += scan.count
            offset = int(scan.last_offsets[-1]) + 1
        return replayed

    def rebuild(self, log: Any) -> int:
        """Start over from the log's batch headers; returns how many batches were read."""
        self._producers.clear()
        return self.replay(log, log.log_start_offset)

    # ---- the table as data (producer-state files) ---------------------------------------------

    def clear(self) -> None:
        self._producers.clear()

    def entries(self) -> list[ProducerEntry]:
        """Every producer's state, by producer id."""
        return [
            ProducerEntry(pid, p.epoch, tuple(p.batches))
            for pid, p in sorted(self._producers.items())
        ]

    def restore(self, entries: list[ProducerEntry]) -> None:
        """Replace the table with ``entries`` (from :meth:`entries`, or a file)."""
        self._producers = {
            e.producer_id: _Producer(e.epoch, deque(e.batches, maxlen=REMEMBERED_BATCHES))
            for e in entries
        }
