"""Damaged batches (protocol-aware recovery, FAST'18 "CTRL"): a replica never serves a byte it
cannot vouch for, and repairs a damaged committed batch from the leader's intact copy.

Damage is found three ways: on the way out (every batch a leader serves, to a replica or a
consumer, is checked -- CRC, header, offsets following on -- by :func:`read_intact`), by the
node's scrubber over sealed segments, and when the listener replays committed batches. Each
reports :class:`Damage` (an offset in the first batch found damaged) to the core, which decides:

- a follower's damaged batch is fetched again from the leader -- a repair fetch from that
  offset, validated as any fetch but acknowledging nothing -- and written in place once its
  bytes check out: the same base offset, the epoch the epoch cache has there, a sound CRC, and
  exactly the room the damaged batch took (the batch after it must follow). It is never
  truncated by the follower itself, committed or not: the follower may have acknowledged it,
  and an acknowledgement can be what commits it; a leader whose log diverges there answers
  the repair fetch with where to truncate, as any fetch;
- a leader with damage in its log (committed or not) hands over as soon as another voter
  fetched past the damaged offset without repairing (it holds an intact copy): a leadership
  transfer to the one furthest on (appends stop until it has caught up, then the leader
  resigns naming it first, so every voter votes for it); it repairs as a follower. The damaged
  range is never served meanwhile. A repair fetch at or past the leader's log end is answered
  with a divergence there: the fetcher's batch was never committed, and it truncates it.

A damaged replica stays a voter: its votes and acknowledgements stand (its log's end and the
epochs it holds are what they were). It may stand for election, but only every other time its
timeout expires, so that a healthy voter leads first where there is one (when every voter has
damage somewhere, a damaged leader repairs the others before it hands over). Where no intact
copy exists (the leader's copy is damaged too, or the leader is the only voter), the replica
says so and keeps not serving that range.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from raftcore.errors import CorruptRecordError, LogError
from raftcore.records import scan_batches, sound_batch

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["Damage", "read_intact"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Damage:
    """``offset`` lies in the first damaged batch (the offset after the last sound one)."""

    offset: int
    reason: str

    def __str__(self) -> str:
        return f"offset {self.offset} ({self.reason})"


def read_intact(
    log: Any, offset: int, max_bytes: int, end_offset: int | None = None
) -> tuple[Any, Damage | None]:
    """What may be served from ``offset``: the sound batches of ``log.read(offset,
    max_bytes)`` up to the first damaged one, and that damage (None when all are sound).
    A batch is sound when its header parses, its CRC matches, its offsets follow the one
    before it, and the first holds ``offset``. With ``end_offset`` (a reader of committed
    batches: the high watermark), the batches from the first that starts at or past it are
    left out unchecked: a reader at the log's end would otherwise check up to ``max_bytes``
    of batches it does not take, at every step of the high watermark."""
    try:
        data = log.read(offset, max_bytes)
    except CorruptRecordError as exc:  # a header the read could not walk past
        return b"", Damage(offset, str(exc))
    if end_offset is not None and len(data) > 0:
        data = _below(data, end_offset)
    if len(data) == 0:
        return data, None
    scan = scan_batches(data, check_crc=True)
    good = scan.count
    reason = scan.error
    if scan.discontinuity >= 0:
        good, reason = scan.discontinuity, scan.discontinuity_reason
    elif good and not int(scan.base_offsets[0]) <= offset <= int(scan.last_offsets[0]):
        good, reason = 0, f"the batch read for offset {offset} holds {int(scan.base_offsets[0])}"
    if reason is None:
        return data, None
    if good == 0:
        return data[:0], Damage(offset, reason)
    end = int(scan.positions[good - 1]) + int(scan.sizes[good - 1])
    return data[:end], Damage(int(scan.last_offsets[good - 1]) + 1, reason)


def _below(data: Any, end_offset: int) -> Any:
    """``data`` up to its first batch starting at or past ``end_offset``, when that batch
    follows on from the one before it (headers only). Otherwise all of ``data`` is kept, for
    the check to find what is wrong: a damaged base offset must not hide a committed batch."""
    headers = scan_batches(data, check_crc=False)
    past = np.flatnonzero(headers.base_offsets[: headers.count] >= end_offset)
    if len(past) == 0 or past[0] == 0:
        return data
    k = int(past[0])
    if int(headers.base_offsets[k]) != int(headers.last_offsets[k - 1]) + 1:
        return data
    return data[: int(headers.positions[k])]


class DamageTracker:
    """The damage a replica knows of in its own log (the lowest first), and its repair."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.damaged: Damage | None = None
        self.found = 0  # batches found damaged, ever (metrics)
        self.repaired = 0
        self.unrepairable = 0
        self.alone_said = False
        # the epoch in which a replica's fetch stopped at the damage (its leader hands over)
        # a damaged voter stands for election only every other time its timeout expires:
        # a healthy voter, if any, leads first (stand_at: when it may stand this time)
        self.stand_at: float | None = None

    def __bool__(self) -> bool:
        """Damage still in the log (a truncation or a new log start can take it away)."""
        damage = self.damaged
        if damage is None:
            return False
        if not self._log.log_start_offset <= damage.offset < self._log.end_offset:
            self.clear()
            return False
        return True

    def may_stand(self, now: int, election_timeout_ms: int) -> bool:
        """Whether a voter whose election (or fetch) timeout expired may stand now; when
        damaged, only once another two election timeouts have passed (see stand_at)."""
        if not self:
            return True
        if self.stand_at is None:
            self.stand_at = now + 2 * election_timeout_ms
            return False
        if now >= self.stand_at:
            self.stand_at = None
            return True
        return False

    def report(self, core: RaftCore, damage: Damage, now: int, where: str) -> None:
        """A damaged batch was found (``where``: serving, scrubbing, replaying)."""
        known = self.damaged
        if known is not None and known.offset <= damage.offset:
            return
        self.found += 1
        self.damaged = damage
        logger.error(
            "%s damaged batch at %s, found %s; it is not served until repaired",
            core.prefix,
            damage,
            where,
        )
        decide(core, now)

    def clear(self) -> None:
        self.damaged = None
        self.stand_at = None


