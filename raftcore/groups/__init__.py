"""The classic consumer group coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
offsets) as a pure state machine: no I/O, no tasks, no clock. See
:mod:`raftcore.groups.coordinator`."""

from raftcore.groups.config import GroupConfig
from raftcore.groups.coordinator import GroupCoordinator
from raftcore.groups.group import GroupState
from raftcore.groups.step import Output, Reply

__all__ = ["GroupConfig", "GroupCoordinator", "GroupState", "Output", "Reply"]
