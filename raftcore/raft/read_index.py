"""Linearizable reads (the read index of the Raft thesis, section 6.4, in KIP-595's pull model).

A leader may answer a read from its state only if it still leads when the read arrives: a
deposed leader that has not heard of its successor would serve a state without the writes
the new leader acknowledged since. So a read on the leader:

1. takes the **read index**: the high watermark now. The leader has one only after it
   committed an offset in its own epoch (KIP-595), so the index covers every write any
   earlier leader acknowledged.
2. confirms leadership with a **quorum round**: a BeginQuorumEpoch goes to every voter whose
   last one was sent before the read arrived, and the read is confirmed once a majority of
   voters (the leader included) answered, without error, a BeginQuorumEpoch of this epoch sent
   at or after that time. A voter that answers so had not moved to a later epoch when it
   answered, after the read arrived; a majority of them leaves no majority for a later leader
   before then. Fetches are not enough: a fetch that arrives after the read may have been sent
   before it, by a voter that has voted for another leader since.
3. the driver waits until its state machine has applied up to the index, and reads.

A leader of a lone voter confirms at once. Leadership lost before a majority answered fails
every read in progress with NOT_LEADER_OR_FOLLOWER and the leader known then (KIP-951), as
tracked appends fail. Everything here is pure: time comes in, messages go out through the
core.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftcore.error_codes import Errors
from raftcore.raft.values import LeaderAndEpoch

__all__ = ["ReadIndex", "ReadIndexOutcome", "ReadRounds"]


@dataclass(frozen=True, slots=True)
class ReadIndex:
    """A read in progress: its token (for the driver), the epoch it was asked in, the read
    index (apply up to here, exclusive, before reading) and when it was asked."""

    token: int
    epoch: int
    index: int
    asked_ms: int


@dataclass(frozen=True, slots=True)
class ReadIndexOutcome:
    """The verdict on a read: ``error`` NONE (the index is safe to read at) or
    NOT_LEADER_OR_FOLLOWER with ``leader`` the leader known now."""

    read: ReadIndex
    error: int
    leader: LeaderAndEpoch


@dataclass(slots=True)
class _Round:
    read: ReadIndex
    confirmed: set[int] = field(default_factory=set)


class ReadRounds:
    """The reads waiting for their quorum round, on one leader's state (they die with it)."""

    def __init__(self, local_id: int, voters: frozenset[int]) -> None:
        self.local_id = local_id
        self._rounds: list[_Round] = []
        self.set_voters(voters)
        self._sent_ms: dict[int, int] = {}  # voter -> when its latest BeginQuorumEpoch went

    def __bool__(self) -> bool:
        return bool(self._rounds)

    def set_voters(self, voters: frozenset[int]) -> None:
        """The voter set in force (it may change while a read waits, KIP-853): only its
        members' confirmations count, the leader's own included only while it is one."""
        self.voters = voters
        self.majority = len(voters) // 2 + 1

    def add(self, read: ReadIndex) -> list[ReadIndex]:
        """Start a read's round; returns the reads confirmed already (a lone voter)."""
        self._rounds.append(_Round(read, {self.local_id}))
        return self._take_confirmed()

    def wants(self, voter: int) -> bool:
        """Does a read wait for a BeginQuorumEpoch to ``voter`` newer than the last one?"""
        sent = self._sent_ms.get(voter)
        return any(sent is None or sent < r.read.asked_ms for r in self._rounds)

    def on_sent(self, voter: int, now: int) -> None:
        self._sent_ms[voter] = now

    def on_answered(self, voter: int) -> list[ReadIndex]:
        """``voter`` answered its latest BeginQuorumEpoch without error in this epoch: it
        confirms every read asked at or before that request went. Returns the reads now
        confirmed by a majority."""
        sent = self._sent_ms.get(voter)
        if sent is None:
            return []
        for r in self._rounds:
            if sent >= r.read.asked_ms:
                r.confirmed.add(voter)
        return self._take_confirmed()

    def _take_confirmed(self) -> list[ReadIndex]:
        voters, majority = self.voters, self.majority
        done = [r.read for r in self._rounds if len(r.confirmed & voters) >= majority]
        if done:
            self._rounds = [r for r in self._rounds if len(r.confirmed & voters) < majority]
        return done

    def take_all(self) -> list[ReadIndex]:
        reads = [r.read for r in self._rounds]
        self._rounds = []
        return reads


def outcome(read: ReadIndex, leader: LeaderAndEpoch, confirmed: bool) -> ReadIndexOutcome:
    return ReadIndexOutcome(
        read, Errors.NONE if confirmed else Errors.NOT_LEADER_OR_FOLLOWER, leader
    )
