"""Snapshots in the core (KIP-630): when to take one, checking the one the driver takes, and
when the log start offset may move. Every decision is here, in the pure core, with time
passed in, so the simulation drives it.

Taking a snapshot is a handshake with the driver (the node, or the simulation):

1. The core raises ``Output.snapshot_due`` when the listener has read enough since the last
   snapshot (``snapshot_min_records`` records or ``snapshot_min_bytes`` bytes, or
   ``snapshot_interval_ms`` with at least one record) -- one at a time: no flag while a
   snapshot is being written.
2. The driver calls ``core.create_snapshot(end_offset, now)`` with the offset its state
   machine has applied up to, which may trail the listener's next offset (a node applies on
   its own thread). The core checks it: at a batch boundary, with
   ``latest snapshot < end_offset <= listener's next offset <= high watermark``; the id's
   epoch is the epoch of the record at ``end_offset - 1``. It returns a writer (or None when
   the snapshot exists already).
3. The driver writes its state into the writer, freezes it, and calls
   ``core.snapshot_frozen(snapshot_id, now)`` -- or ``core.snapshot_abandoned(now)``.

The log start offset (seed 003, KIP-630): the leader moves it to its latest snapshot only
when every replica it tracks (voters, and observers that fetched) has fetched at least that
offset, or when the snapshot has been known for ``max_replication_lag_ms`` (the snapshot's
age stands for the age of the offset: it is never older than its last record). A follower
moves its own to the newest snapshot it holds at or below the log start offset the leader
reports.

DeleteRecords (a client asking for the log to start at an offset) goes by the same rules: the
leader checks the offset (at most the high watermark), makes a snapshot due that covers it,
and the log start moves when the rules above allow; the driver answers the client once the
log start offset has reached the offset (or its timeout passed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.raft.control_records import kraft_version_record, voters_record
from raftcore.raft.replicated_log import snapshot_log
from raftcore.raft.states import LeaderState
from raftcore.raft.values import OffsetAndEpoch
from raftcore.records import iter_batches

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["DeleteRecordsResult", "InvalidSnapshotError", "SnapshotManager"]

logger = logging.getLogger(__name__)

INF = float("inf")


class InvalidSnapshotError(RaftcoreError, ValueError):
    """A snapshot the core refuses to create: past the listener's offset or the high
    watermark, not past the latest snapshot, or not at a batch boundary."""


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    """The leader's verdict on a DeleteRecords: ``error`` (Kafka's code), the ``offset`` asked
    for (-1 resolved to the high watermark) and the ``low_watermark`` (the log start offset)
    now. With no error and ``low_watermark < offset`` the deletion is under way: the driver
    waits for the log start offset to reach ``offset``."""

    error: int
    offset: int
    low_watermark: int

    @property
    def done(self) -> bool:
        return self.error != Errors.NONE or self.low_watermark >= self.offset


class SnapshotManager:
    """The core's snapshot bookkeeping. Lives as long as the core (a restart starts over)."""

    def __init__(self, core: RaftCore, now_hint: int = 0) -> None:
        self.core = core
        self.config = core.config
        self.log = snapshot_log(core.log)
        if self.config.takes_snapshots and self.log is None:
            raise RaftcoreError(
                f"{core.prefix} snapshots are configured but {type(core.log).__name__} keeps none"
            )
        self.writer: Any = None
        self.last_snapshot_ms: int | None = None
        self.bytes_at_last = 0
        # When the latest snapshot became known to this core (the lag rule's clock).
        self._latest: OffsetAndEpoch | None = None
        self._latest_since = 0
        # Snapshots this core knows of at or above the log start (a follower moves its log
        # start to one of them).
        self._known: list[OffsetAndEpoch] = []
        self.taken = self.installed = self.log_start_moves = self.refused = 0
        # DeleteRecords: the log start offset a client asked for (the leader's).
        self.requested_log_start = 0
        self._log_start_moved = False  # since the last Output
        # A snapshot of this node failed its checks (at start, or when serving it): a new one
        # is due as soon as the listener is past it, to stand in its place.
        self.replace_due = False
        # The follower's refusals of downloaded snapshots in a row (fetch_snapshot's backoff)
        self.refused_in_row = 0
        self.refused_logged_at: int | None = None
        # When the leader last checked each snapshot it serves (fetch_snapshot)
        self.served_checked_at: dict[OffsetAndEpoch, int] = {}

    def start(self, now: int) -> None:
        self.last_snapshot_ms = now
        if self.log is not None:
            self.log.truncate_to_latest_snapshot()  # a snapshot ahead of the log after a crash
            for sid in (self.log.earliest_snapshot_id(), self.log.latest_snapshot_id()):
                self._remember(sid)
            latest = self.log.latest_snapshot_id()
            damaged = getattr(self.log, "snapshot_damaged", None)
            if latest is not None and damaged is not None and damaged(latest):
                self.replace_damaged(latest, "found at start")

    def replace_damaged(self, sid: OffsetAndEpoch, when: str) -> None:
        """This node's snapshot ``sid`` failed its checks (``when``) and was set aside: take a
        new one once the listener is past it (a follower whose listener must load it gets the
        leader's copy instead, :mod:`raftcore.raft.fetch_snapshot`)."""
        if not self.replace_due:
            logger.warning(
                "%s snapshot %r is damaged (%s): a new snapshot is due once the state is past "
                "offset %d",
                self.core.prefix,
                sid,
                when,
                sid.offset,
            )
        self.replace_due = True

    def _remember(self, sid: OffsetAndEpoch | None) -> None:
        if sid is not None and sid not in self._known:
            self._known.append(sid)
            self._known.sort(key=lambda s: s.offset)

    # ---- taking a snapshot --------------------------------------------------------------------

    def _base_offset(self) -> int:
        latest = self.log.latest_snapshot_id() if self.log is not None else None
        return latest.offset if latest is not None else 0

    def take_log_start_moved(self) -> bool:
        """Whether the log start moved since the last call (``Output.log_start_moved``)."""
        moved, self._log_start_moved = self._log_start_moved, False
        return moved

    def latest_offset(self) -> int:
        """The end offset of the latest snapshot (0 without one)."""
        return self._base_offset()

    def wanted_end(self) -> int:
        """Where a snapshot with no state of its own (a node that only replicates the log)
        ends: at the log start asked for (DeleteRecords, retention, the leader's log start)
        once the listener has read that far, else at everything the listener has read. A
        snapshot ends at a batch boundary (KAFKA-14618): an offset asked for inside a batch
        is taken to that batch's end, so the log start may pass it by the rest of the batch
        (DeleteRecords' low watermark says where it is)."""
        read_to = self.core.listener_next_offset
        requested = self.requested_log_start
        if not self.latest_offset() < requested <= read_to:
            return read_to
        return self._batch_end_from(requested)

    def _batch_end_from(self, offset: int) -> int:
        """The first batch boundary at or after ``offset`` (the end of the batch holding
        ``offset - 1``); ``offset`` itself when that batch cannot be read."""
        log = self.core.log
        if offset - 1 < log.log_start_offset:
            return offset
        batch = next(iter_batches(log.read(offset - 1, 1)), None)
        return offset if batch is None else max(offset, int(batch.last_offset) + 1)

    def due(self, now: int) -> bool:
        """Raise ``Output.snapshot_due``? Only with snapshots on and none being written."""
        cfg = self.config
        if self.writer is not None or not cfg.takes_snapshots or self.core.listener is None:
            return False
        feed = self.core.feed
        hw = self.core.high_watermark
        read = feed.next_offset - self._base_offset()
        if hw is None or read <= 0 or feed.next_offset > hw:
            return False
        if self.replace_due:
            return True  # a damaged snapshot to stand in for (see replace_damaged)
        if self.requested_log_start > self._base_offset() and (
            feed.next_offset >= self.requested_log_start
        ):
            return True  # a DeleteRecords waits for a snapshot that covers its offset
        if cfg.snapshot_min_records and read >= cfg.snapshot_min_records:
            return True
        if (
            cfg.snapshot_min_bytes
            and feed.bytes_read - self.bytes_at_last >= cfg.snapshot_min_bytes
        ):
            return True
        last = self.last_snapshot_ms if self.last_snapshot_ms is not None else now
        return bool(cfg.snapshot_interval_ms) and now - last >= cfg.snapshot_interval_ms

    def next_deadline(self, now: int) -> float:
        cfg = self.config
        deadline = INF
        if cfg.snapshot_interval_ms and self.writer is None and self.last_snapshot_ms is not None:
            deadline = self.last_snapshot_ms + cfg.snapshot_interval_ms
        if (
            self._latest is not None
            and self.log is not None
            and isinstance(self.core.quorum.state, LeaderState)
            and self._latest.offset > self.core.log.log_start_offset
        ):
            deadline = min(deadline, self._latest_since + cfg.max_replication_lag_ms)
        return deadline

    def create(self, end_offset: int, now: int) -> Any:
        """Check the driver's snapshot and return a writer for it (None if it exists)."""
        if self.log is None:
            raise InvalidSnapshotError(f"{self.core.prefix} this log keeps no snapshots")
        if self.writer is not None:
            raise InvalidSnapshotError(
                f"{self.core.prefix} snapshot {self.writer.snapshot_id} is still being written"
            )
        feed = self.core.feed
        hw = self.core.high_watermark
        # The state machine may trail the listener (the node applies on its own thread): any
        # offset up to the listener's next one will do, never past it.
        if end_offset > feed.next_offset:
            raise InvalidSnapshotError(
                f"{self.core.prefix} snapshot at {end_offset}, but the listener has read up to "
                f"{feed.next_offset}"
            )
        if hw is None or end_offset > hw:
            raise InvalidSnapshotError(
                f"{self.core.prefix} snapshot at {end_offset} is past the high watermark {hw}"
            )
        if end_offset <= self._base_offset():
            raise InvalidSnapshotError(
                f"{self.core.prefix} snapshot at {end_offset} is not past the latest "
                f"{self.log.latest_snapshot_id()}"
            )
        epoch = self.log.epoch_for_offset(end_offset - 1)
        # KIP-853: the voter set in force at the snapshot's end travels in its header
        history = self.core.history
        header_records = []
        if history.kraft_version_at(end_offset - 1) >= 1:
            header_records = [
                kraft_version_record(history.kraft_version_at(end_offset - 1)),
                voters_record(history.at(end_offset - 1)),
            ]
        try:
            writer = self.log.create_new_snapshot(
                OffsetAndEpoch(end_offset, epoch), header_records=header_records
            )
        except ValueError as exc:
            raise InvalidSnapshotError(f"{self.core.prefix} {exc}") from None
        self.writer = writer
        return writer

    def frozen(self, snapshot_id: OffsetAndEpoch, now: int) -> None:
        writer = self.writer
        if writer is None or writer.snapshot_id != snapshot_id:
            raise InvalidSnapshotError(
                f"{self.core.prefix} snapshot {snapshot_id} was not the one being written "
                f"({None if writer is None else writer.snapshot_id})"
            )
        self.writer = None
        self.last_snapshot_ms = now
        self.bytes_at_last = self.core.feed.bytes_read
        self.taken += 1
        self.replace_due = False
        self._remember(snapshot_id)
        logger.info("%s snapshot %r frozen", self.core.prefix, snapshot_id)

    def abandoned(self, now: int) -> None:
        self.writer = None
        self.last_snapshot_ms = now  # the interval trigger waits a whole interval again

    def on_snapshot_installed(self, snapshot_id: OffsetAndEpoch) -> None:
        self.installed += 1
        self._remember(snapshot_id)

    # ---- the log start offset -----------------------------------------------------------------

    def delete_records(self, offset: int) -> DeleteRecordsResult:
        """The leader's check of a DeleteRecords (Kafka's codes): -1 stands for the high
        watermark; past it, or below -1, is OFFSET_OUT_OF_RANGE; with snapshots off the log
        prefix cannot go (POLICY_VIOLATION, as Kafka answers for a compacted topic); a leader
        that does not know its high watermark yet answers OFFSET_NOT_AVAILABLE. An offset at
        or below the log start is done at once; above it, a snapshot covering it becomes due
        and the log start follows by the usual rules."""
        start = self.core.log.log_start_offset
        hw = self.core.high_watermark
        if hw is None:
            return DeleteRecordsResult(Errors.OFFSET_NOT_AVAILABLE, offset, start)
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            return DeleteRecordsResult(Errors.OFFSET_OUT_OF_RANGE, offset, start)
        if target <= start:
            return DeleteRecordsResult(Errors.NONE, target, start)
        if not self.request_log_start(target, "DeleteRecords"):
            return DeleteRecordsResult(Errors.POLICY_VIOLATION, target, start)
        return DeleteRecordsResult(Errors.NONE, target, start)

    def request_log_start(self, offset: int, why: str) -> bool:
        """Ask that the log start reach ``offset`` (committed: the caller checked): a snapshot
        covering it becomes due, and the log start follows by the usual rules. False when
        this core takes no snapshots (its log prefix cannot go)."""
        if not self.config.takes_snapshots or self.core.listener is None:
            return False
        if offset > self.requested_log_start:
            self.requested_log_start = offset
            logger.info(
                "%s %s below %d: a snapshot is due, the log start follows",
                self.core.prefix,
                why,
                offset,
            )
        return True

    def maybe_advance_as_leader(self, state: LeaderState, now: int) -> None:
        """Seed 003: move the log start to the latest snapshot once every tracked replica has
        fetched past it, or once the snapshot is ``max_replication_lag_ms`` old."""
        log = self.log
        if log is None:
            return
        latest = log.latest_snapshot_id()
        if latest != self._latest:
            self._latest, self._latest_since = latest, now
        if latest is None or latest.offset <= self.core.log.log_start_offset:
            return
        hw = state.high_watermark
        if hw is None or latest.offset > hw:
            return
        replicas = [s for v, s in state.voter_states.items() if v != state.local_id]
        replicas.extend(state.observer_states.values())
        caught_up = all(
            r.end_offset is not None and r.end_offset >= latest.offset for r in replicas
        )
        if caught_up or now - self._latest_since >= self.config.max_replication_lag_ms:
            self.move_log_start(latest, "every replica has it" if caught_up else "lag expired")

    def maybe_advance_as_follower(self, leader_log_start: int) -> None:
        """Move the log start to the newest snapshot held at or below the leader's. Taking
        snapshots on request, ask for one there: a node that only replicates takes it exactly
        there; a state machine takes it where it has applied to, which a later move of the
        leader's log start lets this one follow."""
        log = self.log
        if log is None or leader_log_start <= self.core.log.log_start_offset:
            return
        if self.config.snapshots_on_request and leader_log_start > self._base_offset():
            self.requested_log_start = max(self.requested_log_start, leader_log_start)
        candidates = [s for s in self._known if s.offset <= leader_log_start]
        if candidates:
            self.move_log_start(candidates[-1], f"the leader's log starts at {leader_log_start}")

    def move_log_start(self, sid: OffsetAndEpoch, reason: str) -> None:
        assert self.log is not None
        if self.log.delete_before_snapshot(sid):
            self.log_start_moves += 1
            self._log_start_moved = True
            self._known = [s for s in self._known if s.offset >= sid.offset]
            checked = self.served_checked_at
            self.served_checked_at = {s: t for s, t in checked.items() if s.offset >= sid.offset}
            logger.info("%s log start offset -> %d (%s)", self.core.prefix, sid.offset, reason)
