"""Idempotent produce: the leader remembers, per producer id, its epoch and its last five
batches (sequence range and offsets), as Kafka's ProducerStateManager does.

- a batch whose sequence range is one of those five is a retry: it is answered with the
  offsets it got the first time, and nothing is appended;
- a batch must continue its producer's sequence (last sequence + 1, wrapping at 2^31-1); a
  new producer (or a new producer epoch) starts at 0; otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- an older producer epoch is fenced (INVALID_PRODUCER_EPOCH).

The table is rebuilt from the log's batch headers when a node becomes leader, so it survives
leader changes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from raftcore.error_codes import Errors

__all__ = ["Duplicate", "ProducerStateManager"]

INT32_MAX = 0x7FFFFFFF
REMEMBERED_BATCHES = 5


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log, at these offsets."""

    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=REMEMBERED_BATCHES)
    )  # (first sequence, last sequence, first offset, last offset)


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
        for seq0, seq1, off0, off1 in producer.batches:
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
        producer.batches.append((first_seq, last_seq, first_offset, last_offset))

    def rebuild(self, log: object) -> None:
        """Start over from the log's batch headers (on becoming leader)."""
        from raftcore.records import scan_batches

        self._producers.clear()
        offset = log.log_start_offset  # type: ignore[attr-defined]
        end = log.end_offset  # type: ignore[attr-defined]
        while offset < end:
            data = log.read(offset, 8 << 20)  # type: ignore[attr-defined]
            scan = scan_batches(data, check_crc=False)
            if scan.count == 0:
                break
            pids = scan.producer_ids
            for i in range(scan.count):
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
            offset = int(scan.last_offsets[-1]) + 1
