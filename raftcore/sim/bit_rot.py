"""The disk nemesis of the simulation: bit rot (protocol-aware recovery, raftcore.raft.damage).

During the fault phase a bit flips now and then in a committed batch of some replica's log,
running or down (as in a sealed segment: an uncommitted tail damaged is truncated when the log
opens, and a batch only one replica holds has no copy to repair from). Never a control batch (a
damaged Voters record stops a node from starting, docs/cluster.md), and never a batch whose copy
is already damaged on another replica: at most one damaged copy of a batch at a time, as
protocol-aware recovery assumes f < n/2 faulty copies. The node's scrubber is played by a scrub
of every live log every second.

Invariants, beside the history checks (which read what was written, ``read_true``):

- **never served damaged**: every Fetch answer's records are sound (CRC, header, offsets);
- **repaired**: the run settles only once no live log holds damage (the damaged batches were
  written again from an intact copy, or truncated away), so a damage never repaired is a
  liveness violation.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from raftcore.raft.damage import read_intact
from raftcore.raft.messages import FetchResponse
from raftcore.records import scan_batches
from raftcore.sim.invariants import Violation

if TYPE_CHECKING:
    from raftcore.sim.cluster import SimNode, Simulation

__all__ = ["BitRot"]

SCRUB_EVERY_MS = 1000


class BitRot:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = random.Random(f"bit-rot-{sim.scenario.seed}")
        self.stats = {"rotted": 0, "served damaged": 0, "scrubs finding damage": 0}

    def plan(self) -> None:
        sc = self.sim.scenario
        if not sc.bit_rot_every_ms:
            return
        t = 500
        while t < sc.fault_ms:
            t += self.rng.randint(*sc.bit_rot_every_ms)
            self.sim.schedule(min(t, sc.fault_ms), "bit-rot", "rot")
        for node_id in self.sim.nodes:
            self.sim.schedule(SCRUB_EVERY_MS + node_id * 37, "bit-rot", ("scrub", node_id))

    def step(self, payload: Any) -> SimNode | None:
        if payload == "rot":
            self._rot()
            return None
        _, node_id = payload
        self.sim.schedule(self.sim.now + SCRUB_EVERY_MS, "bit-rot", payload)
        node = self.sim.nodes[node_id]
        if not node.alive:
            return None
        log = node.log
        if log.end_offset <= log.log_start_offset or not log.rotted():
            return None  # (a sound log scrubs clean: the read is skipped to save time)
        _, damage = read_intact(log, log.log_start_offset, 1 << 30)
        if damage is None:
            return None
        self.stats["scrubs finding damage"] += 1
        core, now = node.core, self.sim.now
        return self.sim.step(node, lambda: core.report_damage(damage, now, "scrubbing"))

    def _rot(self) -> None:
        sim = self.sim
        if not sim.faults_active:
            return
        nodes = [n for n in sim.nodes.values() if n.log.end_offset > n.log.log_start_offset]
        if not nodes:
            return
        node = self.rng.choice(nodes)
        log = node.log
        data = log.read_true(log.log_start_offset, 1 << 30)
        scan = scan_batches(data, check_crc=False)
        committed = sim.membership.committed  # the highest high watermark any replica had
        data_batches = [
            k
            for k in range(scan.count)
            if not int(scan.attributes[k]) & 0x20 and int(scan.last_offsets[k]) < committed
        ]
        if not data_batches:
            return
        k = self.rng.choice(data_batches)
        base = int(scan.base_offsets[k])
        for other in sim.nodes.values():
            if other is not node and base in other.log.rotted():
                return  # one damaged copy of a batch at a time
        if not self._intact_copy_elsewhere(node, base, int(scan.epochs[k])):
            return  # the only copy left (a wiped disk took the others): no repair possible
        log.corrupt(base, self.rng.randrange(1 << 16), self.rng.randrange(8))
        self.stats["rotted"] += 1
        sim.log_event(f"bit rot in node {node.node_id}'s batch at {base}")

    def _intact_copy_elsewhere(self, node: SimNode, base: int, epoch: int) -> bool:
        """Whether another voter's log holds this batch, sound (protocol-aware recovery needs
        an intact copy on a voter: repairs come from the leader)."""
        live = [n for n in self.sim.nodes.values() if n.alive and n.core is not None]
        if not live:
            return False
        voters = max(live, key=lambda n: n.core.epoch).core.voter_set
        for other in self.sim.nodes.values():
            log = other.log
            if other is node or other.node_id not in voters or base in log.rotted():
                continue
            if not log.log_start_offset <= base < log.end_offset:
                continue
            if log.epoch_for_offset(base) != epoch:
                continue
            scan = scan_batches(log.read_true(base, 1), check_crc=False)
            if scan.count and int(scan.base_offsets[0]) == base:
                return True
        return False

    def on_send(self, src: SimNode, message: Any) -> None:
        if type(message) is not FetchResponse or len(message.records) == 0:
            return
        scan = scan_batches(bytes(message.records), check_crc=True)
        if scan.error is not None or scan.discontinuity >= 0:
            raise Violation(
                "served-damaged",
                f"node {src.node_id} served a damaged batch: {scan.error or ''}"
                f"{scan.discontinuity_reason or ''}",
            )

    def settled(self) -> bool:
        """No live log holds damage."""
        return not any(n.alive and n.log.rotted() for n in self.sim.nodes.values())
