"""One fault run, start to verdict: namespaces (or loopback), node processes, writers, the
nemesis, the final heal, convergence, consumers, the checks, the figures. Every namespace,
process and nft table it makes is removed in ``finally`` (and by atexit), also on failure.

``RunConfig.snapshots = N`` runs every node with the LMDB state machine and a snapshot every N
records (KIP-630, ``nodes.snapshot_node_args``); the checks then read each node's state and
snapshots too (``state_check``), and the figures count the snapshots the node logs report.

``RunConfig.membership`` adds the membership nemesis (``membership``): it replaces wiped
nodes, grows and shrinks the voter set and hands leadership over while the faults run, and
the fault nemesis judges its kills and pauses against the voters of the moment
(``voter_guard``). After the faults, the run checks the voter set the cluster reports
(``voter-set``) and that every node still running has the whole log."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from raftcore.security.config import ClientSecurity

from .checker import NodeLog, Verdict, check, read_node_log
from .disk import DISK_NODE_ARGS, FLIP_REPAIR_TIMEOUT_S, DiskNemesis, SmallDisk
from .history import History
from .membership import MembershipNemesis
from .nemesis import FAULT_KINDS, Event, Nemesis
from .network import make_network
from .nodes import NODE_ARGS, NodeSet, snapshot_node_args
from .probe import Prober, QuorumView
from .security import RunSecurity, make_run_security
from .state_check import NodeState, read_node_state
from .voter_guard import VoterGuard
from .writers import CkWriter, RaftcoreWriter, Writer

__all__ = ["EpochMonitor", "RunConfig", "RunResult", "replay_command", "run_once"]

TOPIC = "raftcore"


@dataclass
class RunConfig:
    seed: int = 1
    duration_s: float = 40.0
    nodes: int = 3
    partitions: bool = True
    rate: float = 60.0  # values per second, per writer
    base_dir: str | None = None  # where run directories go (default: the temp dir)
    keep: bool = False  # keep the run directory even when the run passed
    converge_timeout_s: float = 60.0
    pythonpath: str | None = None  # run the nodes from another raftcore tree
    loopback: bool = False  # no namespaces even where they work (no partitions then)
    snapshots: int = 0  # > 0: LMDB state machines, a snapshot every this many records
    security: str = "PLAINTEXT"  # or SSL (mutual TLS) or SASL_SSL (security.MODES)
    event_loop: str = "asyncio"  # the nodes' event loop (raftcore node --event-loop)
    membership: bool = False  # the membership nemesis too (replace, grow, shrink, transfer)
    disk: bool = False  # the disk nemesis too (flipped bytes, a full disk)


@dataclass
class RunResult:
    config: RunConfig
    run_dir: Path
    network: str = ""
    listeners: set[str] = field(default_factory=set)  # the protocols the nodes said they spoke
    event_loops: set[str] = field(default_factory=set)  # the loops the nodes said they ran
    figures: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    nemesis_counts: dict[str, int] = field(default_factory=dict)
    elections: dict[str, int] = field(default_factory=dict)
    epochs: tuple[int, int] = (-1, -1)
    convergence_s: float | None = None
    notes: list[str] = field(default_factory=list)
    membership: list[str] = field(default_factory=list)  # the membership nemesis's summary
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def replay_command(c: RunConfig) -> str:
    cmd = (
        f"{sys.executable} -m tests.faults --seed {c.seed} --duration {c.duration_s:g} "
        f"--nodes {c.nodes}"
    )
    if not c.partitions:
        cmd += " --no-partitions"
    if c.loopback:
        cmd += " --loopback"
    if c.snapshots:
        cmd += f" --snapshots {c.snapshots}"
    if c.security != "PLAINTEXT":
        cmd += f" --security {c.security}"
    if c.event_loop != "asyncio":
        cmd += f" --event-loop {c.event_loop}"
    if c.membership:
        cmd += " --membership"
    if c.disk:
        cmd += " --disk"
    if c.pythonpath:
        cmd += f" --nodes-from {c.pythonpath}"
    return cmd


# ---- epochs over time ------------------------------------------------------------------------


class EpochMonitor(threading.Thread):
    """Probes every node about every 250 ms; keeps (t, highest epoch seen, leader)."""

    def __init__(
        self,
        endpoints: Callable[[], dict[int, str]],
        t0: float,
        interval_s: float = 0.25,
        security: ClientSecurity | None = None,
    ) -> None:
        super().__init__(name="epoch-monitor", daemon=True)
        self.endpoints = endpoints
        self.security = security
        self.t0 = t0
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, int]] = []
        self.last: QuorumView = QuorumView()
        self._halt = threading.Event()

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        prober = Prober(self.endpoints(), security=self.security)
        try:
            top = -1
            while not self._halt.is_set():
                prober.endpoints = self.endpoints()  # the nodes of the moment
                try:
                    view = await asyncio.wait_for(prober.probe(timeout_s=1.0), 4)
                except asyncio.TimeoutError:
                    view = QuorumView()
                self.last = view
                top = max(top, view.max_epoch)
                if top >= 0:
                    self.samples.append((time.monotonic() - self.t0, top, view.leader_id))
                await asyncio.sleep(self.interval_s)
        finally:
            await prober.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def elections_by_kind(samples: list[tuple[float, int, int]], events: list[Event]) -> Counter:
    """Epoch increases, each charged to the nemesis event in force when it was first seen
    (``startup`` before the first; a fault or change held back is no event in force)."""
    out: Counter = Counter()
    prev = None
    for t, epoch, _ in samples:
        if prev is not None and epoch > prev:
            kind = "startup"
            for ev in events:
                if ev.t <= t and ev.kind != "held-back":
                    kind = ev.kind
            out[kind] += epoch - prev
        prev = epoch
    return out


# ---- consumers ---------------------------------------------------------------------------------


def consume_confluent(
    bootstrap: list[str],
    hw: int,
    logger: logging.Logger,
    timeout_s: float = 30.0,
    security: RunSecurity | None = None,
) -> list[tuple[int, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "rcf-check",  # required by the client; assign() joins no group
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "fetch.wait.max.ms": 100,
            "enable.partition.eof": True,
            # the log start may pass the consumer (snapshots): go on from the new start
            "auto.offset.reset": "earliest",
            "logger": logger,
            **(security or RunSecurity()).confluent(),
        }
    )
    out: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= hw:
                    return out
                continue
            if msg.offset() >= hw:
                return out
            out.append((msg.offset(), msg.value()))
        raise TimeoutError(f"confluent-kafka consumer: {len(out)} records in {timeout_s} s")
    finally:
        consumer.close()


async def consume_raftcore(
    bootstrap: list[str], hw: int, security: ClientSecurity | None = None
) -> list[tuple[int, bytes | None]]:
    from raftcore.client import Consumer
    from raftcore.client.consumer import ConsumeError
    from raftcore.error_codes import Errors

    out: list[tuple[int, bytes | None]] = []
    async with Consumer(
        bootstrap, start="earliest", max_wait_ms=200, security=security
    ) as consumer:
        while consumer.position is None or consumer.position < hw:
            try:
                records = await consumer.poll()
            except ConsumeError as exc:
                if exc.error_code != Errors.OFFSET_OUT_OF_RANGE:
                    raise
                consumer.position = None  # the log start passed it (KIP-630): the new earliest
                continue
            out.extend((r.offset, r.value) for r in records if r.offset < hw)
    return out


# ---- the run -----------------------------------------------------------------------------------


def _client_logger(run_dir: Path) -> logging.Logger:
    logger = logging.getLogger(f"rcf.clients.{run_dir.name}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(run_dir / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


def _wait_leader(nodes: NodeSet, timeout_s: float) -> QuorumView:
    deadline = time.monotonic() + timeout_s
    while True:
        view = nodes.probe(1.0)
        if view.leader_id > 0:
            return view
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader within {timeout_s} s: {view.summary()}")
        time.sleep(0.2)


def run_once(config: RunConfig, log=print) -> RunResult:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    node_ids = list(range(1, config.nodes + 1))
    run_dir = Path(
        tempfile.mkdtemp(
            prefix=f"rcf-seed{config.seed}-n{config.nodes}-",
            dir=config.base_dir,
        )
    )
    result = RunResult(config, run_dir)

    def say(text: str) -> None:
        log(f"[{time.monotonic() - t0:7.2f} s] {text}")

    network = nodes = monitor = small_disk = disks = None
    writers: list[Writer] = []
    client_log = _client_logger(run_dir)
    try:
        network = make_network(node_ids, partitions=config.partitions, loopback=config.loopback)
        result.network = network.describe()
        say(f"seed {config.seed}, {config.nodes} nodes, {network.describe()}; run dir {run_dir}")
        if config.partitions and not network.partitions:
            say(f"partition nemesis skipped: {network.reason}")
        node_args = NODE_ARGS + (snapshot_node_args(config.snapshots) if config.snapshots else [])
        node_args += ["--event-loop", config.event_loop]
        if config.disk:
            if not config.snapshots:  # snapshot mode has small segments already
                node_args += DISK_NODE_ARGS[:2]
            node_args += DISK_NODE_ARGS[2:]
            try:
                small_disk = SmallDisk(run_dir, random.Random(config.seed).choice(node_ids))
                say(f"disk nemesis: node {small_disk.node_id} on a tmpfs at {small_disk.mount}")
            except (OSError, RuntimeError) as exc:  # not root, no tmpfs: flips only
                result.notes.append(f"disk fills skipped: {exc}")
                say(f"disk fills skipped: {exc}")
        hosts = [network.endpoint(i).rpartition(":")[0] for i in node_ids]
        security = make_run_security(config.security, run_dir, node_ids, hosts)
        if security.mode != "PLAINTEXT":
            say(f"security {security.mode}: certificates in {security.tls_dir}")
        nodes = NodeSet(
            run_dir,
            network,
            node_ids,
            node_args=node_args,
            pythonpath=config.pythonpath,
            start_monotonic=t0,
            security=security,
        )
        nodes.start_all()
        view = _wait_leader(nodes, 30)
        say(f"leader elected: {view.summary()}")
        members = None
        if config.membership:
            guard = VoterGuard()
            members = MembershipNemesis(
                config.seed, nodes, guard, security=security.client(), log=log
            )
            members.prepare()
        monitor = EpochMonitor(nodes.network_endpoints, t0, security=security.client())
        monitor.start()

        history = History(t0)
        count = int(config.rate * (config.duration_s + 10))
        each = {"rate": config.rate, "max_count": count, "security": security}
        writers = [
            CkWriter(
                "ck1", nodes.bootstrap_live, history, window=20, client_log=client_log, **each
            ),
            CkWriter(
                "ck2", nodes.bootstrap_live, history, window=20, client_log=client_log, **each
            ),
            RaftcoreWriter("rc1", nodes.bootstrap_live, history, window=5, **each),
        ]
        for w in writers:
            w.start()

        held_by = members.guard if members is not None else None
        nemesis = Nemesis(config.seed, nodes, partitions=config.partitions, log=log, guard=held_by)
        if members is not None:
            members.start()
        if config.disk:
            disks = DiskNemesis(config.seed, nodes, small_disk, log=log)
            disks.start()
        nemesis.run(config.duration_s)
        if disks is not None:
            disks.stop()  # the filler deleted before the final heal

        # ---- heal, drain, converge -----------------------------------------------------------
        t_heal = time.monotonic()
        if members is not None:
            members.stop_new()
        nemesis.heal_everything()
        for w in writers:
            w.stop()
        for w in writers:
            w.join(w.drain_s + 15)
            if w.is_alive():
                result.notes.append(f"writer {w.writer} did not finish draining in time")
        unresolved = history.resolve_pending("writer stopped before a verdict")
        if unresolved:
            result.notes.append(f"{unresolved} attempts had no verdict when the writers ended")
        say(
            "writers done: "
            + ", ".join(f"{w.writer} {w.seq} values in {w.sessions} sessions" for w in writers)
        )
        if members is not None:
            members.finish(config.converge_timeout_s + 30)
            result.violations.update(members.errors)
            t_heal = time.monotonic()  # convergence counts from the last change
        node_ids = list(nodes.node_ids)  # the nodes of the run now

        converged_view = None
        prev_hw = None
        deadline = t_heal + config.converge_timeout_s
        while time.monotonic() < deadline:
            view = nodes.probe(1.0)
            if view.converged(node_ids):
                if prev_hw == view.high_watermark:
                    converged_view = view
                    break
                prev_hw = view.high_watermark
            else:
                prev_hw = None
            time.sleep(0.25)
        if converged_view is None:
            view = nodes.probe(1.0)
            result.violations["no-convergence"] = [
                f"not converged {config.converge_timeout_s:g} s after the heal: {view.summary()}"
            ]
            say(result.violations["no-convergence"][0])
        else:
            result.convergence_s = time.monotonic() - t_heal
            say(f"converged in {result.convergence_s:.1f} s: {converged_view.summary()}")
            if members is not None:
                seen = set(converged_view.voters.items())
                wrong = members.guard.violations(seen, node_ids)
                if converged_view.pending_change:
                    wrong.append(f"a change is still pending: {converged_view.pending_change}")
                if wrong:
                    result.violations.setdefault("voter-set", []).extend(wrong)

        if disks is not None:
            disks.settle()
            left = disks.damage_left()
            if left:
                result.violations["damage-left"] = left

        monitor.stop()
        events = sorted(
            nemesis.events + (members.events if members else []) + (disks.events if disks else []),
            key=lambda e: e.t,
        )
        result.events = events
        result.nemesis_counts = dict(Counter(ev.kind for ev in nemesis.events))
        result.elections = dict(elections_by_kind(monitor.samples, events))
        follower_faults = {
            k: n for k, n in result.elections.items() if k in ("kill-follower", "pause-follower")
        }
        if follower_faults:  # with pre-vote a follower's fault costs no election: worth a look
            result.notes.append(f"epoch increases during follower-only faults: {follower_faults}")
        if monitor.samples:
            result.epochs = (monitor.samples[0][1], monitor.samples[-1][1])
        for err in nemesis.errors + (disks.errors if disks else []):
            result.violations.setdefault("restart-failed", []).append(err)
        for w in writers:
            if w.crash is not None:
                result.violations.setdefault("writer-crashed", []).append(
                    f"{w.writer}: {w.crash!r}"
                )

        # ---- consumers (the cluster still up), then the disks (the cluster stopped) -----------
        consumers: dict[str, list | None] = {
            "confluent-kafka consumer": None,
            "raftcore Consumer": None,
        }
        if converged_view is not None:
            hw = converged_view.high_watermark
            try:
                consumers["confluent-kafka consumer"] = consume_confluent(
                    nodes.bootstrap, hw, client_log, security=security
                )
            except Exception as exc:
                result.violations.setdefault("consumer-failed", []).append(
                    f"confluent-kafka: {exc!r}"
                )
            try:
                consumers["raftcore Consumer"] = asyncio.run(
                    asyncio.wait_for(consume_raftcore(nodes.bootstrap, hw, security.client()), 30)
                )
            except Exception as exc:
                result.violations.setdefault("consumer-failed", []).append(f"raftcore: {exc!r}")
        statuses = nodes.stop_all()
        bad_exit = {i: s for i, s in statuses.items() if s not in (0, None)}
        if bad_exit:
            result.notes.append(f"node exit statuses at the final stop: {bad_exit}")
        if converged_view is not None:
            logs: dict[int, NodeLog] = {i: read_node_log(i, nodes.data_dir(i)) for i in node_ids}
            states: dict[int, NodeState] | None = None
            if config.snapshots:
                states = {i: read_node_state(i, nodes.data_dir(i)) for i in node_ids}
            verdict: Verdict = check(
                history,
                converged_view.high_watermark,
                logs,
                converged_view.leader_id,
                consumers,
                states,
            )
            result.figures = verdict.figures
            result.violations.update(verdict.violations)
        result.notes.extend(history.notes)
        if config.snapshots:
            for i in nodes.ever():
                for name, n in nodes.snapshot_counts(i).items():
                    result.figures[name] = result.figures.get(name, 0) + n
        if disks is not None:
            result.figures.update(disks.figures())
        if members is not None:
            result.membership = members.summary()
            result.figures.update(members.figures())
        result.listeners = nodes.listener_protocols()
        result.event_loops = nodes.event_loops()
        for i in nodes.ever():
            problems = nodes.log_problems(i)
            if any(problems.values()):
                result.notes.append(f"node {i} log: {problems}")
        history.save(run_dir / "history.jsonl")
        with open(run_dir / "events.jsonl", "w") as f:
            for ev in events:
                f.write(json.dumps(asdict(ev)) + "\n")
        with open(run_dir / "epochs.jsonl", "w") as f:
            for t, epoch, leader in monitor.samples:
                f.write(json.dumps({"t": round(t, 3), "epoch": epoch, "leader": leader}) + "\n")
    except Exception as exc:
        import traceback

        result.violations.setdefault("harness-error", []).append(
            f"{exc!r}\n{traceback.format_exc()}"
        )
    finally:
        for w in writers:
            w.stop()
        if monitor is not None and monitor.is_alive():
            monitor.stop()
        if nodes is not None:
            nodes.close()
            left = nodes.unreaped()
            if left:
                result.violations.setdefault("harness-error", []).append(
                    f"node pids still running after close: {left}"
                )
        if network is not None:
            network.close()
        if disks is not None and disks.is_alive():
            disks.stop()
        if small_disk is not None:
            small_disk.close()
        for h in list(client_log.handlers):
            client_log.removeHandler(h)
            h.close()
        result.elapsed_s = time.monotonic() - t0
    if not result.ok and nodes is not None:
        for i in nodes.ever():
            log(f"--- node {i} log tail ({nodes.log_file(i)}):\n{nodes.log_tail(i)}")
    if result.ok and not config.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


# ---- the report --------------------------------------------------------------------------------


def format_result(r: RunResult) -> str:
    f = r.figures
    lines = [
        f"seed {r.config.seed}, {r.config.nodes} nodes, {r.config.duration_s:g} s: "
        + ("PASS" if r.ok else "FAIL")
        + f" ({r.elapsed_s:.1f} s)",
        f"  network:        {r.network}",
        f"  nodes:          listeners {', '.join(sorted(r.listeners)) or '?'}; event loop "
        f"{', '.join(sorted(r.event_loops)) or '?'}",
    ]
    if f:
        lines += [
            f"  writes:         {f.get('attempted', 0)} attempted, "
            f"{f.get('acknowledged', 0)} acknowledged, {f.get('indeterminate', 0)} indeterminate "
            f"({f.get('indeterminate_committed', 0)} of them committed), "
            f"{f.get('failed', 0)} failed",
            f"  anomalies:      lost {f.get('lost', 0)}, misplaced {f.get('misplaced', 0)}, "
            f"duplicated {f.get('duplicated', 0)}, out-of-order {f.get('out_of_order', 0)}, "
            f"phantom {f.get('phantom', 0)}, failed-but-written {f.get('failed_but_written', 0)}",
            f"  replicas:       {f.get('divergent_nodes', 0)} divergent below the high watermark "
            f"{f.get('high_watermark', -1)}; {f.get('committed_records', 0)} committed records; "
            f"consumer mismatches {f.get('consumer_mismatch', 0)}",
        ]
    if r.config.snapshots and f:
        lines += [
            f"  snapshots:      every {r.config.snapshots} records: {f.get('snapshots_taken', 0)} "
            f"taken, {f.get('snapshots_installed', 0)} installed from a leader, "
            f"{f.get('log_start_moves', 0)} log start moves (node logs); log start offsets "
            f"{f.get('log_start_min', 0)}-{f.get('log_start_max', 0)} at the end; "
            f"{f.get('acknowledged_below_log_start', 0)} acknowledged values in no log "
            "(checked in the state machines only)",
            f"  state:          {f.get('state_pairs', 0)} pairs "
            f"({f.get('state_indeterminate', 0)} indeterminate writes), applied offset "
            f"{f.get('state_applied_offset', -1)}; lost {f.get('state_lost', 0)}, missing "
            f"committed {f.get('state_missing_committed', 0)}, phantom "
            f"{f.get('state_phantom', 0)}, divergent nodes {f.get('state_divergent_nodes', 0)}; "
            f"{f.get('snapshot_files', 0)} snapshot files ({f.get('corrupt_snapshots', 0)} "
            f"corrupt, {f.get('snapshot_state_wrong', 0)} with a wrong state, "
            f"{f.get('snapshot_files_partial', 0)} partial)",
        ]
    every = (*FAULT_KINDS, "heal", "restart", "final-heal", "held-back")
    kinds = [k for k in every if k in r.nemesis_counts]
    lines.append(
        "  nemesis:        "
        + (", ".join(f"{k} {r.nemesis_counts[k]}" for k in kinds) or "no events")
    )
    total = sum(r.elections.values())
    lines.append(
        f"  elections:      {total} epoch increases (epoch {r.epochs[0]} -> {r.epochs[1]})"
        + (": " + ", ".join(f"{k} {n}" for k, n in sorted(r.elections.items())) if total else "")
    )
    if r.config.disk:
        lines.append(
            f"  disk:           {f.get('disk_flips', 0)} bytes flipped in sealed segments, "
            f"{f.get('disk_flips_repaired', 0)} seen repaired "
            f"({f.get('disk_flips_unrepaired', 0)} not within "
            f"{FLIP_REPAIR_TIMEOUT_S:g} s); node logs: {f.get('disk_damage_found', 0)} damaged "
            f"batches found, {f.get('disk_repairs', 0)} repaired; {f.get('disk_fills', 0)} "
            f"fills, {f.get('disk_fill_exits', 0)} node exits, {f.get('disk_resigned', 0)} "
            "leaders resigned (the log cannot be written); quorum-state deletions: none (skipped)"
        )
    conv = f"{r.convergence_s:.1f} s" if r.convergence_s is not None else "none"
    lines.append(f"  convergence:    {conv} after the final heal")
    lines.extend(r.membership)
    for note in r.notes:
        lines.append(f"  note: {note}")
    for kind, details in r.violations.items():
        lines.append(f"  VIOLATION {kind}:")
        lines.extend(f"    {d}" for d in details)
    if not r.ok:
        lines.append(f"  run directory:  {r.run_dir}")
        lines.append(f"  replay:         {replay_command(r.config)}")
    return "\n".join(lines)
