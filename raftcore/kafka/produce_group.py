"""Group append for Produce (acks=all): the requests that reach a partition's leader in one
event-loop iteration are checked and written as one append -- one log write, one step of the
core -- and each request still gets its own offsets and its own verdict from the core.

The first request of an iteration is appended at once (a writer alone waits for nobody); the
others of that iteration queue, and are appended together when the loop has run them all. At
that point each queued request's producers are checked, in arrival order, against the state
the log holds; a request whose producer is already in the group being built starts a new
group, so that every sequence check sees the batches appended before it, as it would one
request at a time. A request refused by the check (or a retry of a batch already in the log)
is answered on its own and the others go on; a group the log cannot take because this replica
does not lead fails every request in it; a group the log refuses for its contents is written
again request by request, so that only the faulty one fails.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError, InvalidAppendError
from raftcore.kafka.producer_state import Duplicate
from raftcore.raft import Appended, NotLeaderError
from raftcore.records import scan_batches

if TYPE_CHECKING:
    from raftcore.kafka.partition import Partition

__all__ = ["MAX_GROUP_BYTES", "ProduceGroup", "append_checked"]

logger = logging.getLogger(__name__)

# Bytes of produced batches in one group's write; a request that takes the queue past this
# writes the queue at once.
MAX_GROUP_BYTES = 1 << 20

#: what a Produce of one partition came to: (error, the append to wait for, or None)
Outcome = tuple[int, "Appended | None"]


def check_producers(partition: Partition, scan: Any) -> int | Duplicate:
    """The idempotence check of every batch in ``scan``: Errors.NONE, a Duplicate (a retry of a
    single batch this leader holds), or the error to answer."""
    producers = partition.producers
    for i in range(scan.count):
        verdict = producers.check(
            int(scan.producer_ids[i]),
            int(scan.producer_epochs[i]),
            int(scan.base_sequences[i]),
            int(scan.last_offsets[i] - scan.base_offsets[i]) + 1,
        )
        if isinstance(verdict, Duplicate):
            return verdict if scan.count == 1 else Errors.DUPLICATE_SEQUENCE_NUMBER
        if verdict != Errors.NONE:
            return verdict
    return Errors.NONE


def _retried(partition: Partition, duplicate: Duplicate, track: bool) -> Outcome:
    """A retry of a batch in this leader's log: acks=all waits for it as for a new one."""
    if not track:
        return Errors.NONE, Appended(duplicate.first_offset, duplicate.last_offset, partition.epoch)
    try:
        return Errors.NONE, partition.watch(duplicate.first_offset, duplicate.last_offset)
    except NotLeaderError:
        return Errors.NOT_LEADER_OR_FOLLOWER, None


def append_checked(partition: Partition, records: Any, scan: Any, *, track: bool) -> Outcome:
    """Check one request's producers and append its validated ``records`` (``scan``: their
    headers), now."""
    verdict = check_producers(partition, scan)
    if isinstance(verdict, Duplicate):
        return _retried(partition, verdict, track)
    if verdict != Errors.NONE:
        return verdict, None
    return _append(partition, records, scan, track)


def _append(partition: Partition, records: Any, scan: Any, track: bool) -> Outcome:
    try:
        appended = partition.append(records, track=track, checked=scan)
    except NotLeaderError:
        return Errors.NOT_LEADER_OR_FOLLOWER, None
    except (CorruptRecordError, InvalidAppendError) as exc:
        logger.info("refusing produced records: %s", exc)
        return Errors.CORRUPT_MESSAGE, None
    # The log told the producer state of the appended batches (raftcore.kafka.producer_tracker).
    return Errors.NONE, appended


class _Queued:
    __slots__ = ("future", "producer_ids", "records", "scan")

    def __init__(self, records: Any, scan: Any, future: asyncio.Future[Outcome]) -> None:
        self.records = records
        self.scan = scan
        self.future = future
        if scan.count == 1:  # one batch per request, the common case
            pid = int(scan.producer_ids[0])
            self.producer_ids = {pid} if pid >= 0 else set()
        else:
            self.producer_ids = {p for p in scan.producer_ids.tolist() if p >= 0}

    def record_count(self) -> int:
        scan = self.scan
        if scan.count == 1:
            return int(scan.last_offsets[0] - scan.base_offsets[0]) + 1
        return int((scan.last_offsets - scan.base_offsets).sum()) + scan.count


class ProduceGroup:
    """One partition's acks=all appends of this loop iteration."""

    def __init__(self, partition: Partition, loop: asyncio.AbstractEventLoop) -> None:
        self._partition = partition
        self._loop = loop
        self._queue: list[_Queued] = []
        self._bytes = 0
        self._waiting = False  # for the end of this iteration

    def append(self, records: Any, scan: Any) -> Outcome | asyncio.Future[Outcome]:
        """Append validated ``records`` (``scan``: their headers), tracked: the outcome now if
        this is the iteration's first request, else a future of it, settled once the loop has
        run the iteration's other requests."""
        if not self._waiting:
            outcome = append_checked(self._partition, records, scan, track=True)
            # after the append: the node's own end-of-iteration work (its shared poll) runs
            # first, so the group's write is polled at once
            self._waiting = True
            self._partition.at_iteration_end(self._end_of_iteration)
            return outcome
        future: asyncio.Future[Outcome] = self._loop.create_future()
        self._queue.append(_Queued(records, scan, future))
        self._bytes += len(records)
        if self._bytes >= MAX_GROUP_BYTES:
            self.flush()
        return future

    def _end_of_iteration(self) -> None:
        self._waiting = False
        self.flush()

    def flush(self) -> None:
        """Check and write what is queued, in order."""
        queue, self._queue, self._bytes = self._queue, [], 0
        try:
            self._check_and_write(queue)
        except Exception as exc:  # the node stopped under them: each fails as it would alone
            for q in queue:
                if not q.future.done():
                    q.future.set_exception(exc)

    def _check_and_write(self, queue: list[_Queued]) -> None:
        group: list[_Queued] = []
        in_group: set[int] = set()
        for q in queue:
            if q.future.cancelled():  # its connection went away: nobody is told, nothing written
                continue
            if not in_group.isdisjoint(q.producer_ids):
                self._write(group)  # its sequences follow batches of this group
                group, in_group = [], set()
            verdict = check_producers(self._partition, q.scan)
            if isinstance(verdict, Duplicate):
                q.future.set_result(_retried(self._partition, verdict, True))
            elif verdict != Errors.NONE:
                q.future.set_result((verdict, None))
            else:
                group.append(q)
                in_group |= q.producer_ids
        self._write(group)

    def _write(self, group: list[_Queued]) -> None:
        if len(group) == 1:
            q = group[0]
            q.future.set_result(_append(self._partition, q.records, q.scan, True))
            return
        if not group:
            return
        records = bytearray().join([q.records for q in group])  # restamped where it lies
        try:
            parts = self._partition.append_parts(
                records,
                checked=scan_batches(records, check_crc=False),
                counts=[q.record_count() for q in group],
            )
        except NotLeaderError:
            for q in group:
                q.future.set_result((Errors.NOT_LEADER_OR_FOLLOWER, None))
            return
        except (CorruptRecordError, InvalidAppendError):  # nothing written: each on its own
            for q in group:
                q.future.set_result(_append(self._partition, q.records, q.scan, True))
            return
        for q, part in zip(group, parts, strict=True):
            q.future.set_result((Errors.NONE, part))
