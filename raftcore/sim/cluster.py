"""A seeded, deterministic simulation of a raftcore quorum: N RaftCores over a simulated
network and clock, with in-memory logs that lose unflushed data on a crash.

One event queue, one clock, one random generator (everything derives from the seed), so a
seed replays exactly. Faults: message loss, delay and reordering (random delivery times),
duplication, partitions that come and go, crash-restarts, slow disks, full disks. The
invariants in :mod:`raftcore.sim.invariants` are checked after every event.

A full disk refuses every write to a node's log and quorum-state. The simulated node does what
the real one does: a leader's refused append makes its core resign; any other call into the
core that raises OSError (a follower's append, a quorum-state write) stops the node, which
loses what it had not flushed, and its supervisor starts it again after a downtime.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from raftcore.errors import LostQuorumStateError, RaftcoreError
from raftcore.raft import (
    CommittedBatch,
    LeaderAndEpoch,
    LogWriteError,
    NotLeaderError,
    Outbound,
    QuorumConfig,
    RaftCore,
)
from raftcore.raft.messages import FetchSnapshotResponse
from raftcore.raft.states import LeaderState
from raftcore.sim.bit_rot import BitRot
from raftcore.sim.handover import HandOvers
from raftcore.sim.invariants import Invariants, Violation
from raftcore.sim.membership import Membership, directory_id_of, endpoint_of
from raftcore.sim.scenario import Scenario
from raftcore.sim.snapshot_driver import SnapshotDriver
from raftcore.sim.trace import short_message
from raftcore.testing import InMemoryLog, MemoryQuorumStateStore

__all__ = ["Scenario", "Simulation", "SimResult"]

logger = logging.getLogger(__name__)

INF = float("inf")


# Kafka's RaftEventSimulationTest uses these timings.
SIM_QUORUM = dict(
    election_timeout_ms=1000,
    election_backoff_max_ms=100,
    fetch_timeout_ms=3000,
    retry_backoff_ms=50,
    request_timeout_ms=3000,
    fetch_max_wait_ms=100,
    cluster_id="sim-cluster",
)


class SimListener:
    """Records what the core commits, for the invariants, and keeps the simulated state
    machine: every committed value by offset, serialized into snapshots and restored from
    them."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.next_offset: int | None = None
        self.leaders: list[LeaderAndEpoch] = []
        self.state: dict[int, bytes | None] = {}
        self.applied = 0  # the offset the state is complete up to (exclusive)

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        self.node.sim.invariants.on_commit(self.node, batches)
        for batch in batches:
            for r in batch.records:
                self.state[r.offset] = r.value
            self.applied = batch.last_offset + 1

    def handle_load_snapshot(self, reader: Any) -> None:
        self.state = {int(r.key): r.value for r in reader.records()}
        self.applied = reader.snapshot_id.offset
        self.node.sim.invariants.on_load_snapshot(self.node, reader.snapshot_id, self.state)

    def snapshot_records(self) -> list[tuple[bytes, bytes | None]]:
        return [(b"%d" % offset, value) for offset, value in sorted(self.state.items())]

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.node.sim.invariants.on_leader_change(self.node, leader)
        self.leaders.append(leader)