def decide(core: RaftCore, now: int) -> None:
    """What the damage known calls for, now (see the module docstring): a leader hands over
    once another voter can lead in its place. A follower never truncates a damaged batch
    itself, committed or not: it may have acknowledged it, and a record it acknowledged may be
    committed by that acknowledgement. It fetches it again; a leader whose log diverges there
    answers with where to truncate, as to any fetch."""
    from raftcore.raft.states import LeaderState

    tracker = core.damage
    if not tracker:
        return
    snapshot_log = core.snapshots.log
    latest = snapshot_log.latest_snapshot_id() if snapshot_log is not None else None
    if latest is not None and latest.offset > tracker.damaged.offset:  # type: ignore[union-attr]
        # A snapshot of this replica's own holds everything below it: the log needs the
        # damaged batch no more.
        core.snapshots.move_log_start(latest, f"the damaged batch at {tracker.damaged} is below it")
        if not tracker:
            return
    state = core.quorum.state
    if not isinstance(state, LeaderState) or state.resign_requested:
        return
    if not state.voters - {core.node_id}:
        if not tracker.alone_said:
            tracker.alone_said = True
            logger.error(
                "%s no other replica holds a copy of the damaged batch at %s: it stays "
                "unserved (restore the log from a backup, or add a voter that has it)",
                core.prefix,
                tracker.damaged,
            )
        return
    if state.transfer is not None or state.voter_change is not None:
        return  # one change at a time; asked again at the next poll
    successor = _successor(core, state, tracker.damaged.offset, now)  # type: ignore[union-attr]
    if successor is not None:
        logger.warning(
            "%s handing leadership to %d: its log is damaged at %s; a healthy voter leads "
            "while it repairs",
            core.prefix,
            successor,
            tracker.damaged,
        )
        core.transfer_leadership(successor, core.config.fetch_timeout_ms, now)


