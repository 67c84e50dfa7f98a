"""A driver for the pure group coordinator in tests: a virtual clock, the answers by request,
and every record the coordinator asked to persist (the offsets partition's log)."""

from __future__ import annotations

import itertools
import random
import struct
from dataclasses import dataclass, field

from raftcore.error_codes import Errors
from raftcore.groups import GroupConfig, GroupCoordinator, Output
from raftcore.groups.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    PartitionCommit,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raftcore.groups.records import Record
from raftcore.topic_partition import TopicPartition

SESSION = 10_000
REBALANCE = 30_000
DELAY = 100


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics and no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


RANGE = (("range", subscription("t")),)


@dataclass
class Driver:
    config: GroupConfig = field(
        default_factory=lambda: GroupConfig(group_initial_rebalance_delay_ms=DELAY)
    )
    seed: int = 0
    now: int = 0
    answers: dict[int, object] = field(default_factory=dict)
    log: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.config, random.Random(self.seed))
        self._refs = itertools.count(1)

    def take(self, out: Output) -> None:
        self.log.extend(out.records)
        for reply in out.replies:
            assert isinstance(reply.ref, int)
            assert reply.ref not in self.answers, f"request {reply.ref} answered twice"
            self.answers[reply.ref] = reply.response

    def ref(self) -> int:
        return next(self._refs)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.take(self.coordinator.poll(self.now))

    def gather(self, group: str = "g") -> None:
        """Let the initial delay run out (it extends while members arrive)."""
        for _ in range(100):
            g = self.coordinator.group(group)
            if g is None or g.join_deadline is None or g.initial_delay_remaining is None:
                return
            self.advance(g.join_deadline - self.now)
        raise AssertionError("the initial delay never ended")

    def answer(self, ref: int) -> object | None:
        return self.answers.get(ref)

    # -- requests

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        protocols: tuple[tuple[str, bytes], ...] = RANGE,
        instance: str | None = None,
        client: str = "client",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        require_known: bool = False,
        skip: bool = False,
    ) -> int:
        ref = self.ref()
        req = JoinGroupRequest(
            group,
            member_id,
            "consumer",
            protocols,
            session,
            rebalance,
            instance,
            client,
            "/10.0.0.1",
            require_known,
            skip,
        )
        self.take(self.coordinator.join_group(ref, req, self.now))
        return ref

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        ref = self.ref()
        req = SyncGroupRequest(
            group, generation, member_id, instance, None, None, tuple((assignments or {}).items())
        )
        self.take(self.coordinator.sync_group(ref, req, self.now))
        return ref

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> Errors:
        ref = self.ref()
        self.take(
            self.coordinator.heartbeat(
                ref, HeartbeatRequest(group, generation, member_id, instance), self.now
            )
        )
        answer = self.answers[ref]
        assert isinstance(answer, Errors)
        return answer

    def leave(self, *members: MemberIdentity, group: str = "g") -> object:
        ref = self.ref()
        self.take(self.coordinator.leave_group(ref, LeaveGroupRequest(group, members), self.now))
        return self.answers[ref]

    def commit(
        self,
        offsets: dict[TopicPartition, int],
        *,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        group: str = "g",
    ) -> dict[TopicPartition, Errors]:
        ref = self.ref()
        req = OffsetCommitRequest(
            group,
            tuple(PartitionCommit(tp, o) for tp, o in offsets.items()),
            generation,
            member_id,
            instance,
        )
        self.take(self.coordinator.commit_offsets(ref, req, self.now))
        return {r.partition: r.error for r in self.answers[ref]}  # type: ignore[attr-defined]

    def committed(self, group: str = "g") -> dict[TopicPartition, int]:
        return {tp: o.offset for tp, o in self.coordinator.offsets.of(group).items()}

    # -- stories

    def joined(self, ref: int) -> JoinGroupResponse:
        answer = self.answers.get(ref)
        assert isinstance(answer, JoinGroupResponse), f"join {ref}: {answer!r}"
        assert answer.error == Errors.NONE, f"join {ref}: {answer.error.name}"
        return answer

    def synced(self, ref: int) -> SyncGroupResponse:
        answer = self.answers.get(ref)
        assert isinstance(answer, SyncGroupResponse), f"sync {ref}: {answer!r}"
        return answer

    def stable_group(self, n: int, **join_args: object) -> list[JoinGroupResponse]:
        """n members join at once, the leader assigns ``member id`` bytes to each, all sync."""
        refs = [self.join(client=f"c{i}", **join_args) for i in range(n)]  # type: ignore[arg-type]
        self.gather()
        joined = [self.joined(r) for r in refs]
        leader = next(j for j in joined if j.members)
        syncs = [self.sync(j.member_id, j.generation_id) for j in joined if j is not leader]
        syncs.append(
            self.sync(
                leader.member_id,
                leader.generation_id,
                {m.member_id: m.member_id.encode() for m in leader.members},
            )
        )
        for s in syncs:
            assert self.synced(s).error == Errors.NONE
        return joined

    def failover(self) -> GroupCoordinator:
        """A new leader of the offsets partition replays its log."""
        fresh = GroupCoordinator(self.config, random.Random(self.seed + 1))
        fresh.replay(self.log, self.now)
        self.coordinator = fresh
        return fresh
