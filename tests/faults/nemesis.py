"""The seeded nemesis: every 2-5 s it heals or restarts what an earlier fault broke, or
injects a new fault.

Faults (``kind`` in the figures):

- ``kill-leader`` / ``kill-follower``: SIGKILL; the node stays down until a later ``restart``
  (on the same data directory). Never more than a minority down this way.
- ``kill-majority``: SIGKILL a majority at once (two of three, three of five): the quorum is
  lost; they are restarted after 1-3 s.
- ``pause-leader`` / ``pause-follower``: SIGSTOP for 1-3 s, then SIGCONT (a paused leader is
  deposed: the fetch timeout is 1 s).
- ``partition-leader``: the leader cut off from every other node (clients still reach it).
- ``partition-split``: a random minority cut off from the majority (the leader on either side).
- ``partition-oneway``: one node (the leader half the time) drops what one peer sends it; the
  other direction still flows.
- ``heal`` (every partition rule removed) and ``restart`` (killed nodes started again).

The seed fixes the schedule: the intervals, the choice of fault and of every random pick. Which
node is the leader when a fault lands is up to the processes, so a replay repeats the schedule,
not the exact interleaving.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .nodes import NodeSet
from .probe import QuorumView
from .voter_guard import VoterGuard, majority

__all__ = ["FAULT_KINDS", "Event", "Nemesis"]

KILLS = ("kill-leader", "kill-follower", "kill-majority")
PAUSES = ("pause-leader", "pause-follower")
PARTITIONS = ("partition-leader", "partition-split", "partition-oneway")
FAULT_KINDS = KILLS + PAUSES + PARTITIONS


@dataclass
class Event:
    t: float  # seconds since the run started
    kind: str
    nodes: list[int] = field(default_factory=list)
    detail: str = ""
    leader: int = -1  # the leader the nemesis saw (-1: none found)
    epoch: int = -1
    t_end: float = -1.0

    def line(self) -> str:
        who = ",".join(f"n{i}" for i in self.nodes)
        extra = f" {self.detail}" if self.detail else ""
        if self.kind in FAULT_KINDS:  # faults looked for the leader first
            extra += f" (leader n{self.leader}@{self.epoch})" if self.leader > 0 else " (no leader)"
        return f"[{self.t:7.2f} s] {self.kind:<17} {who:<10}{extra}"


class Nemesis:
    def __init__(
        self,
        seed: int,
        nodes: NodeSet,
        *,
        partitions: bool,
        log: Callable[[str], None] = print,
        guard: VoterGuard | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.net = nodes.network
        self.partitions = partitions and self.net.partitions
        self.log = log
        self.events: list[Event] = []
        self.blocks: dict[int, set[int]] = {}
        self.down_since: dict[int, int] = {}  # node -> step it was killed at
        self.partition_step = -1
        self.errors: list[str] = []
        self.abort = threading.Event()
        self.guard = guard  # the membership nemesis's voters: faults are judged against them

    @property
    def n(self) -> int:
        return len(self.nodes.node_ids)

    @property
    def majority(self) -> int:
        return self.n // 2 + 1

    def now(self) -> float:
        return time.monotonic() - self.nodes.t0

    # ---- the schedule -------------------------------------------------------------------------

    def run(self, duration_s: float) -> None:
        """Inject faults until ``duration_s`` seconds from now (or ``abort``)."""
        end = time.monotonic() + duration_s
        step = 0
        while not self.abort.is_set():
            wait = self.rng.uniform(2.0, 5.0)
            if time.monotonic() + wait > end:
                break
            if self.abort.wait(wait):
                break
            step += 1
            self._step(step)

    def _step(self, step: int) -> None:
        rng = self.rng
        # Repairs first: each broken thing is repaired with some probability, surely after two
        # steps (so the cluster spends time both broken and healthy).
        r_restart, r_heal = rng.random(), rng.random()
        old_down = [i for i, s in self.down_since.items() if step - s >= 2]
        if self.down_since and (r_restart < 0.6 or old_down):
            self.restart(sorted(self.down_since))
            return
        if self.blocks and (r_heal < 0.6 or step - self.partition_step >= 2):
            self.heal()
            return
        kinds = list(KILLS + PAUSES + (PARTITIONS if self.partitions else ()))
        kind = rng.choice(kinds)
        picks = [rng.random() for _ in range(4)]  # the same draws whatever the kind
        hold = 1.0 + 2.0 * picks[3]
        view = self.nodes.probe(0.8)
        with self.nodes.lock:  # the membership nemesis changes the nodes under it too
            then = self._act(step, kind, picks, hold, view)
        if then is not None:  # a fault that ends by itself: its hold outside the lock
            time.sleep(hold)
            with self.nodes.lock:
                then()

    def _act(
        self, step: int, kind: str, picks: list[float], hold: float, view: QuorumView
    ) -> Callable[[], None] | None:
        """Inject ``kind``; for a pause or kill-majority, what ends it after ``hold``."""
        leader = view.leader_id if view.leader_id in self.nodes.node_ids else -1
        ev = Event(self.now(), kind, leader=leader, epoch=view.leader_epoch)
        running = self.nodes.running()
        leader_or_any = leader if leader > 0 else self._pick(running, picks[0])
        followers = [i for i in running if i != leader]
        if kind in ("kill-leader", "kill-follower"):
            victim = leader_or_any if kind == "kill-leader" else self._pick(followers, picks[0])
            if self.guard is None and len(self.down_since) + 1 > (self.n - 1) // 2:
                victim = -2  # no room for another kill
            elif victim > 0 and self._held(kind, {victim}):
                victim = -2
            if victim == -2:
                if self.down_since:
                    self.restart(sorted(self.down_since))  # repair instead
                return None
            if victim < 0:
                return None
            self.nodes.kill(victim)
            self.down_since[victim] = step
            ev.nodes = [victim]
        elif kind == "kill-majority":
            victims = self._majority_victims(running, picks[0])
            for v in victims:
                self.nodes.kill(v)
            ev.nodes = victims
            ev.detail = f"(restart after {hold:.1f} s)"
            self._record(ev)

            def restart_them() -> None:
                for v in victims:
                    if v in self.nodes.node_ids:  # not retired meanwhile
                        self._start(v)
                ev.t_end = self.now()

            return restart_them
        elif kind in PAUSES:
            victim = leader_or_any if kind == "pause-leader" else self._pick(followers, picks[0])
            if victim < 0 or self._held(kind, {victim}):
                return None
            ev.nodes = [victim]
            ev.detail = f"for {hold:.1f} s"
            self.nodes.signal(victim, signal.SIGSTOP)
            self._record(ev)

            def resume() -> None:
                self.nodes.signal(victim, signal.SIGCONT)
                ev.t_end = self.now()

            return resume
        elif kind == "partition-leader":
            victim = leader_or_any
            others = [i for i in self.nodes.node_ids if i != victim]
            self._set_blocks(self._split([victim], others))
            ev.nodes = [victim]
            ev.detail = f"| {','.join(f'n{i}' for i in others)}"
        elif kind == "partition-split":
            voters = self.nodes.node_ids if self.guard is None else self.guard.voter_ids()
            voters = [i for i in voters if i in self.nodes.node_ids]
            size = 1 + int(picks[1] * ((len(voters) - 1) // 2))  # 1..minority of the voters
            order = self._shuffled(voters, picks[0])
            if picks[2] < 0.5 and leader in order:  # the leader in the minority half the time
                order.remove(leader)
                order.insert(0, leader)
            minority, majority = sorted(order[:size]), sorted(order[size:])
            for i, r in zip(self._observers(), self._shuffled_floats(picks[1]), strict=False):
                (minority if r < 0.5 else majority).append(i)  # each observer on either side
            self._set_blocks(self._split(minority, majority))
            ev.nodes = sorted(minority)
            ev.detail = f"| {','.join(f'n{i}' for i in sorted(majority))}"
        elif kind == "partition-oneway":
            victim = leader_or_any if picks[2] < 0.5 else self._pick(self.nodes.node_ids, picks[0])
            peers = [i for i in self.nodes.node_ids if i != victim]
            peer = self._pick(peers, picks[1])
            self._set_blocks({victim: {peer}})
            ev.nodes = [victim]
            ev.detail = f"drops what n{peer} sends"
        self.partition_step = step if kind in PARTITIONS else self.partition_step
        self._record(ev)
        return None

    def _majority_victims(self, running: list[int], r: float) -> list[int]:
        """Running nodes to kill so that a majority of the voters is down: without the
        membership nemesis, a majority of the nodes; with it, of the current voters (the
        available ones, in a seeded order)."""
        if self.guard is None:
            order = self._shuffled(running, r)
            return sorted(order[: max(0, self.majority - len(self.down_since))])
        voters = self.guard.voters
        up = sorted(i for i, _ in self.guard.available(voters, self.nodes.unavailable()))
        order = self._shuffled([i for i in up if i in running], r)
        return sorted(order[: max(0, len(up) - majority(len(voters)) + 1)])

    def _observers(self) -> list[int]:
        """Members that are no voter of any set that may be in force (membership runs)."""
        if self.guard is None:
            return []
        voters = set(self.guard.voter_ids())
        return [i for i in self.nodes.node_ids if i not in voters]

    def _held(self, kind: str, victims: set[int]) -> bool:
        """With the membership nemesis: True (and recorded) when taking ``victims`` down would
        leave fewer than a majority of a voter set that may be in force available."""
        if self.guard is None:
            return False
        why = self.guard.why_not_take_down(victims, self.nodes.unavailable())
        if why is None:
            return False
        self._record(Event(self.now(), "held-back", sorted(victims), f"{kind}: {why}"))
        return True

    # ---- repairs --------------------------------------------------------------------------------

    def restart(self, node_ids: list[int]) -> None:
        with self.nodes.lock:
            for i in [i for i in node_ids if i not in self.nodes.node_ids]:
                self.down_since.pop(i, None)  # removed from the voters and retired meanwhile
            node_ids = [i for i in node_ids if i in self.nodes.node_ids]
            if not node_ids:
                return
            ev = Event(self.now(), "restart", nodes=list(node_ids))
            self._record(ev)
            for i in node_ids:
                self._start(i)
                self.down_since.pop(i, None)
            ev.t_end = self.now()

    def heal(self) -> None:
        ev = Event(self.now(), "heal", nodes=sorted(self.blocks))
        self.net.heal()
        self.blocks = {}
        self._record(ev)

    def heal_everything(self) -> None:
        """End of the fault phase: no partition, nothing paused, every node running."""
        self.net.heal()
        self.blocks = {}
        with self.nodes.lock:
            self.nodes.resume_all()
            down = self.nodes.down()
            ev = Event(self.now(), "final-heal", nodes=down)
            self._record(ev)
            for i in down:
                self._start(i)
            self.down_since.clear()

    # ---- helpers --------------------------------------------------------------------------------

    def _start(self, node_id: int) -> None:
        try:
            self.nodes.start(node_id, wait=True, timeout_s=30)
        except Exception as exc:
            msg = f"node {node_id} did not restart cleanly: {exc}"
            self.errors.append(msg)
            self.log(msg)

    def _record(self, ev: Event) -> None:
        self.events.append(ev)
        self.log(ev.line())

    def _set_blocks(self, blocks: dict[int, set[int]]) -> None:
        self.net.set_blocks(blocks)
        self.blocks = {k: set(v) for k, v in blocks.items() if v}

    @staticmethod
    def _split(a: list[int], b: list[int]) -> dict[int, set[int]]:
        blocks = {i: set(b) for i in a}
        blocks.update({i: set(a) for i in b})
        return blocks

    @staticmethod
    def _pick(items: list[int], r: float) -> int:
        return items[int(r * len(items))] if items else -1

    @staticmethod
    def _shuffled(items: list[int], r: float) -> list[int]:
        out = list(items)
        random.Random(r).shuffle(out)
        return out

    @staticmethod
    def _shuffled_floats(r: float, n: int = 64) -> list[float]:
        g = random.Random(r * 7 + 1)
        return [g.random() for _ in range(n)]
