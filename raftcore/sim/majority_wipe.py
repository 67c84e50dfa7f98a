"""A scenario past what Raft tolerates: a majority of the voters lose their disks.

Writes are acknowledged for a while; then every voter is stopped cleanly (the operator
replaces disks), and a majority of them come back with empty disks started as before -- a new
directory id, an empty log and quorum-state, the same static voter set. Being a majority they
elect a leader of an empty log and, once their epoch is past the survivors' (some of their
leaders fail), take writes again. Then the survivors start. Every acknowledged record is on a
survivor and nowhere else.

What must hold: no survivor removes a record below its committed offset (the one it
checkpointed at its clean stop): asked to by the new leader (a DivergingEpoch, or a snapshot
its log does not lead to), it refuses and stops (TruncationRefusedError,
:mod:`raftcore.raft.committed`), its log as it was. A survivor's log that loses such a record
is the ``committed-truncated`` violation; the plant ``truncate-below-committed`` (the refusal
removed) is caught by it.

The cluster's own invariants (one leader per epoch, committed records never change) are
checked until the wipe only: a majority that lost its disks reuses epochs and offsets, which
is exactly the disaster. :func:`run_majority_wipe` runs one seed; ``python -m raftcore.sim
--scenario majority-wipe`` runs many.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from raftcore.errors import RaftcoreError, TruncationRefusedError
from raftcore.raft.states import LeaderState
from raftcore.records import iter_batches
from raftcore.sim.cluster import Scenario, SimNode, SimResult, Simulation
from raftcore.sim.invariants import Violation

__all__ = ["MajorityWipeReport", "run_majority_wipe"]


@dataclass
class MajorityWipeReport:
    result: SimResult
    wiped: list[int]  # the voters whose disks were replaced
    survivors: list[int]
    protected: dict[int, int]  # survivor -> its committed offset at the clean stop
    acknowledged: int  # records acknowledged before the wipe
    # survivor -> the line it stopped with (every survivor asked to truncate refuses)
    refusals: dict[int, str] = field(default_factory=dict)
    new_epoch: int = -1  # the wiped majority's epoch when the survivors started

    @property
    def ok(self) -> bool:
        return self.result.ok


class _NoInvariants:
    """After the wipe: the cluster's guarantees are void (see the module docstring); only the
    survivors' logs are checked."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _records(node: SimNode, below: int) -> dict[int, bytes | None]:
    log = node.log
    start = log.log_start_offset
    if below <= start:
        return {}
    found: dict[int, bytes | None] = {}
    for b in iter_batches(log.read(start, 1 << 30)):
        for r in b.records():
            if r.offset < below:
                found[r.offset] = r.value
    return found


