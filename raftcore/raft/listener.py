"""The application's view of the log: committed batches, in order, exactly once, and the
leader changes (Kafka's RaftClient.Listener and KafkaRaftClient.updateListenersProgress).

:class:`ListenerFeed` is the core's side: it remembers how far the listener has read and which
leader it was last told of, and hands it what the high watermark allows. With snapshots
(KIP-630, Kafka's updateListenersProgress) it first loads the latest snapshot into a listener
that is new (no start offset given) when one exists, or whose next offset fell below the log
start offset (a snapshot was installed from the leader), and goes on with the batches from the
snapshot's end offset.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from raftcore.errors import RaftcoreError
from raftcore.raft.damage import Damage, read_intact
from raftcore.raft.replicated_log import snapshot_log
from raftcore.raft.states import LeaderState
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.records import (
    DEFAULT_MAX_KEY_SIZE,
    KvPairs,
    Record,
    RecordBatch,
    decode_kv_pairs,
    iter_batches,
)

if TYPE_CHECKING:
    from raftcore.raft.quorum_state import QuorumState
    from raftcore.raft.replicated_log import ReplicatedLog

__all__ = ["CommittedBatch", "Listener", "ListenerFeed"]

logger = logging.getLogger(__name__)

LISTENER_READ_BYTES = 1 << 20


class CommittedBatch:
    """A committed data batch handed to the listener. Its records are decoded on first use
    of ``records`` (a node with no use for them pays nothing)."""

    __slots__ = (
        "_batch",
        "_from",
        "_records",
        "append_timestamp",
        "base_offset",
        "epoch",
        "last_offset",
        "size_in_bytes",
    )

    def __init__(self, batch: RecordBatch, from_offset: int) -> None:
        self._batch = batch
        self._from = from_offset  # records below it were delivered before (a partial batch)
        self._records: list[Record] | None = None
        self.base_offset: int = batch.base_offset
        self.last_offset: int = batch.last_offset
        self.epoch: int = batch.partition_leader_epoch
        self.append_timestamp: int = batch.max_timestamp
        self.size_in_bytes: int = batch.size_in_bytes

    @property
    def first_offset(self) -> int:
        """The offset of the first record handed out: the base offset, or where the listener
        started inside this batch."""
        return max(self.base_offset, self._from)

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = [r for r in self._batch.records() if r.offset >= self._from]
        return self._records

    def kv_pairs(self, max_key_size: int = DEFAULT_MAX_KEY_SIZE, *, seal: bool = False) -> KvPairs:
        """The records as (key, value) pairs, decoded natively without a Record per record
        (:func:`raftcore.records.decode_kv_pairs`; records whose key is null, empty or longer
        than ``max_key_size`` are reported in ``skipped`` instead). The CRC is not checked
        again: the feed checked it before handing the batch out. ``seal``: values sealed with
        their checksum, as the LMDB state machine stores them
        (:mod:`raftcore.statemachine.checksums`)."""
        return decode_kv_pairs(self._batch.buffer, self._from, max_key_size, False, seal)

    def __repr__(self) -> str:
        return f"CommittedBatch({self.base_offset}..{self.last_offset}, epoch={self.epoch})"


class Listener(Protocol):
    """The application's view of the log (Kafka's RaftClient.Listener).

    ``handle_commit`` receives every committed data batch exactly once and in order, from the
    listener's start offset up to the high watermark (control batches are skipped; their
    offsets still advance). ``handle_leader_change`` is called at most once per epoch; on the
    leader only after the listener has read everything committed before the epoch began, so
    the application sees the whole committed state before it writes as leader (KAFKA-15345).

    With snapshots the listener also needs ``handle_load_snapshot(reader)`` (Kafka's
    handleLoadSnapshot): the reader's state replaces all earlier state, and the next batches
    start at ``reader.snapshot_id.offset``. A listener without it on a log whose start moved
    past it is an error (:class:`RaftcoreError`).
    """

    def handle_commit(self, batches: list[CommittedBatch]) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


class ListenerFeed:
    """How far the listener has read (``next_offset``) and what it was told last."""

    def __init__(
        self,
        listener: Listener | None,
        log: ReplicatedLog,
        quorum: QuorumState,
        next_offset: int | None,
        prefix: str = "",
    ) -> None:
        """``next_offset`` None: a new listener (it loads the latest snapshot if there is one,
        else starts at the log start offset)."""
        self.listener = listener
        self.prefix = prefix
        self.log = log
        self.quorum = quorum
        self.next_offset = log.log_start_offset if next_offset is None else next_offset
        self._fresh = next_offset is None
        self.bytes_read = 0  # bytes of batches handed on (the snapshot_min_bytes trigger)
        self.snapshots_loaded = 0
        # Set by a listener that cannot take more now (it applies off the caller's thread and
        # its backlog is full): delivery stops where it is and resumes from there (Kafka hands
        # a listener its next batch only once it has closed the last one).
        self.paused = False
        # A damaged batch where the listener reads next: the core repairs it, then clears this.
        self.damaged: Damage | None = None
        # A snapshot the listener must load that is damaged here: delivery waits until a
        # copy from the leader replaces it (raftcore.raft.fetch_snapshot).
        self.waiting_for: OffsetAndEpoch | None = None
        self._last_fired = LeaderAndEpoch(None, 0)

    def _maybe_load_snapshot(self, hw: int) -> None:
        """Kafka's rule: below the high watermark, a new listener loads the latest snapshot
        if there is one, and so does a listener whose next offset is below the log start."""
        if self.next_offset >= hw:
            return  # a new listener stays new until there is something to read
        fresh, self._fresh = self._fresh, False
        log = snapshot_log(self.log)
        start = self.log.log_start_offset
        below = self.next_offset < start
        if log is None or not (fresh or below):
            return
        latest = log.latest_snapshot_id()
        if latest is None:
            if below:
                raise RaftcoreError(
                    f"listener at offset {self.next_offset} is below the log start offset "
                    f"{self.log.log_start_offset} and there is no snapshot to load"
                )
            return
        damaged: Any = getattr(log, "snapshot_damaged", None)
        if damaged is not None and damaged(latest) and self.next_offset == 0 == start:
            self.waiting_for = None  # the whole log is here: replayed from 0 instead
            return
        if damaged is not None and damaged(latest):
            # never loaded; the follower downloads the leader's copy (fetch_snapshot), and
            # delivery resumes from here once it is installed
            if self.waiting_for != latest:
                logger.warning(
                    "%s listener at offset %d must load snapshot %s, which is damaged here: "
                    "waiting for the leader's copy",
                    self.prefix,
                    self.next_offset,
                    latest,
                )
            self.waiting_for = latest
            self._fresh = fresh
            return
        self.waiting_for = None
        load: Any = getattr(self.listener, "handle_load_snapshot", None)
        if load is None:
            raise RaftcoreError(
                f"the listener must load snapshot {latest} (its next offset {self.next_offset}, "
                f"log start {self.log.log_start_offset}) but has no handle_load_snapshot"
            )
        reader = log.read_snapshot(latest)
        if reader is None:
            raise RaftcoreError(f"snapshot {latest} vanished before the listener loaded it")
        load(reader)
        self.next_offset = latest.offset
        self.snapshots_loaded += 1

    def rewind(self) -> None:
        """Deliver again from the start: the latest snapshot, then the batches after it; with
        none, the log from its start offset (a listener that rebuilds a damaged state)."""
        self.next_offset = self.log.log_start_offset
        self._fresh = True
        self.waiting_for = None

    def resume_after_repair(self) -> None:
        """A damaged batch was repaired: read on (the next update checks again)."""
        self.damaged = None

    def maybe_fire_leader_change(self) -> None:
        if self.listener is None:
            return
        current = self.quorum.leader_and_epoch()
        last = self._last_fired
        # Kafka's shouldFireLeaderChange: a newer epoch, or this epoch's leader becoming known.
        if current.epoch < last.epoch or current == last:
            return
        if current.epoch == last.epoch and (current.leader_id is None or last.known):
            return
        state = self.quorum.state
        # On the leader: only once the listener has read everything committed before the epoch.
        if isinstance(state, LeaderState) and self.next_offset < state.epoch_start_offset:
            return
        self._last_fired = current
        self.listener.handle_leader_change(current)

    def update(self) -> None:
        """Hand committed batches to the listener: everything below the high watermark, each
        batch once and in order, CRC-checked (KAFKA-14104)."""
        listener = self.listener
        if listener is None:
            return
        hw = self.quorum.state.high_watermark
        if (
            hw is not None
            and not self.paused
            and (self._fresh or self.next_offset < self.log.log_start_offset)
        ):
            self._maybe_load_snapshot(hw)
        # (waiting_for: a damaged snapshot to load first, nothing is delivered past it)
        while (
            hw is not None
            and self.next_offset < hw
            and not self.paused
            and not self.damaged
            and self.waiting_for is None
        ):
            # A copy: the batches handed out may outlive the log's mapped view (a truncation,
            # a closed segment); copying is cheap, decoding the records is left to the listener.
            # Only sound batches (raftcore.raft.damage): a damaged one stops the listener there
            # until it is repaired from the leader.
            # (committed batches only: the bytes past the high watermark are not checked)
            view, damage = read_intact(self.log, self.next_offset, LISTENER_READ_BYTES, hw)
            if damage is not None:
                self.damaged = damage
            data = bytes(view)
            committed: list[CommittedBatch] = []
            next_offset = self.next_offset
            for batch in iter_batches(data):
                if batch.base_offset >= hw:
                    break
                if not batch.is_control:
                    committed.append(CommittedBatch(batch, next_offset))
                next_offset = batch.last_offset + 1
                self.bytes_read += batch.size_in_bytes
            if next_offset == self.next_offset:
                break  # nothing readable: a damaged batch, waiting for its repair
            self.next_offset = next_offset
            if committed:
                listener.handle_commit(committed)
        self.maybe_fire_leader_change()
