"""What a driver asks of the leader, as part of :class:`~raftcore.raft.core.RaftCore`:
appends and their verdicts (:mod:`raftcore.raft.pending`), linearizable reads
(:mod:`raftcore.raft.read_index`) and DeleteRecords (:mod:`raftcore.raft.snapshots`). Every
one raises NotLeaderError, with the leader known, on a replica that does not lead (or is
resigning). The verdicts come in a later Output."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError, RaftInvariantError
from raftcore.raft.pending import Appended, AppendOutcome
from raftcore.raft.read_index import ReadIndex, outcome
from raftcore.raft.snapshots import DeleteRecordsResult
from raftcore.raft.states import LeaderState
from raftcore.raft.values import LeaderAndEpoch

if TYPE_CHECKING:
    from raftcore.raft.purgatory import FetchPurgatory
    from raftcore.raft.quorum_state import QuorumState
    from raftcore.raft.read_index import ReadIndexOutcome
    from raftcore.raft.replicated_log import ReplicatedLog
    from raftcore.raft.snapshots import SnapshotManager

__all__ = ["LeaderRequests", "LogWriteError", "NotLeaderError"]

logger = logging.getLogger(__name__)


class NotLeaderError(RaftcoreError):
    """An append on a replica that is not the leader; ``leader`` is who it thinks leads
    (KIP-595 NOT_LEADER, with the leader to retry at)."""

    def __init__(self, leader: LeaderAndEpoch, message: str = "") -> None:
        super().__init__(
            message
            or f"not the leader; leader is {leader.leader_id if leader.known else 'unknown'} "
            f"in epoch {leader.epoch}"
        )
        self.leader = leader


class LogWriteError(NotLeaderError):
    """The leader's log refused an append with an I/O error (a full disk: ENOSPC; a failing
    one: EIO): the leader resigned at once (EndQuorumEpoch to the voters, naming the best
    placed successors), so a voter that can write takes over. Nothing of the append is
    acknowledged; ``leader`` names nobody yet (the election has just begun) and
    ``__cause__`` is the OSError. A client retries at the next leader, as after any
    NOT_LEADER_OR_FOLLOWER."""


class LeaderRequests:
    """Mixed into RaftCore, whose parts it uses (declared here for the type checker)."""

    if TYPE_CHECKING:
        log: ReplicatedLog
        quorum: QuorumState
        purgatory: FetchPurgatory
        snapshots: SnapshotManager
        prefix: str
        shutting_down: bool
        _append_token: int
        _read_token: int
        _completions: list[AppendOutcome]
        _read_outcomes: list[ReadIndexOutcome]

        @property
        def high_watermark(self) -> int | None: ...
        def leader_and_epoch(self) -> LeaderAndEpoch: ...
        def leader_hint(self) -> LeaderAndEpoch: ...
        def is_leader(self) -> bool: ...
        def resign_leadership(
            self,
            state: LeaderState,
            now: int,
            reason: str,
            successors: tuple[int, ...] | None = None,
        ) -> None: ...

    def append(
        self, records: Iterable[Any], now: int, *, epoch: int | None = None, track: bool = True
    ) -> Appended:
        """Append records as one batch (leader only). Returns the :class:`Appended` (it
        unpacks as ``first, last``).

        Raises NotLeaderError (with the known leader) on any other replica, or when ``epoch``
        is given and is not the current one; LogWriteError (a NotLeaderError) when the log
        cannot be written (an OSError: a full disk, EIO), after resigning -- call ``poll``
        then too, to send the EndQuorumEpoch requests. With ``track``, a later
        :class:`Output` carries the verdict (:class:`AppendOutcome` with the append's
        token): committed once the high watermark passes the last offset while this replica
        still leads the epoch, failed with NOT_LEADER_OR_FOLLOWER as soon as it stops leading
        it. Call ``poll`` afterwards to send what the append triggers.
        """
        state = self._writable_leader(epoch)
        try:
            first, last = self.log.append_as_leader(records, state.epoch)
        except OSError as exc:
            raise self.cannot_write(state, exc, now, "an append") from exc
        return self._appended(state, first, last, now, track)

    def append_batches(
        self,
        batches: Any,
        now: int,
        *,
        epoch: int | None = None,
        track: bool = True,
        checked: Any = None,
    ) -> Appended:
        """Append batches a producer built (leader only): they get the next offsets and this
        epoch; every CRC is checked, once (``checked``: the scan of batches whose CRCs and
        records were checked already, as the log's ``append_batches_as_leader`` takes it).
        Raises and tracks as ``append`` does."""
        state = self._writable_leader(epoch)
        try:
            first, last = self.log.append_batches_as_leader(batches, state.epoch, checked=checked)
        except OSError as exc:
            raise self.cannot_write(state, exc, now, "produced batches") from exc
        return self._appended(state, first, last, now, track)

    def watch(self, first_offset: int, last_offset: int, now: int) -> Appended:
        """Track records already in the leader's log (an idempotent producer's retry of a batch
        this leader holds): the same verdict as for an append, committed once the high
        watermark passes ``last_offset`` while this replica leads the current epoch. The
        leader's log never loses records while it leads, so the range is still its own."""
        state = self._writable_leader(None)
        if not 0 <= first_offset <= last_offset < self.log.end_offset:
            raise ValueError(
                f"{self.prefix} offsets {first_offset}..{last_offset} are not in the log "
                f"(end {self.log.end_offset})"
            )
        return self._appended(state, first_offset, last_offset, now, True)

    def _appended(
        self, state: LeaderState, first: int, last: int, now: int, track: bool
    ) -> Appended:
        token = None
        if track:
            self._append_token += 1
            token = self._append_token
        appended = Appended(first, last, state.epoch, token)
        if track:
            state.pending.add(appended)
        self.purgatory.complete(now)
        return appended

    def takes_appends(self) -> bool:
        """Whether this replica takes appends now (``append``, ``append_batches`` and ``watch``
        would not raise NotLeaderError): it leads, has not asked to resign, is not shutting
        down and is not handing its leadership over. A leader that does not is still the
        leader (``is_leader``), yet refuses every write alike."""
        try:
            self._writable_leader(None)
        except NotLeaderError:
            return False
        return True

    def _writable_leader(self, epoch: int | None) -> LeaderState:
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.resign_requested or self.shutting_down:
            raise NotLeaderError(self.leader_hint())
        if state.transfer is not None:  # handing over: nothing new until it is done
            raise NotLeaderError(self.leader_and_epoch(), "leadership is being transferred")
        if epoch is not None and epoch != state.epoch:
            raise NotLeaderError(self.leader_and_epoch(), f"epoch {epoch} is not current")
        return state

    def cannot_write(self, state: LeaderState, exc: OSError, now: int, what: str) -> LogWriteError:
        """The log refused to write ``what`` with an I/O error while this replica leads
        ``state``: resign at once, naming the most caught-up voters as successors, and return
        the error for the caller. A leader that cannot write can commit nothing more, yet its
        heartbeats would keep its followers from electing one that can; resigning needs no
        disk (Resigned is not written to the quorum-state). What comes next also needs the
        disk: following the next leader writes the quorum-state and the fetched records, and
        a replica that cannot write those stops (the node exits, non-zero), so the replica
        goes on as a follower only if the disk takes writes again by then."""
        logger.error(
            "%s the log cannot be written (%s: %s); resigning epoch %d so that a voter that "
            "can write leads",
            self.prefix,
            what,
            exc,
            state.epoch,
        )
        if self.quorum.state is state:
            self.resign_leadership(state, now, f"the log cannot be written: {exc}")
        return LogWriteError(
            LeaderAndEpoch(None, state.epoch),
            f"{self.prefix} not the leader: the log cannot be written ({exc}); resigned "
            f"epoch {state.epoch}",
        )

    # ---- linearizable reads (raftcore.raft.read_index) -----------------------------------------

    def read_index(self, now: int) -> ReadIndex:
        """Start a linearizable read (leader only; NotLeaderError elsewhere): the read index
        is the high watermark (before the first commit of this epoch, the epoch's start
        offset: every earlier acknowledged write is below it). A later Output's ``reads``
        carries the verdict once a majority confirmed this leadership; poll afterwards."""
        state = self._writable_leader(None)
        hw = state.high_watermark
        self._read_token += 1
        read = ReadIndex(
            self._read_token, state.epoch, state.epoch_start_offset if hw is None else hw, now
        )
        self.reads_confirmed(state.reads.add(read))
        return read

    def reads_confirmed(self, reads: list[ReadIndex]) -> None:
        leader = self.leader_and_epoch()
        self._read_outcomes.extend(outcome(r, leader, True) for r in reads)

    def delete_records(self, offset: int, now: int) -> DeleteRecordsResult:
        """DeleteRecords on the leader (NotLeaderError elsewhere): see
        :meth:`SnapshotManager.delete_records`. Poll after it: a snapshot may be due."""
        self._writable_leader(None)
        return self.snapshots.delete_records(offset)

    def retain_below(self, offset: int, why: str) -> bool:
        """Retention (:mod:`raftcore.raft.retention`) lets the log go below ``offset``: as
        DeleteRecords, a snapshot covering it becomes due and the log start follows, on the
        leader only (followers follow its log start), never past the high watermark. Whether
        it was taken; poll after it."""
        hw = self.high_watermark
        if not self.is_leader() or hw is None or offset > hw:
            return False
        if offset <= self.log.log_start_offset:
            return False
        return self.snapshots.request_log_start(offset, why)

    # ---- pending appends (the produce purgatory, raftcore.raft.pending) ---------------------

    def _settle_pending(self) -> None:
        """Acknowledge the tracked appends the high watermark passed, while this replica still
        leads the epoch that appended them (the leader never truncates its own log)."""
        state = self.quorum.state
        if not isinstance(state, LeaderState) or not state.pending:
            return
        done = state.pending.take_committed(state.high_watermark)
        if done:
            leader = self.leader_and_epoch()
            end = self.log.end_offset
            for appended in done:
                if appended.epoch != state.epoch or appended.last_offset >= end:
                    raise RaftInvariantError(
                        f"{self.prefix} pending append {appended} is not in the log of the "
                        f"leader of epoch {state.epoch} (end {end})"
                    )
                self._completions.append(AppendOutcome(appended, Errors.NONE, leader))

    def _abandon_pending(self, old: LeaderState) -> None:
        """Leadership of ``old.epoch`` ended: every append still pending fails at once with
        NOT_LEADER_OR_FOLLOWER and the leader known now. Whatever this replica's high
        watermark does later says nothing about whose records are at those offsets."""
        leader = self.leader_hint()
        self._read_outcomes.extend(outcome(r, leader, False) for r in old.reads.take_all())
        if not old.pending:
            return
        for appended in old.pending.take_all():
            self._completions.append(AppendOutcome(appended, Errors.NOT_LEADER_OR_FOLLOWER, leader))
