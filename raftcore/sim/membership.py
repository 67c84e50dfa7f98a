"""Reconfiguration in the simulation (KIP-853): a nemesis that adds, removes and replaces
voters, wipes disks and hands leadership over, and the invariants of a changing voter set.

Actions (at random times while the faults run, at the leader of the moment):

- **add**: a replica that is not a voter (a spare, a removed voter, a wiped node under its new
  directory id) is added (AddRaftVoter: refused unless it has caught up);
- **remove**: a voter is removed, the leader included (it resigns once that commits);
- **wipe**: a node loses its disk -- a new, empty log and quorum-state store and a new
  directory id -- and restarts: it is a new replica, never the voter it was; a later remove and
  add replace it;
- **lose-state**: a node loses its quorum-state file and keeps its log: the core refuses to
  come back as the voter it was, and the node gives it a new directory id;
- **transfer**: leadership is handed to another voter.

The nemesis never takes the cluster below a majority of replicas that still hold their data
(that would be a permanent loss of quorum, which no protocol survives), and loses a disk only
while every log names the same voter set: with a change in flight, the intact replicas may hold
a majority of each set and still elect no one (a disk lost then needs an operator, as in Kafka).

Invariants, checked after every event (independently of the core: the voter set is read from
each replica's log, as the records say):

- **one-change**: no log holds more than one Voters record past the committed offset;
- **hw-majority**: whenever a leader's high watermark moves, a majority of the voter set in force
  in its log (by id *and* directory id) acknowledged the log up to it -- the fetch offsets each
  replica's disk sent, as the simulation saw them leave -- so a wiped replica counted as the
  voter it replaced, or a change counted by the committed set only, breaks it;
- **caught-up**: a voter is added only once its durable log reaches what the leader had
  within the fetch timeout before.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.raft import LogWriteError
from raftcore.raft.control_records import decode_voters
from raftcore.raft.reconfig import snapshot_header_records
from raftcore.raft.states import LeaderState
from raftcore.raft.voter_history import control_records_in
from raftcore.raft.voters import ReplicaKey, VoterEndpoint, VoterSet
from raftcore.records import ControlRecordType
from raftcore.testing import MemoryQuorumStateStore

if TYPE_CHECKING:
    from raftcore.sim.cluster import SimNode, Simulation

__all__ = ["Membership", "directory_id_of", "endpoint_of"]

CHANGE_TIMEOUT_MS = 5_000
_DONE = {"add": "added", "remove": "removed", "transfer": "transferred"}
_WINDOW_MS = 10_000  # how long the leaders' log ends are remembered


def directory_id_of(seed: int, node_id: int, generation: int) -> bytes:
    """The directory id of a node's disk: a new one after every wipe."""
    return hashlib.blake2b(f"{seed}-{node_id}-{generation}".encode(), digest_size=16).digest()


def endpoint_of(node_id: int) -> VoterEndpoint:
    return VoterEndpoint("SIM", f"node-{node_id}", 9000 + node_id)


class _LogVoters:
    """The latest Voters record of one replica's log (and snapshot), read incrementally."""

    def __init__(self) -> None:
        self.generation = -1
        self.scanned = 0  # the log is read up to here
        self.entries: list[tuple[int, VoterSet]] = []  # (offset, set), ascending


