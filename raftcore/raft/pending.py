"""Pending appends: the leader's produce purgatory, inside the pure core.

An append is acknowledged only when two things hold together: the high watermark passed its
last offset, and this replica is still the leader of the epoch that appended it. The leader
never truncates its own log, so while it leads that epoch, the records it appended are still
at their offsets; once the high watermark passes them, a majority has them durably in that
epoch and every later leader will too (KIP-595's election rule). The moment the replica stops
leading that epoch -- a newer epoch seen, a resignation, a shutdown -- its pending appends
fail with NOT_LEADER_OR_FOLLOWER: a later high watermark on this replica says nothing about
whose records sit at those offsets (a deposed leader truncates its unreplicated tail and
fetches another leader's records into the same offsets, KIP-279).

A failed append may still be committed (a majority may have had it when leadership ended):
failure means "not acknowledged", which a client treats as indeterminate and retries
idempotently, as with Kafka's NOT_LEADER_OR_FOLLOWER.

Kafka's broker keeps this in its produce purgatory (DelayedProduce, completed by
``Partition.checkEnoughReplicasReachOffset``, which fails with NOT_LEADER_OR_FOLLOWER once the
partition's leader epoch moved). Here it lives in the core, so the simulation drives it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from raftcore.error_codes import Errors
from raftcore.raft.values import LeaderAndEpoch

__all__ = ["AppendOutcome", "Appended", "PendingAppends"]


@dataclass(frozen=True, slots=True)
class Appended:
    """One append the leader took: its offsets, its epoch, and the token its outcome will
    carry (None when nobody asked to hear the outcome). Unpacks as ``first, last``."""

    first_offset: int
    last_offset: int
    epoch: int
    token: int | None = None

    def __iter__(self) -> Iterator[int]:
        yield self.first_offset
        yield self.last_offset


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """The verdict on a tracked append: committed in its epoch, or not acknowledged
    (``error`` is NOT_LEADER_OR_FOLLOWER and ``leader`` is who leads now, for KIP-951)."""

    appended: Appended
    error: int
    leader: LeaderAndEpoch

    @property
    def committed(self) -> bool:
        return self.error == Errors.NONE


class PendingAppends:
    """The tracked appends of one leader epoch, in offset order."""

    __slots__ = ("_queue", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._queue: deque[Appended] = deque()

    def add(self, appended: Appended) -> None:
        if appended.epoch != self.epoch:
            raise ValueError(f"append of epoch {appended.epoch} in epoch {self.epoch}'s purgatory")
        self._queue.append(appended)

    def take_committed(self, high_watermark: int | None) -> list[Appended]:
        """Remove and return the appends wholly below ``high_watermark``."""
        queue = self._queue
        if high_watermark is None or not queue or queue[0].last_offset >= high_watermark:
            return []
        done = []
        while queue and queue[0].last_offset < high_watermark:
            done.append(queue.popleft())
        return done

    def take_all(self) -> list[Appended]:
        done = list(self._queue)
        self._queue.clear()
        return done

    def __len__(self) -> int:
        return len(self._queue)
