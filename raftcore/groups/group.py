"""One classic consumer group's state: its members, generation, protocol and leader, and the
deadlines that drive it (Kafka's ClassicGroup).

The states and their transitions (``Group.transition`` refuses any other; a test checks this
table against the code)::

    Empty               -> PreparingRebalance, Dead
    PreparingRebalance  -> CompletingRebalance, Empty, Dead
    CompletingRebalance -> PreparingRebalance, Stable, Dead
    Stable              -> PreparingRebalance, Dead
    Dead                -> (none)

Times are absolute milliseconds of the coordinator's injected clock; nothing here reads one.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from dataclasses import dataclass, field

from raftcore.errors import RaftcoreError

__all__ = ["Group", "GroupState", "Member", "subscribed_topics"]

Ref = object  # the driver's handle of a request whose answer may come later


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.PREPARING_REBALANCE, GroupState.STABLE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


class GroupTransitionError(RaftcoreError):
    """A transition the table above does not allow: a bug in the coordinator, not input."""


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # The session ends at this time unless a heartbeat (or join, sync, commit) renews it.
    heartbeat_deadline: int = 0
    # A JoinGroup (SyncGroup) waiting for the join (the leader's sync) to complete.
    join_waiter: Ref | None = None
    sync_waiter: Ref | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet used to join; each
    # expires at its deadline.
    pending_members: dict[str, int] = field(default_factory=dict)
    # Members that have not sent SyncGroup since the join completed.
    pending_sync: set[str] = field(default_factory=set)
    state_timestamp: int = -1
    # PreparingRebalance: the join completes at this time at the latest.
    join_deadline: int | None = None
    # The initial delay (group.initial.rebalance.delay.ms) runs instead of the early completion
    # when every member has joined; it extends while new members arrive.
    initial_delay_remaining: int | None = None
    new_member_added: bool = False
    # CompletingRebalance and Stable: members still in pending_sync at this time are removed.
    sync_deadline: int | None = None

    # -- states

    def transition(self, target: GroupState, now_ms: int) -> None:
        if target not in TRANSITIONS[self.state]:
            raise GroupTransitionError(
                f"group {self.group_id!r}: no transition from {self.state.value} to {target.value}"
            )
        self.state = target
        self.state_timestamp = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # The first member still waiting to join leads, else any (Kafka's order).
            waiting = [m for m in self.members.values() if m.join_waiter is not None]
            chosen = waiting or list(self.members.values())
            self.leader_id = chosen[0].member_id if chosen else None
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """KIP-345: the instance's member keeps its assignment under a new member id."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def all_joined(self) -> bool:
        """Every known member has rejoined and no KIP-394 id is still out."""
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """A joining member must share the group's type and at least one protocol that every
        member supports (INCONSISTENT_GROUP_PROTOCOL otherwise)."""
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(names))

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all support; most votes win
        (ties by name, so the choice is deterministic)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(n for n in member.protocol_names() if n in candidates)] += 1
        return min(votes, key=lambda name: (-votes[name], name))

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members subscribe to, for a group of protocol type ``consumer``; None
        when unknown (another type, no protocol yet, metadata not in the consumer schema)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscribed_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        topics = self.subscribed_topics()
        return self.protocol_type == "consumer" if topics is None else topic in topics


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (int16 version, then an int32 count of
    int16-length strings, in every version), or None if it does not parse."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos, topics = 6, set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