@dataclass
class SimNode:
    sim: Simulation
    node_id: int
    is_voter: bool
    log: InMemoryLog = field(default_factory=InMemoryLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    core: RaftCore | None = None
    listener: SimListener | None = None
    alive: bool = False
    incarnation: int = 0
    flush_delay: tuple[int, int] = (0, 2)
    pending: list[Outbound] = field(default_factory=list)
    flush_scheduled: bool = False
    poll_at: float = INF
    snapshot_busy: bool = False  # a snapshot is being taken (one at a time, as the node)
    generation: int = 0  # of its disk: a wipe gives it a new directory id
    write_refused_epoch: int = -1  # the last epoch in which it led and its log refused an append
    # the committed offset as checkpointed on its disk (raftcore.node.committed_checkpoint):
    # written at every flush here, a lower bound that lags the core's; read back at start
    committed_checkpoint: int = 0

    @property
    def disk_full(self) -> bool:
        return self.log.disk_full

    @disk_full.setter
    def disk_full(self, full: bool) -> None:
        self.log.disk_full = self.store.disk_full = full

    @property
    def directory_id(self) -> bytes:
        return directory_id_of(self.sim.scenario.seed, self.node_id, self.generation)

    def wipe(self) -> None:
        """The disk is lost: an empty log and quorum-state store, and a new directory id (it
        comes back a new replica, KIP-853)."""
        assert not self.alive
        self.generation += 1
        self.log = InMemoryLog()
        self.store = MemoryQuorumStateStore()
        self.committed_checkpoint = 0

    def start(self, now: int) -> None:
        self.incarnation += 1
        self.alive = True
        self.snapshot_busy = False
        self.pending = []
        self.flush_scheduled = False
        self.poll_at = INF
        self.listener = SimListener(self)
        sc = self.sim.scenario
        snapshot_config = (
            dict(
                snapshot_min_records=sc.snapshot_every,
                max_replication_lag_ms=sc.max_replication_lag_ms,
            )
            if sc.snapshot_every
            else {}
        )
        cfg = QuorumConfig(
            voters=self.sim.voter_ids,
            high_watermark_linger_ms=sc.high_watermark_linger_ms,
            **SIM_QUORUM,
            **snapshot_config,
        )
        rng = random.Random(f"{self.sim.scenario.seed}-{self.node_id}-{self.incarnation}")
        while True:
            self.core = RaftCore(
                self.node_id,
                cfg,
                self.log,
                self.store,
                rng=rng,
                listener=self.listener,
                directory_id=self.directory_id,
                endpoint=endpoint_of(self.node_id),
                committed_offset=self.committed_checkpoint,
            )
            self.sim.invariants.on_start(self)
            try:
                output = self.core.start(now)
            except OSError as exc:  # a full disk: it refuses to start; tried again later
                self.alive = False
                self.core = None
                self.sim.restart_after_failure(self, exc)
                return
            except LostQuorumStateError as exc:
                # What the node does (raftcore.node.data_dir): a lost quorum-state gets the
                # replica a new directory id; with a static voter set it refuses to start.
                self.sim.log_event(f"node {self.node_id} lost its quorum-state: {exc.static=}")
                if exc.static:
                    # It refuses to start; the operator wipes its data directory and starts
                    # it again, a new replica (docs/cluster.md).
                    self.alive = False
                    self.core = None
                    self.wipe()
                    self.sim.schedule(now + 1000, "fault", ("restart", self.node_id))
                    return
                self.generation += 1
                continue
            break
        self.sim.process(self, output)

    def crash(self) -> None:
        self.alive = False
        self.sim.count_snapshots(self.core)
        self.core = None
        self.pending = []
        self.log.crash()
        self.sim.invariants.on_crash(self)


class Simulation(SnapshotDriver):
    def __init__(self, scenario: Scenario, *, trace: bool = False) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        self.now = 0
        self._queue: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        n = scenario.voters
        self.voter_ids = frozenset(range(1, n + 1))
        self.nodes: dict[int, SimNode] = {}
        for i in range(1, n + scenario.observers + 1):
            node = SimNode(self, i, i <= n)
            node.flush_delay = scenario.flush_delay_ms
            if scenario.slow_node == i:
                node.flush_delay = (20, 150)
            self.nodes[i] = node
        self.blocked: set[tuple[int, int]] = set()
        self.faults_active = True
        self.invariants = Invariants(self)
        self.membership = Membership(self)
        self.bit_rot = BitRot(self)
        # full disks draw from their own generator: runs without them stay as they were
        self.disk_rng = random.Random(f"full-disk-events-{scenario.seed}")
        self.disk_stats = {"disks filled": 0, "leader appends refused": 0, "node stops": 0}
        self.hand_overs = HandOvers(SIM_QUORUM["election_timeout_ms"])  # type: ignore[arg-type]
        self.trace: deque[str] = deque(maxlen=None if trace else 400)
        self.appends = 0
        self.events = 0
        self.snapshot_stats = {
            "taken": 0,
            "installed": 0,
            "loaded": 0,
            "log start moves": 0,
            "chunks corrupted": 0,
            "downloads refused": 0,
            "delete records": 0,
            "frozen below the log start": 0,
        }

    def count_snapshots(self, core: RaftCore | None) -> None:
        if core is not None:
            st = self.snapshot_stats
            st["taken"] += core.snapshots.taken
            st["installed"] += core.snapshots.installed
            st["loaded"] += core.feed.snapshots_loaded
            st["log start moves"] += core.snapshots.log_start_moves
            st["downloads refused"] += core.snapshots.refused

    # ---- scheduling ---------------------------------------------------------------------------

    def schedule(self, at: float, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, payload))

    def log_event(self, text: str) -> None:
        self.trace.append(f"{self.now:>7} {text}")

    # ---- the network --------------------------------------------------------------------------

    def send(self, src: SimNode, out: Outbound) -> None:
        dst = out.destination
        kind = type(out.message).__name__
        if (src.node_id, dst) in self.blocked:
            self.log_event(f"{src.node_id}->{dst} {kind} blocked")
            return
        sc = self.scenario
        if self.faults_active and sc.drop and self.rng.random() < sc.drop:
            self.log_event(f"{src.node_id}->{dst} {kind} dropped")
            return
        copies = (
            2 if self.faults_active and sc.duplicate and self.rng.random() < sc.duplicate else 1
        )
        message = out.message
        if kind == "FetchRequest" and not message.repair:  # a repair fetch is no log end
            self.membership.on_fetch_sent(src, dst, message.fetch_offset)
        elif kind == "FetchResponse":
            self.bit_rot.on_send(src, message)
        if (
            sc.corrupt_snapshot_chunk
            and self.faults_active
            and type(message) is FetchSnapshotResponse
            and len(message.data) > 1
            and self.rng.random() < sc.corrupt_snapshot_chunk
        ):
            message = self._corrupt_chunk(message)
        cid = out.correlation_id
        if kind.endswith("Request"):
            # A request travels on a connection of this incarnation of the sender; its
            # answer is lost if the sender restarts meanwhile (the connection is gone), just
            # as over TCP. The incarnation rides in the high bits of the correlation id.
            cid |= src.incarnation << 32
        for _ in range(copies):
            delay = self.rng.randint(*sc.delay_ms) if self.faults_active else self.rng.randint(1, 3)
            self.schedule(self.now + delay, "deliver", (src.node_id, dst, cid, message))
        if (
            self.faults_active
            and sc.crash_after_send
            and type(out.message).__name__ in sc.crash_after
            and self.rng.random() < sc.crash_after_send
        ):
            # Die right after an acknowledgement or a vote left: the narrowest windows. (With
            # disk faults, a granted vote is now and then forgotten with the quorum-state.)
            if kind == "VoteResponse" and message.vote_granted:
                self.membership.on_vote_granted(src)
            self.schedule(self.now, "fault", ("crash", src.node_id))
            self.schedule(
                self.now + self.rng.randint(*sc.downtime_ms), "fault", ("restart", src.node_id)
            )

    def process(self, node: SimNode, output: Any) -> None:
        """Send or hold what a core produced, and arrange its next poll and flush."""
        if output.snapshot_due and not node.snapshot_busy:
            self.take_snapshot(node)
        for outcome in output.completions:
            self.invariants.on_outcome(node, outcome)
        for read in output.reads:
            self.invariants.on_read_outcome(node, read)
        for change in output.voter_changes:
            self.membership.on_outcome(node, change)
        for out in output.messages:
            if out.after_flush >= 0 and out.after_flush > node.log.flushed_offset:
                node.pending.append(out)
            else:
                self.send(node, out)
        if node.log.end_offset > node.log.flushed_offset and not node.flush_scheduled:
            node.flush_scheduled = True
            delay = self.rng.randint(*node.flush_delay)
            self.schedule(self.now + delay, "flush", (node.node_id, node.incarnation))
        deadline = output.next_deadline
        if deadline < node.poll_at:
            node.poll_at = deadline
            self.schedule(deadline, "poll", (node.node_id, node.incarnation))

    def step(self, node: SimNode, call: Any) -> SimNode | None:
        """Process what ``call()`` (one call into the node's core) produced. An OSError out of
        it (its full disk) stops the node, as the real node exits: the step was left half
        done."""
        core = node.core
        leader = core.state if core is not None and node.disk_full else None
        try:
            output = call()
        except OSError as exc:
            self.log_event(f"node {node.node_id} stops: {exc}")
            self.disk_stats["node stops"] += 1
            self.hand_overs.forget()  # (a hand-over with a voter down is not the rule's)
            node.crash()
            self.restart_after_failure(node, exc)
            return None
        if core is not None:
            if isinstance(leader, LeaderState) and not isinstance(core.state, LeaderState):
                self._left_leadership(leader.epoch)
            self.hand_overs.observe(core.state, self.now)
        self.process(node, output)
        return node

    def _left_leadership(self, epoch: int) -> None:
        """A full disk's leader resigned: timed until the next leader, if every voter is up
        (an election with a voter down may rightly wait out a timeout)."""
        if all(n.alive for n in self.nodes.values() if n.is_voter):
            self.hand_overs.left(epoch, self.now)

    def restart_after_failure(self, node: SimNode, exc: OSError) -> None:
        """The node's supervisor starts it again after a downtime (systemd's RestartSec)."""
        back = self.now + self.disk_rng.randint(*self.scenario.downtime_ms)
        self.schedule(back, "fault", ("restart", node.node_id))

    # ---- events -------------------------------------------------------------------------------

    def _deliver(self, payload: tuple) -> SimNode | None:
        src, dst, cid, message = payload
        node = self.nodes[dst]
        if not node.alive or (src, dst) in self.blocked:
            return None
        if not type(message).__name__.endswith("Request"):
            if cid >> 32 != node.incarnation:
                self.log_event(f"{src}->{dst} {type(message).__name__} for a previous incarnation")
                return None
            cid &= 0xFFFFFFFF
        self.log_event(f"{src}->{dst} {short_message(message)}")
        core = node.core
        return self.step(node, lambda: core.handle(src, cid, message, self.now))

    def _poll(self, payload: tuple) -> SimNode | None:
        node_id, incarnation = payload
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation or self.now < node.poll_at:
            return None
        node.poll_at = INF
        return self.step(node, lambda: node.core.poll(self.now))  # type: ignore[union-attr]

    def _flush(self, payload: tuple) -> SimNode | None:
        node_id, incarnation = payload
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            return None
        node.flush_scheduled = False
        flushed = node.log.flush()
        if not node.disk_full:  # (a full disk refuses the checkpoint too: the old one stays)
            checkpoint = node.core.committed_offset  # type: ignore[union-attr]
            node.committed_checkpoint = max(node.committed_checkpoint, checkpoint)
        ready = [o for o in node.pending if o.after_flush <= flushed]
        node.pending = [o for o in node.pending if o.after_flush > flushed]
        for out in ready:
            self.send(node, out)
        return self.step(node, lambda: node.core.poll(self.now))  # type: ignore[union-attr]

    def _append(self, _payload: Any) -> SimNode | None:
        if self.faults_active or self.now < self.heal_started + 2_000:
            self.schedule(self.now + self.scenario.append_every_ms, "append", None)
        for node in self.nodes.values():
            if node.alive and isinstance(node.core.state, LeaderState):
                self.appends += 1
                values = [
                    (b"k", b"%d-%d" % (self.appends, i))
                    for i in range(self.scenario.records_per_append)
                ]
                core = node.core
                try:
                    appended = core.append(values, self.now)
                except LogWriteError as exc:  # it resigned: its EndQuorumEpochs go out
                    node.write_refused_epoch = exc.leader.epoch
                    self.disk_stats["leader appends refused"] += 1
                    self._left_leadership(exc.leader.epoch)
                    self.log_event(f"append refused at {node.node_id}: {exc}")
                    return self.step(node, partial(core.poll, self.now))
                except NotLeaderError:
                    return None
                except OSError as exc:  # a client's request failed; the node goes on
                    node.write_refused_epoch = core.epoch
                    self.log_event(f"append failed at {node.node_id}: {exc}")
                    return node
                self.invariants.on_append(node, appended, values)
                self.log_event(
                    f"append {appended.first_offset}..{appended.last_offset} at {node.node_id}"
                )
                if (
                    self.scenario.delete_records
                    and self.rng.random() < self.scenario.delete_records
                ):
                    self._delete_records(node)
                if self.rng.random() < self.scenario.reads:
                    read = node.core.read_index(self.now)
                    self.invariants.on_read(node, read)
                    self.log_event(f"read {read} at {node.node_id}")
                return self.step(node, partial(core.poll, self.now))
        return None

    def _fault(self, payload: tuple) -> SimNode | None:
        action, arg = payload
        if not self.faults_active and action in ("partition", "crash"):
            return None  # drawn past the end of the fault phase
        if action == "partition":
            groups = arg
            self.blocked = {
                (a, b) for ga in groups for gb in groups if ga is not gb for a in ga for b in gb
            }
            self.log_event(f"partition {groups}")
        elif action == "heal-partition":
            self.blocked = set()
            self.log_event("partition healed")
        elif action == "crash":
            node = self.nodes[arg]
            if node.alive:
                self.log_event(f"crash {arg}")
                node.crash()
        elif action == "restart":
            node = self.nodes[arg]
            if not node.alive:
                self.log_event(f"restart {arg}")
                node.start(self.now)
                return node if node.alive else None
        elif action == "disk-full":
            if not self.faults_active:
                return None
            leaders = [
                n for n in self.nodes.values() if n.alive and isinstance(n.core.state, LeaderState)
            ]
            rng = self.disk_rng
            node = rng.choice(
                leaders if leaders and rng.random() < 0.6 else list(self.nodes.values())
            )
            node.disk_full = True
            self.disk_stats["disks filled"] += 1
            self.log_event(f"disk of {node.node_id} full")
            back = self.now + rng.randint(*self.scenario.full_disk_ms)
            self.schedule(back, "fault", ("disk-freed", node.node_id))
        elif action == "disk-freed":
            node = self.nodes[arg]
            if node.disk_full:
                node.disk_full = False
                self.log_event(f"disk of {arg} freed")
        return None

    _HANDLERS: ClassVar[dict[str, Any]] = {
        "deliver": _deliver,
        "poll": _poll,
        "flush": _flush,
        "append": _append,
        "fault": _fault,
        "snapshot": SnapshotDriver._snapshot_step,
        "reconfig": lambda self, payload: self.membership.step(payload),
        "bit-rot": lambda self, payload: self.bit_rot.step(payload),
    }

    # ---- the run ------------------------------------------------------------------------------

    def _plan_faults(self) -> None:
        sc = self.scenario
        ids = sorted(self.nodes)
        t = 500
        while sc.partitions and t < sc.fault_ms:
            t += self.rng.randint(1000, 4000)
            shuffled = ids[:]
            self.rng.shuffle(shuffled)
            cut = self.rng.randint(1, len(shuffled) - 1)
            groups = (frozenset(shuffled[:cut]), frozenset(shuffled[cut:]))
            self.schedule(t, "fault", ("partition", groups))
            t += self.rng.randint(500, 4000)
            self.schedule(min(t, sc.fault_ms), "fault", ("heal-partition", None))
        t = 1000
        while sc.crashes and t < sc.fault_ms:
            t += self.rng.randint(*sc.crash_every_ms)
            # now and then every node at once (a power loss); all come back
            victims = ids if self.rng.random() < 0.05 else [self.rng.choice(ids)]
            for victim in victims:
                self.schedule(t, "fault", ("crash", victim))
                back = t + self.rng.randint(*sc.downtime_ms)
                self.schedule(min(back, sc.fault_ms), "fault", ("restart", victim))
        t = 500
        while sc.full_disks and t < sc.fault_ms:
            t += self.disk_rng.randint(*sc.full_disk_every_ms)
            self.schedule(min(t, sc.fault_ms), "fault", ("disk-full", None))

    def run(self) -> SimResult:
        sc = self.scenario
        self.heal_started = INF
        for node in self.nodes.values():
            node.start(0)
        self._plan_faults()
        self.membership.plan()
        self.bit_rot.plan()
        self.schedule(200, "append", None)
        heal_at = sc.fault_ms
        self.schedule(heal_at, "heal", None)
        deadline = heal_at + sc.heal_ms
        try:
            while self._queue:
                at, _, kind, payload = heapq.heappop(self._queue)
                if at > deadline:
                    break
                self.now = int(at)
                self.events += 1
                if kind == "heal":
                    self._heal()
                    continue
                node = self._HANDLERS[kind](self, payload)
                if node is not None:
                    self.invariants.after_event(node)
                    self.membership.after_event(node)
                if not self.faults_active and self.invariants.settled() and self.bit_rot.settled():
                    self.invariants.check_acknowledged()
                    return self._result(None)
            self.invariants.check_liveness()
            raise Violation(
                "liveness", f"no settled quorum {sc.heal_ms} ms after the faults stopped"
            )
        except Violation as v:
            return self._result(v)
        except (RaftcoreError, OSError) as exc:  # (an OSError the driver did not expect)
            return self._result(Violation("core-error", f"{type(exc).__name__}: {exc}"))

    def _result(self, violation: Violation | None) -> SimResult:
        for node in self.nodes.values():
            if node.alive:
                self.count_snapshots(node.core)
        return SimResult(
            self.scenario,
            violation,
            self.events,
            self.now,
            self.appends,
            list(self.trace),
            {
                **self.invariants.outcomes,
                **{f"reads {k}": v for k, v in self.invariants.reads.items()},
            },
            dict(self.snapshot_stats) if self.scenario.snapshot_every else {},
            dict(self.membership.stats) if self.scenario.reconfig else {},
            dict(self.bit_rot.stats) if self.scenario.bit_rot_every_ms else {},
            {**self.disk_stats, **self.hand_overs.stats} if self.scenario.full_disks else {},
        )

    def _heal(self) -> None:
        self.faults_active = False
        self.heal_started = self.now
        self.hand_overs.forget()
        self.blocked = set()
        self.log_event("faults stop")
        for node in self.nodes.values():
            node.disk_full = False  # the operator made room
            if not node.alive:
                node.start(self.now)
                self.invariants.after_event(node)


@dataclass
class SimResult:
    scenario: Scenario
    violation: Violation | None
    events: int
    sim_time_ms: int
    appends: int
    trace: list[str]
    outcomes: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)
    membership: dict[str, int] = field(default_factory=dict)
    bit_rot: dict[str, int] = field(default_factory=dict)
    disks: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None
