"""Random call sequences against the pure coordinator, with clients that act as Kafka's do,
and the invariants checked after every call:

- one leader per generation (at most one member is handed the member list to assign);
- a group's generation only grows while a coordinator lives;
- committed offsets never go back unless the operator resets them;
- a member's commit is accepted only in its group's current generation (or with generation -1
  while the group is Empty, Kafka's simple commit);
- replaying the records into a fresh coordinator gives the same offsets, and the same group
  metadata whenever the group is Empty or Stable (a rebalance in progress is not persisted:
  the replayed generation is the last persisted one, never a newer one).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from group_helpers import Driver, subscription
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.error_codes import Errors
from raftcore.groups import GroupConfig, GroupCoordinator, GroupState
from raftcore.groups.group import Group
from raftcore.groups.messages import (
    JoinedMember,
    JoinGroupResponse,
    MemberIdentity,
    SyncGroupResponse,
)
from raftcore.topic_partition import TopicPartition

PARTITIONS = [TopicPartition("t", 0), TopicPartition("t", 1)]
CLIENTS = 3


@dataclass
class Client:
    instance: str | None  # client 0 is a static member
    kip394: bool  # client 1 joins as a v4+ client (MEMBER_ID_REQUIRED first)
    member_id: str = ""
    generation: int = -1
    join_ref: int | None = None
    sync_ref: int | None = None
    members: tuple[JoinedMember, ...] = ()


ops = st.one_of(
    st.tuples(st.just("join"), st.integers(0, CLIENTS - 1), st.booleans()),
    st.tuples(st.just("sync"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, CLIENTS - 1)),
    st.tuples(
        st.just("commit"), st.integers(0, CLIENTS - 1), st.integers(0, 1), st.integers(0, 50)
    ),
    st.tuples(
        st.just("stale_commit"), st.integers(0, CLIENTS - 1), st.integers(0, 1), st.integers(0, 50)
    ),
    st.tuples(st.just("simple_commit"), st.integers(0, 1), st.integers(0, 50)),
    st.tuples(st.just("leave"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("restart"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("advance"), st.sampled_from([1, 500, 3000, 9999, 10_000, 30_000])),
    st.tuples(st.just("reset"), st.integers(0, 1), st.integers(0, 50)),
    st.tuples(st.just("failover")),
    *[st.tuples(st.just("round"))] * 5,  # weighted: rounds reach Stable
)


def _view(group: Group | None) -> tuple[object, ...]:
    if group is None:
        return (GroupState.EMPTY, 0, None, None, {})
    members = {m.member_id: m.assignment for m in group.members.values()}
    return (group.state, group.generation, group.leader_id, group.protocol_name, members)


class Model:
    def __init__(self, delay: int) -> None:
        # offsets monotonic (the setting off): the invariant below says so
        self.d = Driver(
            GroupConfig(group_initial_rebalance_delay_ms=delay, allow_backward_commits=False)
        )
        self.clients = [Client("static-0" if i == 0 else None, i == 1) for i in range(CLIENTS)]
        self.epoch = 0  # coordinator failovers so far
        self.leaders: dict[tuple[int, int], set[str]] = defaultdict(set)
        self.generation = 0
        self.offsets: dict[TopicPartition, int] = {}

    def group(self) -> Group | None:
        return self.d.coordinator.group("g")

    def run(self, op: tuple) -> None:
        if op[0] == "round":
            # What well-behaved clients do: all join, the delay passes, all sync, leader last.
            for i in range(CLIENTS):
                self.run(("join", i, False))
            for _ in range(3):
                self.run(("advance", 3000))
            for i in sorted(range(CLIENTS), key=lambda i: bool(self.clients[i].members)):
                self.run(("sync", i))
            return
        d, kind = self.d, op[0]
        reset: dict[TopicPartition, int] | None = None
        if kind == "join":
            c = self.clients[op[1]]
            if c.join_ref is None:
                protocols = (("range", subscription("t", "u") if op[2] else subscription("t")),)
                c.join_ref = d.join(
                    c.member_id,
                    protocols=protocols,
                    instance=c.instance,
                    client=f"c{op[1]}",
                    require_known=c.kip394,
                )
        elif kind == "sync":
            c = self.clients[op[1]]
            if c.sync_ref is None and c.member_id and c.generation >= 0:
                assignments = {m.member_id: m.member_id.encode() for m in c.members}
                c.sync_ref = d.sync(c.member_id, c.generation, assignments, instance=c.instance)
        elif kind == "heartbeat":
            c = self.clients[op[1]]
            if c.member_id:
                error = d.heartbeat(c.member_id, c.generation, instance=c.instance)
                if error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    c.member_id, c.generation = "", -1
        elif kind in ("commit", "stale_commit"):
            c = self.clients[op[1]]
            generation = c.generation - (kind == "stale_commit")
            group = self.group()
            current = group.generation if group is not None else None
            empty = group is None or group.state == GroupState.EMPTY
            tp = PARTITIONS[op[2]]
            answer = d.commit(
                {tp: op[3]}, member_id=c.member_id, generation=generation, instance=c.instance
            )
            if answer[tp] == Errors.NONE and not (generation < 0 and empty):
                assert generation == current, f"a commit of generation {generation} in {current}"
        elif kind == "simple_commit":
            d.commit({PARTITIONS[op[1]]: op[2]})
        elif kind == "leave":
            c = self.clients[op[1]]
            if c.member_id:
                d.leave(MemberIdentity(c.member_id, c.instance))
                c.member_id, c.generation, c.members = "", -1, ()
        elif kind == "restart":
            # The process restarts: outstanding requests are lost, a dynamic member's id too.
            c = self.clients[op[1]]
            c.join_ref = c.sync_ref = None
            c.generation, c.members = -1, ()
            c.member_id = ""
        elif kind == "advance":
            d.advance(op[1])
        elif kind == "reset":
            ref = d.ref()
            reset = {PARTITIONS[op[1]]: op[2]}
            d.take(d.coordinator.reset_offsets(ref, "g", reset, d.now))
            if d.answers[ref].error != Errors.NONE:  # type: ignore[attr-defined]
                reset = None
        elif kind == "failover":
            before = _view(self.group())
            d.failover()
            self.epoch += 1
            for c in self.clients:
                c.join_ref = c.sync_ref = None  # answered NOT_COORDINATOR: they retry
            after = _view(self.group())
            assert after[1] <= before[1]  # type: ignore[operator]
            self.generation = after[1]  # type: ignore[assignment]
        self.absorb()
        self.check(reset)

    def absorb(self) -> None:
        d = self.d
        for c in self.clients:
            if c.join_ref is not None and c.join_ref in d.answers:
                answer = d.answers[c.join_ref]
                c.join_ref = None
                assert isinstance(answer, JoinGroupResponse)
                if answer.error == Errors.NONE:
                    c.member_id, c.generation, c.members = (
                        answer.member_id,
                        answer.generation_id,
                        answer.members,
                    )
                    if answer.members:
                        self.leaders[(self.epoch, answer.generation_id)].add(answer.member_id)
                elif answer.error == Errors.MEMBER_ID_REQUIRED:
                    c.member_id = answer.member_id
                elif answer.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    c.member_id, c.generation, c.members = "", -1, ()
            if c.sync_ref is not None and c.sync_ref in d.answers:
                answer = d.answers[c.sync_ref]
                c.sync_ref = None
                assert isinstance(answer, SyncGroupResponse)
                if answer.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    c.member_id, c.generation, c.members = "", -1, ()

    def check(self, reset: dict[TopicPartition, int] | None) -> None:
        for key, leaders in self.leaders.items():
            assert len(leaders) <= 1, f"generation {key[1]} has leaders {sorted(leaders)}"
        group = self.group()
        if group is not None:
            assert group.generation >= self.generation, "the generation went back"
            self.generation = group.generation
            if group.members:
                assert group.leader_id in group.members
            if group.state == GroupState.EMPTY:
                assert not group.members
            elif not group.members:  # waiting for a KIP-394 id's join, or its expiry
                assert group.state == GroupState.PREPARING_REBALANCE
        offsets = self.d.committed()
        for tp, before in self.offsets.items():
            if reset is not None and tp in reset:
                assert offsets[tp] == reset[tp]
            else:
                assert offsets.get(tp, -1) >= before, f"{tp} went back from {before}"
        self.offsets = offsets
        replayed = GroupCoordinator(self.d.config)
        replayed.replay(self.d.log, self.d.now)
        assert replayed.offsets.snapshot() == self.d.coordinator.offsets.snapshot()
        live, again = _view(group), _view(replayed.group("g"))
        if live[0] in (GroupState.EMPTY, GroupState.STABLE):
            assert again == live
        else:
            assert again[1] <= live[1]  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=60), st.sampled_from([0, 3000]))
def test_random_call_sequences_keep_the_group_invariants(sequence, delay):
    model = Model(delay)
    for op in sequence:
        model.run(op)