class Membership:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.static = VoterSet.static(sim.voter_ids)
        self.stats = {
            "added": 0,
            "removed": 0,
            "wiped": 0,
            "lost quorum-state": 0,
            "transferred": 0,
            "refused": 0,
            "timed out": 0,
            "leader changed": 0,
        }
        self._asked: dict[tuple[int, int, int], str] = {}
        self._logs: dict[int, _LogVoters] = {}
        self._hw: dict[tuple[int, int, int], int] = {}  # (node, incarnation, epoch) -> hw
        # (node, incarnation, epoch) -> (time, log end) samples while it leads
        self._ends: dict[tuple[int, int, int], deque[tuple[int, int]]] = {}
        self.wiped: set[ReplicaKey] = set()  # keys whose disk is gone
        self.committed = 0
        # leader -> (sender, disk generation, directory id) -> the last fetch offset it sent:
        # what each replica acknowledged, as the simulation saw it leave (its durable log)
        self._acks: dict[int, dict[tuple[int, int, bytes], int]] = {}

    # ---- the voter set as the log says -----------------------------------------------------

    def voters_in_log(self, node: SimNode) -> list[tuple[int, VoterSet]]:
        """(offset, voter set) of every Voters record in the replica's snapshot header and log,
        read incrementally (from scratch after a truncation, a wipe or a moved log start)."""
        log = node.log
        cache = self._logs.get(node.node_id)
        end, start = log.end_offset, log.log_start_offset
        if (
            cache is None
            or cache.generation != node.generation
            or (cache.entries and cache.entries[-1][0] >= end)
            or cache.scanned > end
            or cache.scanned < start  # records it had not read went into a snapshot
        ):
            cache = self._logs[node.node_id] = _LogVoters()
            cache.generation = node.generation
            cache.scanned = start
            earliest = log.earliest_snapshot_id()
            if earliest is not None and start > 0:
                for kind, value in snapshot_header_records(log.read_snapshot(earliest)):
                    if kind == ControlRecordType.KRAFT_VOTERS:
                        cache.entries.append((earliest.offset - 1, decode_voters(value)))
        if cache.scanned < end:
            for offset, kind, value in control_records_in(log.read_true(cache.scanned, 1 << 30)):
                if kind == ControlRecordType.KRAFT_VOTERS and offset >= cache.scanned:
                    cache.entries.append((offset, decode_voters(value)))
            cache.scanned = end
        return cache.entries

    def latest(self, node: SimNode) -> VoterSet:
        entries = self.voters_in_log(node)
        return entries[-1][1] if entries else self.static

    def _holder(self, key: ReplicaKey) -> SimNode | None:
        """The replica a voter key names: the node with its id, if its disk is that one (a key
        without a directory id, of the static voter set, names the first disk: a wiped one is
        not what that voter was, though kraft.version 0 cannot tell)."""
        node = self.sim.nodes.get(key.id)
        if node is None or key in self.wiped:  # its disk (or quorum-state) is lost
            return None
        if key.directory_id is None:
            return node if node.generation == 0 else None
        return node if node.directory_id == key.directory_id else None

    def _intact(self, voters: VoterSet) -> int:
        return sum(1 for v in voters.values() if self._holder(v.key) is not None)

    # ---- the nemesis -------------------------------------------------------------------------

    def plan(self) -> None:
        sc = self.sim.scenario
        t = 800
        while sc.reconfig and t < sc.fault_ms:
            t += self.rng.randint(*sc.reconfig_every_ms)
            self.sim.schedule(t, "reconfig", None)

    def step(self, _payload: Any) -> SimNode | None:
        sim = self.sim
        if not sim.faults_active:
            return None
        leader = next(
            (n for n in sim.nodes.values() if n.alive and isinstance(n.core.state, LeaderState)),
            None,
        )
        if leader is None:
            return None
        core = leader.core
        voters = core.voter_set
        actions = ["add", "remove", "transfer"]
        if core.kraft_version >= 1 and sim.scenario.wipes:
            actions += ["wipe", "lose-state"]
        action = self.rng.choice(actions)
        now = sim.now
        if action == "add":
            spares = [n for n in sim.nodes.values() if n.alive and n.node_id not in voters]
            if not spares:
                return None
            node = self.rng.choice(spares)
            key = ReplicaKey(node.node_id, node.directory_id)
            flushed, floor = node.log.flushed_offset, self._leader_end_floor(leader)
            try:
                token = core.add_voter(key, endpoint_of(node.node_id), CHANGE_TIMEOUT_MS, now)
            except LogWriteError as exc:
                return self._refused(leader, exc)
            sim.log_event(f"add voter {key} at {leader.node_id} (token {token})")
            if core.voter_set.is_voter(key) and flushed < floor:
                from raftcore.sim.invariants import Violation

                raise Violation(
                    "caught-up",
                    f"{key} was added with its durable log at {flushed}, though leader "
                    f"{leader.node_id}'s log reached {floor} within the fetch timeout",
                )
        elif action == "remove":
            candidates = []
            for v in voters.values():
                rest = voters.without(v.key)
                if rest and self._intact(rest) >= rest.majority:
                    candidates.append(v.key)
            if not candidates:
                return None
            key = self.rng.choice(candidates)
            try:
                token = core.remove_voter(key, CHANGE_TIMEOUT_MS, now)
            except LogWriteError as exc:
                return self._refused(leader, exc)
            sim.log_event(f"remove voter {key} at {leader.node_id} (token {token})")
            action = "remove"
        elif action == "transfer":
            others = [v for v in voters if v != leader.node_id]
            if not others:
                return None
            target = self.rng.choice(others)
            token = core.transfer_leadership(target, CHANGE_TIMEOUT_MS, now)
            sim.log_event(f"transfer to {target} at {leader.node_id} (token {token})")
        else:
            return self._wipe(leader, voters, keep_log=action == "lose-state")
        self._asked[(leader.node_id, leader.incarnation, token)] = action
        return sim.step(leader, lambda: core.poll(now))

    def _refused(self, leader: SimNode, exc: LogWriteError) -> SimNode | None:
        """The leader's full disk refused the Voters record: it resigned."""
        leader.write_refused_epoch = exc.leader.epoch
        self.sim.disk_stats["leader appends refused"] += 1
        self.sim.log_event(f"voter change refused at {leader.node_id}: {exc}")
        core, now = leader.core, self.sim.now
        return self.sim.step(leader, lambda: core.poll(now))  # type: ignore[union-attr]

    def _wipe_victims(self, voters: VoterSet, only: SimNode | None = None) -> list[SimNode]:
        """The nodes whose disk (or quorum-state) may go: a majority of every voter set in
        force keeps its data without it."""
        sim = self.sim
        sets = [self.latest(n) for n in sim.nodes.values()] + [voters]
        if not all(s.has_directory_ids for s in sets):
            # A replica whose log has only the static voter set (it missed the change to
            # kraft.version 1) cannot tell a wiped voter from the one it was: a disk lost
            # then, with the replicas that lag, can elect a leader without committed records.
            # (kraft.version 0 has this weakness; the nemesis does not go there.)
            return []
        if any(s != voters for s in sets):
            # A Voters record not every log holds (a change in flight, or one a replica has not
            # fetched yet): losing a disk now can leave intact majorities that cannot elect --
            # seed 1,073,222: the leader's uncommitted add of 4 stayed in its log only, a new
            # leader's epoch reached 4 as an observer, and that leader's disk went; 1 needed 4's
            # vote, which its newer log refused, and 4, no voter by its own log, never stood.
            return []
        victims = []
        for node in sim.nodes.values() if only is None else [only]:
            key = ReplicaKey(node.node_id, node.directory_id)
            if all(self._intact(s) - (1 if s.is_voter(key) else 0) >= s.majority for s in sets):
                victims.append(node)
        return victims

    def _wipe(self, leader: SimNode, voters: VoterSet, *, keep_log: bool) -> SimNode | None:
        """Wipe a node's disk -- or only its quorum-state file (``keep_log``): it comes back
        under a new directory id -- if a majority of every set in force keeps its data."""
        victims = self._wipe_victims(voters)
        if victims:
            node = self.rng.choice(victims)
            self._lose(node, keep_log=keep_log, back_after_ms=None)
        return None

    def _lose(self, node: SimNode, *, keep_log: bool, back_after_ms: int | None) -> None:
        sim = self.sim
        self.wiped.add(ReplicaKey(node.node_id, node.directory_id))
        what = "lose the quorum-state of" if keep_log else "wipe"
        sim.log_event(f"{what} {node.node_id} (directory generation {node.generation})")
        self.stats["lost quorum-state" if keep_log else "wiped"] += 1
        if node.alive:
            node.crash()
        if keep_log:
            node.store = MemoryQuorumStateStore()
        else:
            node.wipe()
        if back_after_ms is None:
            back_after_ms = self.rng.randint(*sim.scenario.downtime_ms)
        sim.schedule(sim.now + back_after_ms, "fault", ("restart", node.node_id))

    def on_vote_granted(self, node: SimNode) -> None:
        """Now and then a replica loses its quorum-state right after granting a vote and is
        back at once, while the election it voted in goes on: the narrow window where a
        replica that forgot its vote would vote again (never-vote-twice)."""
        sim = self.sim
        sc = sim.scenario
        if not (sim.faults_active and sc.wipes and node.alive) or node.core.kraft_version < 1:
            return
        if self.rng.random() >= 0.5:
            return
        leader = next(
            (n for n in sim.nodes.values() if n.alive and isinstance(n.core.state, LeaderState)),
            None,
        )
        voters = leader.core.voter_set if leader is not None else node.core.voter_set
        if self._wipe_victims(voters, only=node):
            node.store = MemoryQuorumStateStore()  # it crashes now (crash-after-send)
            self.wiped.add(ReplicaKey(node.node_id, node.directory_id))
            self.stats["lost quorum-state"] += 1
            sim.log_event(f"node {node.node_id} loses its quorum-state as it crashes")

    def on_outcome(self, node: SimNode, outcome: Any) -> None:
        action = self._asked.pop((node.node_id, node.incarnation, outcome.token), None)
        if action is None:
            return  # the core's own (a damaged leader's handover, raftcore.raft.damage)
        if outcome.error == Errors.NONE:
            self.stats[_DONE[action]] += 1
        elif outcome.error == Errors.REQUEST_TIMED_OUT and "in time" in (outcome.message or ""):
            self.stats["timed out"] += 1
        elif outcome.error == Errors.NOT_LEADER_OR_FOLLOWER:
            self.stats["leader changed"] += 1
        else:
            self.stats["refused"] += 1

    # ---- the invariants ------------------------------------------------------------------------

    def on_fetch_sent(self, node: SimNode, destination: int, fetch_offset: int) -> None:
        key = (node.node_id, node.generation, node.directory_id)
        self._acks.setdefault(destination, {})[key] = fetch_offset

    def _leader_end_floor(self, leader: SimNode) -> int:
        """The least the leader's log end was within the last fetch timeout (the last sample
        before the window starts included: it held until the next one)."""
        key = (leader.node_id, leader.incarnation, leader.core.epoch)
        window = self._ends.get(key, deque())
        horizon = self.sim.now - leader.core.config.fetch_timeout_ms
        ends = [end for t, end in window if t >= horizon]
        before = [end for t, end in window if t < horizon]
        if before:
            ends.append(before[-1])
        return min(ends) if ends else 0

    def after_event(self, node: SimNode) -> None:
        from raftcore.sim.invariants import Violation

        if not node.alive:
            return
        state = node.core.state
        entries = self.voters_in_log(node)
        # committed: the highest high watermark any replica ever had (it is committed for good)
        hw_now = node.core.high_watermark
        if hw_now is not None and hw_now > self.committed:
            self.committed = hw_now
        committed = self.committed
        pending = [o for o, _ in entries if o >= committed]
        if len(pending) > 1:
            raise Violation(
                "one-change",
                f"node {node.node_id}'s log holds voter changes at offsets {pending}, past the "
                f"committed offset {committed}",
            )
        if not isinstance(state, LeaderState):
            return
        window = self._ends.setdefault((node.node_id, node.incarnation, state.epoch), deque())
        if window and window[-1][0] == self.sim.now:
            window.pop()
        window.append((self.sim.now, node.log.end_offset))
        while len(window) > 1 and window[1][0] < self.sim.now - _WINDOW_MS:
            window.popleft()
        hw = state.high_watermark
        key = (node.node_id, node.incarnation, state.epoch)
        if hw is None or hw <= self._hw.get(key, -1):
            return
        self._hw[key] = hw
        voters = entries[-1][1] if entries else self.static
        holding = []
        acks = self._acks.get(node.node_id, {})
        for voter in voters.values():
            if voter.id == node.node_id:
                held = node.log.flushed_offset if voter.key.admits(node.core.local_key) else -1
            else:
                held = max(
                    (
                        offset
                        for (sender, generation, directory), offset in acks.items()
                        if sender == voter.id
                        and (
                            directory == voter.key.directory_id
                            if voter.key.directory_id is not None
                            else generation == 0
                        )
                    ),
                    default=-1,
                )
            if held >= hw:
                holding.append(voter.id)
        if len(holding) < voters.majority:
            raise Violation(
                "hw-majority",
                f"leader {node.node_id} moved its high watermark to {hw}, but only voters "
                f"{holding} of {voters!r} hold the log that far",
            )
