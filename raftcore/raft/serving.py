"""What a reader of committed records is served from a leader's log: :func:`read_committed`.

A plain function of the replica's answers (does it lead, in which epoch, its high watermark)
and its log, written once for the native and the in-memory log. The rules, in the order they
are checked (Kafka's, for a consumer's Fetch):

1. only the leader serves committed records (NOT_LEADER);
2. a reader that names the leader epoch it believes in is fenced when that epoch is older than
   the leader's, and told it is unknown when newer (KIP-320: FENCED, UNKNOWN_EPOCH);
3. a new leader does not know its high watermark until a record of its own epoch is committed
   (KIP-595), and serves nothing until then (NOT_READY: the reader waits, then asks again);
4. an offset below the log start or past the log end is out of range (OUT_OF_RANGE);
5. otherwise the sound batches from the offset that lie wholly below the high watermark, the
   first whole even when larger than ``max_bytes`` (KIP-74); a damaged batch and what follows
   stay in the log (:mod:`raftcore.raft.damage`), and a read that finds only damage is a
   storage error (DAMAGED).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.raft.damage import Damage, read_intact
from raftcore.records import scan_batches

if TYPE_CHECKING:
    from raftcore.raft.replicated_log import ReplicatedLog

__all__ = ["CommittedRead", "ServingRule", "read_committed"]


class ServingRule(enum.Enum):
    """Which rule decided a read (the rules of :mod:`raftcore.raft.serving`, in order)."""

    NOT_LEADER = "not the leader"
    FENCED = "fenced: the reader's leader epoch is older"
    UNKNOWN_EPOCH = "the reader's leader epoch is newer"
    NOT_READY = "a new leader that does not know its high watermark yet"
    OUT_OF_RANGE = "offset out of range"
    DAMAGED = "only damaged batches at the offset"
    SERVED = "served"


_ERRORS = {
    ServingRule.NOT_LEADER: Errors.NOT_LEADER_OR_FOLLOWER,
    ServingRule.FENCED: Errors.FENCED_LEADER_EPOCH,
    ServingRule.UNKNOWN_EPOCH: Errors.UNKNOWN_LEADER_EPOCH,
    ServingRule.NOT_READY: Errors.NOT_LEADER_OR_FOLLOWER,
    ServingRule.OUT_OF_RANGE: Errors.OFFSET_OUT_OF_RANGE,
    ServingRule.DAMAGED: Errors.KAFKA_STORAGE_ERROR,
    ServingRule.SERVED: Errors.NONE,
}


@dataclass(frozen=True, slots=True)
class CommittedRead:
    """The outcome of :func:`read_committed`: the rule that decided it, the records (batches
    wholly below the high watermark; a view of the log where it can be), the high watermark
    and log start offset (-1 unless served), and the damage found (the caller reports it)."""

    rule: ServingRule
    records: Any = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    damage: Damage | None = None

    @property
    def error_code(self) -> int:
        """Kafka's error code for the rule (NONE when served)."""
        return _ERRORS[self.rule]

    @property
    def names_the_leader(self) -> bool:
        """The answer carries the leader to go to (KIP-951's CurrentLeader)."""
        return self.rule in (
            ServingRule.NOT_LEADER,
            ServingRule.FENCED,
            ServingRule.UNKNOWN_EPOCH,
            ServingRule.NOT_READY,
        )


def read_committed(
    log: ReplicatedLog,
    *,
    leader: bool,
    epoch: int,
    high_watermark: int | None,
    offset: int,
    max_bytes: int,
    leader_epoch: int = -1,
) -> CommittedRead:
    """What a reader at ``offset`` is served by a replica that is ``leader`` (or not) in
    ``epoch`` with ``high_watermark``: at most ``max_bytes`` (the first batch whole; 0 reads
    nothing), and only if ``leader_epoch`` (-1: not given) is the replica's epoch."""
    if not leader:
        return CommittedRead(ServingRule.NOT_LEADER)
    if 0 <= leader_epoch < epoch:
        return CommittedRead(ServingRule.FENCED)
    if leader_epoch > epoch:
        return CommittedRead(ServingRule.UNKNOWN_EPOCH)
    if high_watermark is None:
        return CommittedRead(ServingRule.NOT_READY)
    start = log.log_start_offset
    if offset < start or offset > log.end_offset:
        return CommittedRead(ServingRule.OUT_OF_RANGE)
    if offset >= high_watermark or max_bytes <= 0:
        return CommittedRead(ServingRule.SERVED, b"", high_watermark, start)
    data, damage = read_intact(log, offset, max_bytes, high_watermark)
    if damage is not None and len(data) == 0:
        return CommittedRead(ServingRule.DAMAGED, b"", high_watermark, start, damage)
    records = data[: _wholly_below(data, high_watermark)]
    return CommittedRead(ServingRule.SERVED, records, high_watermark, start, damage)


def _wholly_below(data: Any, high_watermark: int) -> int:
    """Byte length of the batches in ``data`` that lie wholly below ``high_watermark``."""
    scan = scan_batches(data, check_crc=False)
    end = 0
    for i in range(scan.count):
        if int(scan.last_offsets[i]) >= high_watermark:
            break
        end = int(scan.positions[i] + scan.sizes[i])
    return end