def _successor(core: RaftCore, state: Any, offset: int, now: int) -> int | None:
    """The voter to lead in this one's place: of those whose last fetch was no repair and
    reached past the damaged offset (each holds an intact copy), the one furthest on. It leads
    by a leadership transfer (raftcore.raft.reconfig): appends stop until it has caught up,
    so that every voter would vote for it (a bare resignation let a damaged leader with the
    longest log be elected again and again: simulation seed 42, a 2-voter set)."""
    best, best_end = None, offset
    recent = now - core.config.fetch_timeout_ms  # a voter heard from lately (not a lost disk)
    for r in state.voter_states.values():
        end = r.end_offset
        if r.replica_id == core.node_id or r.repairing or end is None or r.last_fetch_ms < recent:
            continue
        if end > best_end:
            best, best_end = r.replica_id, end
    return best


def repair_request_offset_and_epoch(core: RaftCore) -> tuple[int, int]:
    """(fetch offset, last fetched epoch) of a repair fetch: the damaged offset, and the epoch
    of the record before it (or the log start's)."""
    log = core.log
    offset = core.damage.damaged.offset  # type: ignore[union-attr]
    if offset <= log.log_start_offset:
        earliest_snapshot = getattr(log, "earliest_snapshot_id", None)
        earliest = earliest_snapshot() if earliest_snapshot is not None else None
        return offset, earliest.epoch if earliest is not None and earliest.offset == offset else 0
    return offset, max(log.epoch_for_offset(offset - 1), 0)


def _is_control(batch: bytes) -> bool:
    """Attribute bit 5 of a sound batch (its attributes are at byte 21)."""
    return bool(int.from_bytes(batch[21:23], "big") & 0x20)


def repair_from(core: RaftCore, records: Any, source: int, now: int) -> bool:
    """Write the leader's copy of the damaged batch in place; True once repaired. When the
    leader's batch there is of another epoch, ours was never committed -- a committed batch is
    in every later leader's log, at the same place and of the same epoch -- and it is
    truncated, as a fetch that diverged there would have it. A batch that does not hold the
    damaged offset answers another fetch (late, or twice), and is ignored."""
    tracker = core.damage
    damage = tracker.damaged
    if damage is None:
        return True
    log = core.log
    try:
        copy, base, last, epoch = sound_batch(records)
    except CorruptRecordError as exc:
        logger.error("%s leader %d's copy of %s is damaged: %s", core.prefix, source, damage, exc)
        return False
    if not base <= damage.offset <= last:
        # The answer to an earlier fetch, come late (or twice): not the batch asked for. The
        # next repair fetch asks again (seed 182: such an answer was taken for the leader's
        # batch at the damaged offset, and a committed tail truncated).
        return False
    ours = log.epoch_for_offset(damage.offset)
    if epoch != ours:
        # committed here, as far as this replica knows (raftcore.raft.committed): never cut
        if damage.offset < core.committed.observe(core.quorum.state.high_watermark):
            tracker.unrepairable += 1
            logger.error(
                "%s leader %d's batch at %d (offset %d, epoch %d) is not the committed one "
                "damaged here (epoch %d); not repaired",
                core.prefix,
                source,
                damage.offset,
                base,
                epoch,
                ours,
            )
            return False
        offset = log.truncate_to(damage.offset)
        core.on_truncated(offset, now)
        tracker.clear()
        logger.info(
            "%s truncated the damaged uncommitted batch at %s: leader %d holds another there",
            core.prefix,
            damage,
            source,
        )
        return True
    try:
        base, last = log.overwrite_batch(records)
    except (CorruptRecordError, LogError, ValueError) as exc:
        tracker.unrepairable += 1
        logger.error(
            "%s cannot repair the damaged batch at %s from leader %d's copy: %s",
            core.prefix,
            damage,
            source,
            exc,
        )
        return False
    tracker.repaired += 1
    tracker.clear()
    if _is_control(copy):
        # The voters are read again, this batch included: it may be a KRaftVersion or Voters
        # record that its damage hid. (A data batch changes no voter: no rescan of the log.)
        from raftcore.raft import reconfig

        reconfig.load_history(core)
    logger.info(
        "%s repaired the damaged batch %d..%d from leader %d's copy",
        core.prefix,
        base,
        last,
        source,
    )
    return True
