"""A deterministic scenario for pre-vote (KIP-996): one follower is cut off from everyone for
a while, nothing else goes wrong, then the partition heals.

Without pre-vote the cut-off follower raises its epoch at every election timeout and, once
back, forces the healthy leader out (seen on a real cluster: epoch 3 became 7 after one healed
partition). With it, the follower stays in its epoch while cut off -- it asks, nobody answers
-- and after the heal it finds the leader still in office: no new epoch anywhere.

:func:`run_isolated_follower` runs it and reports the epochs; ``tests/test_sim.py`` asserts
that nothing changed, and that the plant ``no-pre-vote`` (a node that skips the pre-vote) is
caught by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from raftcore.raft.states import FollowerState, LeaderState
from raftcore.sim.cluster import Scenario, SimNode, SimResult, Simulation

__all__ = ["HealedPartitionReport", "run_isolated_follower"]


@dataclass
class HealedPartitionReport:
    result: SimResult
    leader_before: int  # the leader when the follower was cut off
    epoch_before: int  # its epoch
    isolated: int  # the follower cut off
    isolated_max_epoch: int  # the highest epoch the cut-off follower reached while cut off
    epochs_after: dict[int, int]  # every replica's epoch at the end of the run
    leader_after: int | None  # the leader at the end of the run

    @property
    def epoch_after(self) -> int:
        return max(self.epochs_after.values())


class _IsolatingSimulation(Simulation):
    """The simulation with two extra events: cut one follower of the leader off from every
    other replica (both directions), and heal that cut."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.leader_before = -1
        self.epoch_before = -1
        self.isolated = -1
        self.isolated_max_epoch = -1

    def _isolate(self, _payload: Any) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.alive and n.core.is_leader()]
        if len(leaders) != 1:
            raise RuntimeError(f"no single leader at {self.now} ms to isolate a follower of")
        leader = leaders[0]
        followers = [
            n
            for n in self.nodes.values()
            if n.is_voter
            and n.alive
            and isinstance(n.core.state, FollowerState)
            and n.core.state.leader == leader.node_id
        ]
        if not followers:
            raise RuntimeError(f"leader {leader.node_id} has no follower at {self.now} ms")
        victim = followers[0].node_id
        self.leader_before = leader.node_id
        self.epoch_before = leader.core.epoch
        self.isolated = victim
        self.isolated_max_epoch = followers[0].core.epoch
        self.blocked = {(victim, n) for n in self.nodes if n != victim} | {
            (n, victim) for n in self.nodes if n != victim
        }
        self.log_event(f"isolate follower {victim} of leader {leader.node_id}")
        return None

    def _rejoin(self, _payload: Any) -> SimNode | None:
        self.blocked = set()
        self.log_event(f"follower {self.isolated} rejoins")
        return None

    def _watch(self, _payload: Any) -> SimNode | None:
        node = self.nodes.get(self.isolated)
        if node is not None and node.alive and self.blocked:
            self.isolated_max_epoch = max(self.isolated_max_epoch, node.core.epoch)
        self.schedule(self.now + 50, "watch", None)
        return None

    _HANDLERS: ClassVar[dict[str, Any]] = {
        **Simulation._HANDLERS,
        "isolate": _isolate,
        "rejoin": _rejoin,
        "watch": _watch,
    }


def run_isolated_follower(
    voters: int = 3,
    *,
    seed: int = 0,
    isolate_at_ms: int = 5_000,
    isolated_for_ms: int = 12_000,
    after_ms: int = 8_000,
) -> HealedPartitionReport:
    """Elect a leader, cut one of its followers off for ``isolated_for_ms`` (several fetch
    and election timeouts), heal, and run ``after_ms`` more with no fault at all."""
    rejoin_at = isolate_at_ms + isolated_for_ms
    scenario = Scenario(
        seed=seed,
        voters=voters,
        observers=0,
        delay_ms=(1, 3),
        fault_ms=rejoin_at + after_ms,
        style="healed-partition",
    )
    sim = _IsolatingSimulation(scenario)
    sim.schedule(isolate_at_ms, "isolate", None)
    sim.schedule(isolate_at_ms + 1, "watch", None)
    sim.schedule(rejoin_at, "rejoin", None)
    result = sim.run()
    epochs = {n.node_id: n.core.epoch for n in sim.nodes.values() if n.alive}
    leaders = [
        n.node_id for n in sim.nodes.values() if n.alive and isinstance(n.core.state, LeaderState)
    ]
    return HealedPartitionReport(
        result=result,
        leader_before=sim.leader_before,
        epoch_before=sim.epoch_before,
        isolated=sim.isolated,
        isolated_max_epoch=sim.isolated_max_epoch,
        epochs_after=epochs,
        leader_after=leaders[0] if len(leaders) == 1 else None,
    )
