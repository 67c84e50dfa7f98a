"""The leader's fetch purgatory (Kafka's DelayedFetch): a fetch with nothing to answer yet is
held until records, a high watermark the fetcher has not seen, or its MaxWaitMs arrive.

A high watermark alone is news worth an answer only after ``high_watermark_linger_ms``
(:class:`raftcore.raft.config.QuorumConfig`): from the moment a held fetch first has it to
tell, records that arrive within the linger carry it instead, and the follower's round of
answer-and-fetch-again for the high watermark alone is saved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors
from raftcore.raft import fetch
from raftcore.raft.messages import FetchRequest
from raftcore.raft.states import LeaderState

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["FetchPurgatory"]

INF = float("inf")


@dataclass(slots=True)
class _Parked:
    source: int
    correlation_id: int
    request: FetchRequest
    deadline: int
    hw_due: float  # when a high watermark the fetcher has not seen is worth an answer alone


class FetchPurgatory:
    def __init__(self, core: RaftCore) -> None:
        self.core = core
        self._parked: list[_Parked] = []

    def __bool__(self) -> bool:
        return bool(self._parked)

    def park(self, source: int, correlation_id: int, request: FetchRequest, now: int) -> None:
        hw_due = self._hw_due(request, now)
        self._parked.append(
            _Parked(source, correlation_id, request, now + request.max_wait_ms, hw_due)
        )

    def _hw_due(self, request: FetchRequest, now: int) -> float:
        state = self.core.quorum.state
        assert isinstance(state, LeaderState)
        hw = state.high_watermark
        if hw is None or hw <= request.high_watermark:
            return INF
        return now + self.core.config.high_watermark_linger_ms

    def high_watermark_moved(self, now: int) -> None:
        """The linger of each held fetch that had no high watermark to tell starts now;
        then answer what can be answered."""
        if not isinstance(self.core.quorum.state, LeaderState):
            return
        for p in self._parked:
            if p.hw_due == INF:
                p.hw_due = self._hw_due(p.request, now)
        self.complete(now)

    def complete(self, now: int, *, expired_only: bool = False) -> None:
        """Answer the held fetches that can be answered (with ``expired_only``, only those
        whose wait, or high-watermark linger, is over); the rest stay."""
        core = self.core
        if not self._parked or not isinstance(core.quorum.state, LeaderState):
            return
        waiting = self._parked
        self._parked = []
        for p in waiting:
            force = now >= p.deadline
            tell_hw = now >= p.hw_due
            if expired_only and not force and not tell_hw:
                self._parked.append(p)
                continue
            response = fetch.try_complete(core, p.request, now, force=force, tell_hw=tell_hw)
            if response is None:
                self._parked.append(p)
            else:
                core.reply(p.source, p.correlation_id, response)

    def next_deadline(self) -> float:
        return min((min(p.deadline, p.hw_due) for p in self._parked), default=INF)

    def release_not_leader(self) -> None:
        """Leadership ended: every held fetch is answered NOT_LEADER_OR_FOLLOWER."""
        parked, self._parked = self._parked, []
        for p in parked:
            self.core.reply(
                p.source,
                p.correlation_id,
                fetch.error_response(self.core, Errors.NOT_LEADER_OR_FOLLOWER),
            )
