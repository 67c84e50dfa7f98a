"""Preferred leaders and the auto leader rebalance of a node's partition groups.

Each partition of the topic has a preferred leader: of the voters in ascending id order,
partition ``p`` prefers ``voters[p % len(voters)]`` (Kafka puts the preferred leader first in a
partition's replica assignment, and spreads the first replicas round-robin over the brokers).
Elections pay it no heed: whichever voter wins leads, and often one node wins them all.

The auto leader rebalance (Kafka's ``auto.leader.rebalance.enable``) puts leadership back:
every ``leader.imbalance.check.interval.seconds`` a node looks at the partitions it leads whose
preferred leader is another voter and hands each over (KIP-853's leader transfer,
:meth:`RaftCore.transfer_leadership`) when

- that voter is imbalanced: of the partitions it prefers, more than
  ``leader.imbalance.per.broker.percentage`` are led by another node (Kafka's ratio, judged on
  what this node knows of every partition's leader), and
- it is ready: live (it fetched within the fetch timeout) and caught up (its fetch offset at
  the high watermark), as this leader sees it. A transfer refuses appends until the target
  reaches the log end, so a voter far behind is not asked.

:func:`handovers` is the decision, a pure function; :class:`LeaderRebalance` gathers what it
needs from the node's groups and starts the transfers. Invariants: at most one transfer in
flight per group (the core refuses a second), and a group is not asked again until its last
transfer's timeout has passed, doubled for every handover in a row that left the group
without its preferred leader (a voter that takes the handover and does not win, say), up to
``MAX_BACKOFF`` timeouts: such a voter is not made to cost an election every interval.

A preferred leader that comes back does not wait for the interval: the node looks at its
groups at every housekeeping round (once a second), notes the voters that a group it leads has
not heard from within the fetch timeout (a voter that has not fetched in this leadership counts
once the leadership is a fetch timeout old, so that a new epoch's first fetches are not taken
for absences), and checks at once each group whose preferred leader was so absent and is now
ready (:func:`returned`, pure). Absence is judged per node, over every group the node leads,
as liveness is per pair of nodes: the new leader of a restarted node's partition often learned
of the absence through another partition it led all along.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore.raft import NotLeaderError
from raftcore.raft.states.leader import LeaderState
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.config import NodeConfig
    from raftcore.node.group import RaftGroup

__all__ = [
    "GroupLeadership",
    "LeaderRebalance",
    "handovers",
    "imbalanced",
    "preferred_leader",
    "returned",
]

logger = logging.getLogger(__name__)

MAX_BACKOFF = 64  # transfer timeouts: the longest a group waits after handovers that failed


def preferred_leader(voters: Iterable[int], partition: int) -> int | None:
    """Partition ``partition``'s preferred leader among ``voters`` (None without voters)."""
    ordered = sorted(voters)
    return ordered[partition % len(ordered)] if ordered else None


@dataclass(frozen=True, slots=True)
class GroupLeadership:
    """What the decision needs of one partition group, as one node sees it."""

    name: TopicPartition
    leader: int | None  # None: no leader known
    preferred: int
    preferred_ready: bool = False  # live and caught up, as its leader sees it (else False)
    transferring: bool = False  # a transfer is in flight, or was asked too recently
    absent: frozenset[int] = frozenset()  # voters its leader (this node) has not heard from


def imbalanced(groups: Iterable[GroupLeadership], percentage: int) -> dict[int, tuple[int, int]]:
    """The voters whose leader imbalance is above ``percentage``: by id, (partitions it prefers
    and does not lead, partitions it prefers). Kafka's per-broker ratio."""
    preferred: dict[int, int] = {}
    not_led: dict[int, int] = {}
    for g in groups:
        preferred[g.preferred] = preferred.get(g.preferred, 0) + 1
        if g.leader != g.preferred:
            not_led[g.preferred] = not_led.get(g.preferred, 0) + 1
    return {
        voter: (not_led[voter], total)
        for voter, total in preferred.items()
        if voter in not_led and not_led[voter] * 100 > percentage * total
    }


def handovers(
    groups: Iterable[GroupLeadership], *, local_id: int, percentage: int
) -> list[tuple[TopicPartition, int]]:
    """The groups ``local_id`` should hand to their preferred leader now, with that leader's
    id: those it leads whose preferred leader is another voter, imbalanced and ready, and no
    transfer of which is in flight."""
    groups = list(groups)
    over = imbalanced(groups, percentage)
    return [
        (g.name, g.preferred)
        for g in groups
        if g.leader == local_id
        and g.preferred != local_id
        and g.preferred in over
        and g.preferred_ready
        and not g.transferring
    ]


def returned(
    groups: Iterable[GroupLeadership], away: frozenset[int], *, local_id: int
) -> tuple[frozenset[int], list[TopicPartition]]:
    """After a look at ``groups``, given the voters ``away`` before it: the voters away now,
    and the groups ``local_id`` leads whose preferred leader was away and is ready again.

    A voter stays away while a group this node leads does not hear from it, or while a group
    this node leads and it prefers does not find it ready (it may be live through one group
    and still catching up in another)."""
    led = [g for g in groups if g.leader == local_id]
    absent = {voter for g in led for voter in g.absent}
    back = [
        g.name for g in led if g.preferred != local_id and g.preferred in away and g.preferred_ready
    ]
    waiting = {g.preferred for g in led if g.preferred in away and not g.preferred_ready}
    return frozenset(absent | waiting), back