class _MajorityWipeSimulation(Simulation):
    def __init__(self, scenario: Scenario, wipe_at: int, *, trace: bool = False) -> None:
        super().__init__(scenario, trace=trace)
        self.wipe_at = wipe_at
        self.paused = False  # no writes from the clean stop until the new majority's epoch
        self.wiped: list[int] = []
        self.survivors: list[int] = []
        self.protected: dict[int, int] = {}
        self.kept: dict[int, dict[int, bytes | None]] = {}  # survivor -> records it must keep
        self.acked_before: dict[int, bytes | None] = {}
        self.refusals: dict[int, str] = {}
        self.survivor_epoch = 0
        self.new_epoch = -1
        self.survivors_started = False

    # ---- events ---------------------------------------------------------------------------

    def _stop_all(self, _payload: Any) -> SimNode | None:
        """Every voter stops cleanly: its log flushed, its committed offset checkpointed."""
        self.paused = True
        voters = [n for n in self.nodes.values() if n.is_voter]
        leaders = [
            n for n in voters if n.core is not None and isinstance(n.core.state, LeaderState)
        ]
        # the leader holds every acknowledged record: it survives, with a minority of others
        rng = random.Random(f"majority-wipe-{self.scenario.seed}")
        first = leaders[0] if leaders else rng.choice(voters)
        others = [n for n in voters if n is not first]
        rng.shuffle(others)
        minority = (len(voters) - 1) // 2
        survivors = [first, *others[: minority - 1]] if minority else [first]
        self.survivors = sorted(n.node_id for n in survivors)
        self.wiped = sorted(n.node_id for n in voters if n.node_id not in self.survivors)
        self.acked_before = dict(self.invariants.acked)
        for node in voters:
            if node.alive:
                node.log.flush()
                checkpoint = node.core.committed_offset  # type: ignore[union-attr]
                node.committed_checkpoint = max(node.committed_checkpoint, checkpoint)
                self.survivor_epoch = max(self.survivor_epoch, node.core.epoch)  # type: ignore[union-attr]
                node.crash()
        for nid in self.survivors:
            node = self.nodes[nid]
            self.protected[nid] = node.committed_checkpoint
            self.kept[nid] = _records(node, node.committed_checkpoint)
        self.log_event(
            f"clean stop of every voter; survivors {self.survivors} (committed "
            f"{self.protected}), disks of {self.wiped} replaced; epoch {self.survivor_epoch}"
        )
        self.checked_until_wipe = self.invariants
        self.invariants = _NoInvariants()  # type: ignore[assignment]
        for nid in self.wiped:
            self.nodes[nid].wipe()
            self.nodes[nid].start(self.now)
        self.schedule(self.now + 200, "push-epoch", None)
        return None

    def _push_epoch(self, _payload: Any) -> SimNode | None:
        """Until the new majority's epoch passes the survivors', its leader fails now and then
        (each failure costs it an election); then the survivors start and writes resume."""
        if self.survivors_started:
            return None
        self.schedule(self.now + 200, "push-epoch", None)
        wiped = [self.nodes[nid] for nid in self.wiped]
        leaders = [n for n in wiped if n.core is not None and isinstance(n.core.state, LeaderState)]
        if not leaders:
            return None
        leader = leaders[0]
        epoch = leader.core.epoch  # type: ignore[union-attr]
        if epoch <= self.survivor_epoch:
            self.log_event(f"new majority's leader {leader.node_id} (epoch {epoch}) fails")
            leader.crash()
            self.schedule(self.now + 100, "fault", ("restart", leader.node_id))
            return None
        self.new_epoch = epoch
        self.survivors_started = True
        self.paused = False
        self.log_event(f"new majority leads in epoch {epoch}; survivors {self.survivors} start")
        for nid in self.survivors:
            self.nodes[nid].start(self.now)
        return None

    def _append(self, payload: Any) -> SimNode | None:
        if self.paused:
            self.schedule(self.now + self.scenario.append_every_ms, "append", None)
            return None
        return super()._append(payload)

    def step(self, node: SimNode, call: Any) -> SimNode | None:
        try:
            return super().step(node, call)
        except TruncationRefusedError as exc:
            # What the node does: one line, and it stops; its log stays as it is.
            self.refusals[node.node_id] = str(exc)
            self.log_event(f"node {node.node_id} stops: {exc}")
            node.crash()
            return None

    _HANDLERS: ClassVar[dict[str, Any]] = {
        **Simulation._HANDLERS,
        "append": _append,
        "stop-all": _stop_all,
        "push-epoch": _push_epoch,
    }

    # ---- the run ----------------------------------------------------------------------------

    def _result(self, violation: Violation | None) -> SimResult:
        self.invariants = getattr(self, "checked_until_wipe", self.invariants)
        return super()._result(violation)

    def _check_survivors(self, *, whole: bool = False) -> None:
        for nid, protected in self.protected.items():
            node = self.nodes[nid]
            if node.log.end_offset < protected:
                raise Violation(
                    "committed-truncated",
                    f"survivor {nid}'s log ends at {node.log.end_offset}, below the committed "
                    f"offset {protected} it stopped with",
                )
            if whole and _records(node, protected) != self.kept[nid]:
                raise Violation(
                    "committed-truncated",
                    f"survivor {nid}'s records below its committed offset {protected} changed",
                )
        if whole:
            held: dict[int, bytes | None] = {}
            for nid in self.survivors:
                held.update(_records(self.nodes[nid], self.protected[nid]))
            lost = [o for o, v in self.acked_before.items() if held.get(o, b"<lost>") != v]
            if lost:
                raise Violation(
                    "acked-write-lost",
                    f"{len(lost)} acknowledged records (from offset {min(lost)}) are on no "
                    f"survivor's log below its committed offset",
                )

    def run(self) -> SimResult:
        for node in self.nodes.values():
            node.start(0)
        self.schedule(200, "append", None)
        self.schedule(self.wipe_at, "stop-all", None)
        deadline = self.wipe_at + 30_000
        try:
            while self._queue:
                at, _, kind, payload = heapq.heappop(self._queue)
                if at > deadline:
                    break
                self.now = int(at)
                self.events += 1
                node = self._HANDLERS[kind](self, payload)
                if node is not None:
                    self.invariants.after_event(node)
                self._check_survivors()
                if self.survivors_started and len(self.refusals) == len(self.survivors):
                    break
            self._check_survivors(whole=True)
            return self._result(None)
        except Violation as v:
            return self._result(v)
        except RaftcoreError as exc:
            return self._result(Violation("core-error", f"{type(exc).__name__}: {exc}"))


def run_majority_wipe(
    seed: int = 0, voters: int = 3, *, trace: bool = False, plant: str | None = None
) -> MajorityWipeReport:
    """One run: writes for 2-6 s, every voter stopped, a majority's disks replaced and started,
    the survivors started once the new majority's epoch passed theirs."""
    if plant:
        from raftcore.sim import plants

        plants.apply(plant)
    rng = random.Random(f"majority-wipe-scenario-{seed}")
    scenario = Scenario(
        seed=seed,
        voters=voters,
        observers=0,
        delay_ms=rng.choice([(1, 3), (1, 10), (2, 40)]),
        drop=rng.choice([0.0, 0.0, 0.01]),
        style="majority-wipe",
    )
    sim = _MajorityWipeSimulation(scenario, rng.randint(2_000, 6_000), trace=trace)
    result = sim.run()
    return MajorityWipeReport(
        result=result,
        wiped=sim.wiped,
        survivors=sim.survivors,
        protected=sim.protected,
        acknowledged=len(sim.acked_before),
        refusals=dict(sim.refusals),
        new_epoch=sim.new_epoch,
    )
