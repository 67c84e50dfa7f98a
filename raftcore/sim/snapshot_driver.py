"""The simulation's snapshot driving (KIP-630), the part of :class:`Simulation` that plays
the node's snapshotter and a client's DeleteRecords, and the nemesis that corrupts snapshot
chunks on the wire."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from raftcore.errors import SnapshotError
from raftcore.raft.messages import FetchSnapshotResponse
from raftcore.raft.snapshots import InvalidSnapshotError
from raftcore.sim.invariants import Violation

if TYPE_CHECKING:
    from raftcore.sim.cluster import SimNode


class SnapshotDriver:
    """Mixed into Simulation: uses its rng, nodes, schedule, log_event, process, step,
    invariants and snapshot_stats."""

    rng: Any
    nodes: dict[int, Any]
    now: int
    invariants: Any
    snapshot_stats: dict[str, int]

    def schedule(self, at: float, kind: str, payload: Any) -> None:
        raise NotImplementedError

    def log_event(self, text: str) -> None:
        raise NotImplementedError

    def process(self, node: Any, output: Any) -> None:
        raise NotImplementedError

    def step(self, node: Any, call: Any) -> Any:
        raise NotImplementedError

    def _corrupt_chunk(self, message: FetchSnapshotResponse) -> FetchSnapshotResponse:
        """The nemesis: flip one byte of a snapshot chunk, or cut the chunk short and announce
        the snapshot as ending there (a torn download that looks complete)."""
        self.snapshot_stats["chunks corrupted"] += 1
        data = bytearray(message.data)
        if self.rng.random() < 0.5:
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
            self.log_event(f"snapshot chunk at {message.position}: a byte flipped")
            return dataclasses.replace(message, data=bytes(data))
        cut = self.rng.randrange(1, len(data))
        self.log_event(f"snapshot chunk at {message.position}: torn at {cut} bytes")
        return dataclasses.replace(message, data=bytes(data[:cut]), size=message.position + cut)

    def take_snapshot(self, node: SimNode) -> None:
        """The driver's half of a snapshot, as the node does it: the state machine's offset
        is checked by the core (``create_snapshot``), the state written, frozen, reported.
        Half the time all at once; otherwise the create and the freeze come later, as on the
        node's worker thread, with commits, installs, crashes and leader changes in between.
        Now and then the driver abandons it instead."""
        node.snapshot_busy = True
        if self.rng.random() < 0.5:
            self._snapshot_step((node.node_id, node.incarnation, "create", None, None))
        else:
            delay = self.rng.randint(1, 300)
            self.schedule(self.now + delay, "snapshot", (node.node_id, node.incarnation, "create"))

    def _snapshot_step(self, payload: tuple) -> SimNode | None:
        node_id, incarnation, stage, *held = (*payload, None, None)[:5]
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            return None  # the crash took the snapshot with it
        core = node.core
        listener = node.listener
        if stage == "create":
            end = core.listener_next_offset
            if listener.applied > end or any(o >= end for o in listener.state):
                raise Violation("snapshot-state", f"node {node_id}: state past offset {end}")
            try:
                writer = core.create_snapshot(end, self.now)
            except InvalidSnapshotError as exc:  # e.g. a snapshot installed meanwhile
                self.log_event(f"snapshot at {end} refused at {node_id}: {exc}")
                writer = None
            if writer is None or self.rng.random() < 0.05:
                if writer is not None:
                    writer.abort()
                self.log_event(f"snapshot at {end} abandoned at {node_id}")
                node.snapshot_busy = False
                return self.step(node, lambda: core.snapshot_abandoned(self.now))
            self.invariants.on_take_snapshot(node, writer.snapshot_id, listener.state)
            records = listener.snapshot_records()
            if self.rng.random() < 0.5:
                return self._freeze_snapshot(node, writer, records)
            delay = self.rng.randint(1, 300)
            self.schedule(
                self.now + delay, "snapshot", (node_id, incarnation, "freeze", writer, records)
            )
            return None
        writer, records = held
        return self._freeze_snapshot(node, writer, records)

    def _freeze_snapshot(self, node: SimNode, writer: Any, records: list) -> SimNode | None:
        writer.append(records)
        node.snapshot_busy = False
        if writer.snapshot_id.offset < node.log.log_start_offset:
            # An install moved the log start past it while it was written: the log drops it
            # (SnapshotError), and the driver abandons it, as the node's snapshotter does.
            self.snapshot_stats["frozen below the log start"] += 1
        try:
            writer.freeze()
        except SnapshotError as exc:
            self.log_event(f"snapshot {writer.snapshot_id} dropped at {node.node_id}: {exc}")
            core = node.core
            return self.step(node, lambda: core.snapshot_abandoned(self.now))
        self.log_event(f"snapshot {writer.snapshot_id} taken at {node.node_id}")
        core = node.core
        return self.step(node, lambda: core.snapshot_frozen(writer.snapshot_id, self.now))

    def _delete_records(self, node: SimNode) -> None:
        """A client's DeleteRecords at the leader, below a random committed offset."""
        core = node.core
        hw = core.high_watermark
        if hw is None:
            return
        offset = self.rng.randint(node.log.log_start_offset, hw)
        result = core.delete_records(offset, self.now)
        self.snapshot_stats["delete records"] += 1
        self.log_event(f"delete records below {offset} at {node.node_id}: {result}")
