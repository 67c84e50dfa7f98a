"""The epoch states of a replica, one small class each (Kafka's EpochState family).

Each holds its own data and timers (absolute deadlines in ms) and answers
``can_grant_vote``; none of them changes state on its own -- :class:`QuorumState` owns every
transition.
"""

from raftcore.raft.states.base import EpochState
from raftcore.raft.states.candidate import CandidateState
from raftcore.raft.states.follower import FollowerState
from raftcore.raft.states.leader import LeaderState, ReplicaState
from raftcore.raft.states.prospective import ProspectiveState
from raftcore.raft.states.resigned import ResignedState
from raftcore.raft.states.unattached import UnattachedState
from raftcore.raft.states.voted import VotedState

__all__ = [
    "CandidateState",
    "EpochState",
    "FollowerState",
    "LeaderState",
    "ProspectiveState",
    "ReplicaState",
    "ResignedState",
    "UnattachedState",
    "VotedState",
]