class LeaderRebalance:
    """Runs :func:`handovers` over a node's groups every ``interval_ms``, and over the groups
    whose preferred leader came back (:func:`returned`) at the next :meth:`tick` (the node's
    housekeeping, once a second), and starts the transfers it names."""

    def __init__(
        self,
        groups: Mapping[TopicPartition, RaftGroup],
        *,
        local_id: int,
        interval_ms: int,
        percentage: int,
        prefix: str,
        clock: Callable[[], int],
    ) -> None:
        self.groups = groups
        self.local_id = local_id
        self.interval_ms = interval_ms
        self.percentage = percentage
        self.prefix = prefix
        self.clock = clock
        self._next_check = clock() + interval_ms  # the first check one interval after start
        self._quiet_until: dict[TopicPartition, int] = {}  # no handover before, per group
        self._failed: dict[TopicPartition, int] = {}  # handovers in a row not (yet) taken
        self._led_since: dict[TopicPartition, tuple[int, int]] = {}  # epoch, first seen led
        self._away: frozenset[int] = frozenset()  # voters seen absent, not yet back

    @classmethod
    def for_node(
        cls,
        config: NodeConfig,
        groups: Mapping[TopicPartition, RaftGroup],
        prefix: str,
        clock: Callable[[], int],
    ) -> LeaderRebalance | None:
        """A node's, as its config says (None: off). Off with one partition: there is
        nothing to spread, and moving the one leader would cost an election each time its
        preferred voter came back (a healed follower would depose a healthy leader)."""
        if not config.auto_leader_rebalance or len(groups) < 2:
            return None
        return cls(
            groups,
            local_id=config.node_id,
            interval_ms=int(config.leader_imbalance_check_interval_s * 1000),
            percentage=config.leader_imbalance_per_broker_percentage,
            prefix=prefix,
            clock=clock,
        )

    def tick(self) -> None:
        """Check every group if the interval has passed since the last check, or else the
        groups whose preferred leader just came back."""
        now = self.clock()
        views = self.leadership(now)
        self._away, back = returned(views, self._away, local_id=self.local_id)
        if now >= self._next_check:
            self._next_check = now + self.interval_ms
            self.check(now, views)
        elif back:
            self.check(now, views, only=set(back))

    def leadership(self, now: int) -> list[GroupLeadership]:
        """What this node knows of each running group's leader and preferred leader."""
        views = []
        for name, group in self.groups.items():
            core = group.running_core()
            if core is None or group.failure is not None:
                continue
            preferred = preferred_leader(core.voter_set, name.partition)
            if preferred is None:
                continue
            state = core.state
            ready = transferring = False
            absent: frozenset[int] = frozenset()
            if not isinstance(state, LeaderState):
                self._led_since.pop(name, None)
            else:
                since = self._led_since.get(name)
                if since is None or since[0] != state.epoch:
                    since = self._led_since[name] = (state.epoch, now)
                timeout_ms = core.config.fetch_timeout_ms
                # a voter not yet fetched in this leadership counts from its first look
                first = since[1] if now - since[1] > timeout_ms else now
                absent = frozenset(
                    voter
                    for voter, replica in state.voter_states.items()
                    if voter != self.local_id
                    and now - max(replica.last_fetch_ms, first) > timeout_ms
                )
                transferring = state.transfer is not None or now < self._quiet_until.get(name, 0)
                replica = state.voter_states.get(preferred)
                hw = state.high_watermark
                ready = (
                    replica is not None
                    and replica.end_offset is not None
                    and hw is not None
                    and replica.end_offset >= hw
                    and 0 <= now - replica.last_fetch_ms <= core.config.fetch_timeout_ms
                )
            leader = core.leader_and_epoch().leader_id
            if leader == preferred:
                self._failed.pop(name, None)
            views.append(GroupLeadership(name, leader, preferred, ready, transferring, absent))
        return views

    def check(
        self,
        now: int,
        views: list[GroupLeadership] | None = None,
        only: set[TopicPartition] | None = None,
    ) -> None:
        """Hand over what :func:`handovers` names (of ``only``, if given)."""
        if views is None:
            views = self.leadership(now)
        over = imbalanced(views, self.percentage)
        for name, target in handovers(views, local_id=self.local_id, percentage=self.percentage):
            if only is not None and name not in only:
                continue
            group = self.groups[name]
            core = group.running_core()
            if core is None:
                continue
            timeout_ms = core.config.fetch_timeout_ms
            try:
                core.transfer_leadership(target, timeout_ms, now)
            except NotLeaderError:
                continue  # it stopped leading since the look
            failed = self._failed.get(name, 0)
            self._failed[name] = failed + 1
            self._quiet_until[name] = now + timeout_ms * min(MAX_BACKOFF, 2**failed)
            not_led, total = over[target]
            logger.info(
                "%s handing %s to its preferred leader %d (leader imbalance of node %d: %d of "
                "%d preferred partitions led elsewhere)",
                self.prefix,
                name,
                target,
                target,
                not_led,
                total,
            )
            group.poke()  # the refusal, if any, is in the next output
