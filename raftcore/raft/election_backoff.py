"""A candidate's randomized backoff after an election it did not win (Kafka's
``KafkaRaftClient.binaryExponentialElectionBackoffMs``).

Both ways a candidate ends an election without winning it back off here: the election timer
running out (:mod:`raftcore.raft.polling`) and a majority of votes refused
(:mod:`raftcore.raft.vote`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore
    from raftcore.raft.states import CandidateState

__all__ = ["ELECTION_BACKOFF_BASE_MS", "start_election_backoff"]

logger = logging.getLogger(__name__)

# Kafka's RETRY_BACKOFF_BASE_MS: the unit of the randomized election backoff.
ELECTION_BACKOFF_BASE_MS = 100


def start_election_backoff(core: RaftCore, state: CandidateState, now: int, reason: str) -> None:
    """Kafka's binary exponential backoff: min(100 ms * random[0, 2^retries), max)."""
    span = 2 << min(20, state.retries - 1)
    backoff = min(
        ELECTION_BACKOFF_BASE_MS * core.rng.randrange(span), core.config.election_backoff_max_ms
    )
    state.start_backoff(now, backoff)
    logger.info("%s %s in epoch %d; backing off %d ms", core.prefix, reason, state.epoch, backoff)
