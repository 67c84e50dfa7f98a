"""The properties every simulated run must keep, checked after every event.

- **single leader**: at most one leader per epoch, counting every replica's persisted state;
- **committed prefixes agree**: the batches below each replica's high watermark are the same
  batches (offsets, epoch, CRC) on every replica, forever;
- **committed records never change**: what a listener was handed at an offset is what every
  listener is ever handed there; each listener gets offsets in order, each once;
- **high watermark monotonic**: on a live replica it never goes back;
- **acknowledged means committed**: the core's verdict on every tracked append (its
  :class:`~raftcore.raft.AppendOutcome`) is checked: an append reported committed holds its
  values at its offsets in that replica's log when reported, is in the log of every later
  leader, and is in the committed log at the end; an append of an epoch its replica no longer
  leads has its verdict (a failure) at once, never later;
- **snapshots** (KIP-630): a snapshot sits at the log start offset whenever it is above 0
  (``snapshot-at-log-start``); a snapshot's state is the committed state below its end
  offset, when taken and when loaded (``snapshot-state``), so a replica that installs one and
  applies the rest holds the committed state; every snapshot a replica holds verifies as a
  whole and has the same bytes on every replica holding that id (``corrupt-snapshot``: a torn
  or corrupted download is never installed); no record below the log start offset is served
  (the in-memory log raises, a ``core-error``);
- **a leader that cannot write steps down** (``leader-cannot-write``): no replica still leads
  an epoch in which its log refused an append (a full disk), so that a voter that can write
  may be elected;
- **liveness**: once the faults stop, a leader is elected and every replica catches up to it,
  high watermark included, within a bounded simulated time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.errors import CorruptSnapshotError
from raftcore.raft.states import LeaderState
from raftcore.records import iter_batches
from raftcore.snapshot.format import verify_snapshot

if TYPE_CHECKING:
    from raftcore.raft import (
        Appended,
        AppendOutcome,
        CommittedBatch,
        LeaderAndEpoch,
        OffsetAndEpoch,
    )
    from raftcore.sim.cluster import SimNode, Simulation

__all__ = ["Invariants", "Violation"]


class Violation(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    def __reduce__(self) -> tuple:
        # Results cross process boundaries (--jobs): rebuild from both fields.
        return (Violation, (self.kind, self.detail))


class Invariants:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.leaders: dict[int, int] = {}
        self.committed_batches: dict[int, tuple[int, int, int]] = {}  # base -> (last, epoch, crc)
        self.committed_records: dict[int, bytes | None] = {}
        self.acked: dict[int, bytes | None] = {}
        # (node, incarnation, token) -> (appended, values): appends awaiting their verdict
        self.pending_acks: dict[tuple[int, int, int], tuple[Appended, list]] = {}
        # (node, incarnation) -> {epoch: how many of its pending appends are of that epoch}
        self.pending_epochs: dict[tuple[int, int], dict[int, int]] = {}
        self.outcomes = {"acknowledged": 0, "failed": 0, "indeterminate": 0}
        # Linearizable reads: the end of what was acknowledged when each was asked.
        self.acked_end = 0
        self.pending_reads: dict[tuple[int, int, int], int] = {}
        self.reads = {"confirmed": 0, "failed": 0}
        self.hw: dict[int, int] = {}
        self.checked: dict[int, int] = {}
        self.disk: dict[int, int] = {}  # node -> the generation of its disk checked
        self.listener_next: dict[int, int] = {}
        self.leader_checked: set[tuple[int, int, int]] = set()
        self.fired: dict[int, set[int]] = {}
        self.snapshot_digests: dict[OffsetAndEpoch, bytes] = {}  # id -> bytes, cluster-wide
        self.seen_snapshots: dict[int, OffsetAndEpoch | None] = {}

    # ---- per replica lifecycle ---------------------------------------------------------------

    def on_start(self, node: SimNode) -> None:
        self.hw.pop(node.node_id, None)
        # the committed prefix this disk held survives a restart, as far as the log does (an
        # unflushed tail is lost in a crash); a wiped disk starts over
        nid, log = node.node_id, node.log
        if self.disk.get(nid) == node.generation:
            kept = min(self.checked.get(nid, 0), log.end_offset)
        else:
            kept = log.log_start_offset
        self.disk[nid] = node.generation
        self.checked[nid] = max(kept, log.log_start_offset)
        self.listener_next[node.node_id] = node.log.log_start_offset
        self.fired[node.node_id] = set()

    def on_crash(self, node: SimNode) -> None:
        # a crash leaves its appends' fate unknown to their clients: indeterminate
        lost = [k for k in self.pending_acks if k[0] == node.node_id]
        for key in lost:
            del self.pending_acks[key]
        self.pending_epochs.pop((node.node_id, node.incarnation), None)
        self.outcomes["indeterminate"] += len(lost)

    # ---- listener callbacks ------------------------------------------------------------------

    def on_commit(self, node: SimNode, batches: list[CommittedBatch]) -> None:
        nid = node.node_id
        expected = self.listener_next[nid]
        for batch in batches:
            if batch.base_offset < expected:
                raise Violation(
                    "listener-order",
                    f"node {nid} handed batch {batch.base_offset} after offset {expected}",
                )
            for r in batch.records:
                seen = self.committed_records.setdefault(r.offset, r.value)
                if seen != r.value:
                    raise Violation(
                        "committed-record-changed",
                        f"offset {r.offset}: node {nid} committed {r.value!r}, earlier {seen!r}",
                    )
            expected = batch.last_offset + 1
        self.listener_next[nid] = expected

    def _committed_below(self, offset: int) -> dict[int, bytes | None]:
        return {o: v for o, v in self.committed_records.items() if o < offset}

    def on_take_snapshot(self, node: SimNode, snapshot_id: OffsetAndEpoch, state: dict) -> None:
        expected = self._committed_below(snapshot_id.offset)
        if state != expected:
            raise Violation(
                "snapshot-state",
                f"node {node.node_id} snapshots {snapshot_id} with {len(state)} values, the "
                f"committed state below it has {len(expected)} "
                f"(first difference at {_first_difference(state, expected)})",
            )

    def on_load_snapshot(self, node: SimNode, snapshot_id: OffsetAndEpoch, state: dict) -> None:
        """A loaded snapshot replaces the state: it must be the committed state below its
        end offset; the listener goes on from there."""
        expected = self._committed_below(snapshot_id.offset)
        if state != expected:
            raise Violation(
                "snapshot-state",
                f"node {node.node_id} loaded {snapshot_id} holding {len(state)} values, the "
                f"committed state below it has {len(expected)} "
                f"(first difference at {_first_difference(state, expected)})",
            )
        self.listener_next[node.node_id] = snapshot_id.offset

    def _check_snapshots(self, node: SimNode) -> None:
        log = node.log
        nid = node.node_id
        start = log.log_start_offset
        earliest = log.earliest_snapshot_id()
        if start > 0 and (earliest is None or earliest.offset != start):
            raise Violation(
                "snapshot-at-log-start",
                f"node {nid}: log start offset {start}, earliest snapshot {earliest}",
            )
        latest = log.latest_snapshot_id()
        if latest == self.seen_snapshots.get(nid) or latest is None:
            return
        self.seen_snapshots[nid] = latest
        for sid in log.snapshot_ids():
            data = log.read_snapshot(sid).data
            known = self.snapshot_digests.setdefault(sid, data)
            if known != data:
                raise Violation(
                    "corrupt-snapshot",
                    f"node {nid} holds snapshot {sid} with other bytes than another replica",
                )
            try:
                verify_snapshot(data, snapshot_id=sid, name=f"node {nid} snapshot {sid}")
            except CorruptSnapshotError as exc:
                raise Violation("corrupt-snapshot", str(exc)) from None

    def on_leader_change(self, node: SimNode, leader: LeaderAndEpoch) -> None:
        epochs = self.fired[node.node_id]
        if leader.leader_id is not None:
            if leader.epoch in epochs:
                raise Violation(
                    "leader-change-twice", f"node {node.node_id} told of epoch {leader.epoch} twice"
                )
            epochs.add(leader.epoch)

    def on_append(self, node: SimNode, appended: Appended, values: list) -> None:
        assert appended.token is not None
        key = (node.node_id, node.incarnation, appended.token)
        self.pending_acks[key] = (appended, [v for _, v in values])
        epochs = self.pending_epochs.setdefault((node.node_id, node.incarnation), {})
        epochs[appended.epoch] = epochs.get(appended.epoch, 0) + 1

    def on_outcome(self, node: SimNode, outcome: AppendOutcome) -> None:
        """The core's verdict on an append: a success must be true at once (the replica's log
        holds the values at those offsets), and stays true (checked on every later leader and
        at the end)."""
        appended = outcome.appended
        entry = self.pending_acks.pop((node.node_id, node.incarnation, appended.token), None)
        if entry is None:
            raise Violation(
                "verdict-twice", f"node {node.node_id} gave a second verdict on {appended}"
            )
        epochs = self.pending_epochs[(node.node_id, node.incarnation)]
        epochs[appended.epoch] -= 1
        if not epochs[appended.epoch]:
            del epochs[appended.epoch]
        _, values = entry
        if not outcome.committed:
            self.outcomes["failed"] += 1
            return
        hw = node.core.high_watermark
        if hw is None or hw <= appended.last_offset:
            raise Violation(
                "acked-above-hw", f"node {node.node_id} acknowledged {appended} with hw {hw}"
            )
        held = _values_at(node, appended.first_offset, appended.last_offset)
        if held != values:
            raise Violation(
                "acked-write-lost",
                f"node {node.node_id} acknowledged {appended} with values {values!r}, but its "
                f"log holds {held!r} there",
            )
        self.outcomes["acknowledged"] += 1
        for i, value in enumerate(values):
            self.acked[appended.first_offset + i] = value
        self.acked_end = max(self.acked_end, appended.last_offset + 1)

    def on_read(self, node: SimNode, read: Any) -> None:
        """A linearizable read asked at ``node``: note what was acknowledged by then."""
        self.pending_reads[(node.node_id, node.incarnation, read.token)] = self.acked_end

    def on_read_outcome(self, node: SimNode, outcome: Any) -> None:
        """A read confirmed must see every write acknowledged before it was asked: its index
        (the offset the state machine applies up to before reading) is past them all. A
        deposed leader that confirmed a read without a quorum would answer from a stale
        index."""
        read = outcome.read
        acked_end = self.pending_reads.pop((node.node_id, node.incarnation, read.token), None)
        if acked_end is None:
            raise Violation("read-verdict-twice", f"node {node.node_id}: second verdict on {read}")
        if outcome.error != 0:
            self.reads["failed"] += 1
            return
        if read.index < acked_end:
            raise Violation(
                "stale-read",
                f"node {node.node_id} confirmed {read} below {acked_end}, the end of what "
                f"was acknowledged before the read was asked",
            )
        self.reads["confirmed"] += 1

    def check_acknowledged(self) -> None:
        """At the end of a run: every acknowledged value is committed at its offset."""
        for offset, value in self.acked.items():
            seen = self.committed_records.get(offset, b"<never committed>")
            if seen != value:
                raise Violation(
                    "acked-write-lost",
                    f"offset {offset} was acknowledged with {value!r}; committed: {seen!r}",
                )

    # ---- after every event ---------------------------------------------------------------------

    def after_event(self, node: SimNode) -> None:
        if not node.alive:
            return
        core = node.core
        state = core.state
        nid = node.node_id
        # single leader per epoch, over every persisted election state
        stored = node.store.read()
        if stored is not None and stored.leader_id is not None:
            prev = self.leaders.setdefault(stored.epoch, stored.leader_id)
            if prev != stored.leader_id:
                raise Violation(
                    "two-leaders",
                    f"epoch {stored.epoch}: {prev} and {stored.leader_id} (node {nid}'s view)",
                )
        if isinstance(state, LeaderState):
            prev = self.leaders.setdefault(state.epoch, nid)
            if prev != nid:
                raise Violation("two-leaders", f"epoch {state.epoch}: {prev} and {nid}")
            if node.write_refused_epoch == state.epoch:
                raise Violation(
                    "leader-cannot-write",
                    f"node {nid} still leads epoch {state.epoch} after its log refused an append",
                )
            key = (nid, node.incarnation, state.epoch)
            if key not in self.leader_checked:
                self.leader_checked.add(key)
                self._check_leader_has_acked(node)
        self._check_snapshots(node)
        # a replica never truncates what it held committed (a snapshot may take its place)
        held = self.checked.get(nid, 0)
        if node.log.end_offset < held:
            raise Violation(
                "committed-truncated",
                f"node {nid}'s log ends at {node.log.end_offset}, below the committed prefix "
                f"it held up to {held}",
            )
        # high watermark monotonic on a live replica
        hw = core.high_watermark
        if hw is not None:
            prev_hw = self.hw.get(nid)
            if prev_hw is not None and hw < prev_hw:
                raise Violation("hw-backwards", f"node {nid}: {prev_hw} -> {hw}")
            self.hw[nid] = hw
            if hw > node.log.end_offset:
                raise Violation(
                    "hw-past-log-end", f"node {nid}: hw {hw} > end {node.log.end_offset}"
                )
            self._check_committed_prefix(node, hw)
        # an append of an epoch this replica no longer leads has had its verdict
        epochs = self.pending_epochs.get((nid, node.incarnation))
        leading = state.epoch if isinstance(state, LeaderState) else None
        if epochs and (len(epochs) > 1 or leading not in epochs):
            for (pnode, inc, _), (appended, _) in self.pending_acks.items():
                if pnode == nid and inc == node.incarnation and appended.epoch != leading:
                    raise Violation(
                        "verdict-late",
                        f"node {nid} ({state!r}) still holds {appended} of epoch "
                        f"{appended.epoch} without a verdict",
                    )

    def _check_committed_prefix(self, node: SimNode, hw: int) -> None:
        nid = node.node_id
        start = max(self.checked.get(nid, 0), node.log.log_start_offset)
        if start >= hw:
            return
        data = node.log.read_true(start, 1 << 30)
        for batch in iter_batches(data):
            if batch.base_offset >= hw:
                break
            entry = (batch.last_offset, batch.partition_leader_epoch, batch.crc)
            seen = self.committed_batches.setdefault(batch.base_offset, entry)
            if seen != entry:
                raise Violation(
                    "committed-prefix-differs",
                    f"node {nid} batch at {batch.base_offset} is {entry}, committed "
                    f"elsewhere as {seen}",
                )
        self.checked[nid] = hw

    def _check_leader_has_acked(self, node: SimNode) -> None:
        if not self.acked:
            return
        values = _snapshot_values(node)
        if node.log.end_offset > node.log.log_start_offset:
            for batch in iter_batches(node.log.read_true(node.log.log_start_offset, 1 << 30)):
                if not batch.is_control:
                    for r in batch.records():
                        if r.offset in self.acked:
                            values[r.offset] = r.value
        for offset, value in self.acked.items():
            if values.get(offset) != value:
                raise Violation(
                    "acked-write-lost",
                    f"new leader {node.node_id} (epoch {node.core.epoch}) has "
                    f"{values.get(offset)!r} at acknowledged offset {offset}, "
                    f"expected {value!r}",
                )

    # ---- liveness -------------------------------------------------------------------------------

    def settled(self) -> bool:
        """One leader, every replica alive, caught up to it, and its high watermark at the end
        of its log."""
        nodes = self.sim.nodes.values()
        leaders = [n for n in nodes if n.alive and isinstance(n.core.state, LeaderState)]
        if len(leaders) != 1:
            return False
        leader = leaders[0]
        end = leader.log.end_offset
        if leader.core.high_watermark != end:
            return False
        for n in nodes:
            if not n.alive or n.log.end_offset != end or n.core.high_watermark != end:
                return False
            if n.core.epoch != leader.core.epoch:
                return False
        return True

    def check_liveness(self) -> None:
        if self.settled():
            return
        parts = []
        for n in self.sim.nodes.values():
            parts.append(
                f"{n.node_id}: {n.core.state!r} end={n.log.end_offset} hw={n.core.high_watermark}"
                if n.alive
                else f"{n.node_id}: down"
            )
        raise Violation("liveness", "; ".join(parts))


def _first_difference(a: dict, b: dict) -> int | None:
    keys = sorted(set(a) | set(b))
    return next((k for k in keys if a.get(k, b"<none>") != b.get(k, b"<none>")), None)


def _snapshot_values(node: SimNode) -> dict[int, bytes | None]:
    """The values in the snapshot at the replica's log start (what its log no longer holds)."""
    earliest = node.log.earliest_snapshot_id()
    if earliest is None or node.log.log_start_offset == 0:
        return {}
    return {int(r.key): r.value for r in node.log.read_snapshot(earliest).records()}


def _values_at(node: SimNode, first: int, last: int) -> list[bytes | None]:
    """The values of the records first..last in the replica's log (data records only), or in
    its snapshot for offsets below its log start."""
    values: list[bytes | None] = []
    start = node.log.log_start_offset
    if first < start:
        held = _snapshot_values(node)
        values.extend(held[o] for o in range(first, min(last + 1, start)) if o in held)
        first = start
        if first > last:
            return values
    for batch in iter_batches(node.log.read_true(first, 1 << 30)):
        if batch.base_offset > last:
            break
        if batch.is_control:
            continue
        values.extend(r.value for r in batch.records() if first <= r.offset <= last)
    return values
