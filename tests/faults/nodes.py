"""The node processes of a fault run: ``python -m raftcore node`` in each node's namespace (or on
loopback), restarted on the same data directory, killed, paused and resumed by pid.

Every process is started under ``setpriv --pdeathsig KILL`` (when util-linux has it), so a
harness that dies without cleaning up takes its nodes with it; ``close()`` kills (by pid)
whatever still runs. The parent-death signal fires when the *thread* that started the process
ends, so every start goes through one thread of the set's own (``_spawner``) that lives until
``close()``, whichever thread asks (the membership nemesis starts nodes from its thread).
Each node's stdout and stderr go to ``<run dir>/node-N.log``, appended across restarts with a
marker line per start.

The set of nodes can change during a run (the membership nemesis, ``membership``): a node
joins with ``--bootstrap`` (``add_node``: a new id, in a place of its own on the network), a
node's disk is wiped and it starts again under its id as a new replica (``wipe``: its data
directory is moved aside, so it starts empty), and a node removed from the voters is stopped
for good (``retire``). ``node_ids`` are the nodes of the run now (running or down); ``lock``
is held by whoever decides and acts on them (the two nemeses).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from raftcore.node.data_dir import read_directory_id
from raftcore.node.local_cluster import new_cluster_id

from .network import Network
from .probe import QuorumView, probe_once
from .security import RunSecurity

__all__ = ["NodeExited", "NodeSet", "SNAPSHOT_EVENTS", "snapshot_node_args"]

# Short timeouts keep failovers quick (the values tests/cluster_helpers.FAST uses).
NODE_ARGS = ["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000"]

# With snapshots on (KIP-630): a leader moves its log start past a replica that stays behind
# longer than this, which must then install a snapshot.
SNAPSHOT_LAG_MS = 3000
# Small segments, so that moving the log start deletes some (a segment goes only once it lies
# wholly below the log start); 64 KiB is some 700 of the harness's one-record batches.
SNAPSHOT_SEGMENT_BYTES = 64 << 10

# What a node logs when it takes, installs a snapshot, moves its log start (raftcore.raft's
# snapshots and fetch_snapshot modules), counted by ``NodeSet.snapshot_counts``.
SNAPSHOT_EVENTS = {
    "snapshots_taken": " took snapshot ",
    "snapshots_installed": " installed snapshot ",
    "log_start_moves": " log start offset -> ",
}


def snapshot_node_args(min_records: int) -> list[str]:
    """Node arguments for snapshot mode: the LMDB state machine, a snapshot every
    ``min_records`` applied records, the lag after which the log start moves anyway."""
    return [
        "--state-machine",
        "lmdb",
        "--snapshot-min-records",
        str(min_records),
        "--max-replication-lag-ms",
        str(SNAPSHOT_LAG_MS),
        "--segment-bytes",
        str(SNAPSHOT_SEGMENT_BYTES),
    ]


# setpriv sets the parent-death signal and execs the node (same pid); no preexec_fn, which is
# unsafe with the writer threads running.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


class NodeExited(Exception):
    """A node process exited when it should have been running (its log's tail attached)."""


class NodeSet:
    def __init__(
        self,
        run_dir: Path,
        network: Network,
        node_ids: list[int],
        *,
        node_args: list[str] | None = None,
        pythonpath: str | None = None,
        start_monotonic: float | None = None,
        security: RunSecurity | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.network = network
        self.node_ids = list(node_ids)
        # the static voters of every node started with --voters (the first ones)
        self.static_voters = ",".join(f"{i}@{self.endpoint(i)}" for i in node_ids)
        self.joined: set[int] = set()  # started with --bootstrap (added, or a wiped disk)
        self.retired: list[int] = []  # removed from the voters and stopped for good
        self.wipes: dict[int, int] = {}  # node -> how often its disk was wiped
        self.lock = threading.RLock()
        # every member's address, kept current in place (the writers' bootstrap list)
        self.bootstrap_live: list[str] = [self.endpoint(i) for i in node_ids]
        self.cluster_id = new_cluster_id()
        self.node_args = NODE_ARGS if node_args is None else node_args
        self.security = security or RunSecurity()
        self.env = dict(os.environ)
        if pythonpath:
            self.env["PYTHONPATH"] = pythonpath
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()
        self.started_pids: list[int] = []
        self.starts: dict[int, int] = dict.fromkeys(node_ids, 0)
        # the one thread that starts node processes (their parent, for --pdeathsig)
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="node-spawner")
        self._logs: dict[int, IO[bytes]] = {}
        self.t0 = start_monotonic if start_monotonic is not None else time.monotonic()

    # ---- addresses ------------------------------------------------------------------------------

    def endpoint(self, node_id: int) -> str:
        return self.network.endpoint(node_id)

    def network_endpoints(self) -> dict[int, str]:
        return {i: self.endpoint(i) for i in self.node_ids}

    @property
    def bootstrap(self) -> list[str]:
        return [self.endpoint(i) for i in self.node_ids]

    @property
    def voters(self) -> str:
        """The static voters of the nodes started with ``--voters``."""
        return self.static_voters

    def join_through(self, node_id: int) -> str:
        """A joining node's ``--bootstrap``: the other members running now (all, if none)."""
        others = [i for i in self.node_ids if i != node_id]
        running = [i for i in others if self.alive(i)] or others
        return ",".join(self.endpoint(i) for i in running)

    def probe(self, timeout_s: float = 1.0) -> QuorumView:
        """What every node says of the quorum (:func:`probe.probe_once`), asked the way this
        run's clients ask."""
        return probe_once(self.network_endpoints(), timeout_s, self.security.client())

    def data_dir(self, node_id: int) -> Path:
        return self.run_dir / f"node-{node_id}"

    def log_file(self, node_id: int) -> Path:
        return self.run_dir / f"node-{node_id}.log"

    def _ready_file(self, node_id: int) -> Path:
        return self.run_dir / f"node-{node_id}.ready"

    def command(self, node_id: int) -> list[str]:
        return [
            *self.network.command_prefix(node_id),
            *_DIE_WITH_PARENT,
            sys.executable,
            "-m",
            "raftcore",
            "node",
            "--id",
            str(node_id),
            *self.security.listener_args(node_id, self.endpoint(node_id)),
            *(
                ["--bootstrap", self.join_through(node_id)]
                if node_id in self.joined
                else ["--voters", self.voters]
            ),
            "--data-dir",
            str(self.data_dir(node_id)),
            f"--cluster-id={self.cluster_id}",
            "--ready-file",
            str(self._ready_file(node_id)),
            *self.node_args,
        ]

    # ---- processes ------------------------------------------------------------------------------

    def alive(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def ever(self) -> list[int]:
        """Every node started in this run, retired ones too."""
        return sorted(self.starts)

    def unavailable(self) -> set[int]:
        """Members down or paused now."""
        return set(self.down()) | (self.paused & set(self.node_ids))

    def running(self) -> list[int]:
        return [i for i in self.node_ids if self.alive(i)]

    def down(self) -> list[int]:
        return [i for i in self.node_ids if not self.alive(i)]

    def start(self, node_id: int, *, wait: bool = True, timeout_s: float = 30.0) -> None:
        if self.alive(node_id):
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._format_if_new(node_id)
        with contextlib.suppress(FileNotFoundError):
            self._ready_file(node_id).unlink()
        old = self._logs.pop(node_id, None)
        if old is not None:
            old.close()
        log = open(self.log_file(node_id), "ab")  # noqa: SIM115 (closed in close())
        self.starts[node_id] += 1
        log.write(
            f"=== harness: start #{self.starts[node_id]} of node {node_id} "
            f"at t={time.monotonic() - self.t0:.2f} s ===\n".encode()
        )
        log.flush()
        self._logs[node_id] = log
        proc = self._spawner.submit(
            subprocess.Popen,
            self.command(node_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.run_dir,  # not the source checkout (see LocalCluster.start_node)
            start_new_session=True,  # a ^C to the harness is not a ^C to the nodes
        ).result()
        self.procs[node_id] = proc
        self.paused.discard(node_id)
        self.started_pids.append(proc.pid)
        if wait:
            self.wait_ready(node_id, timeout_s)

    def _format_if_new(self, node_id: int) -> None:
        """Format a node's data directory that holds nothing of a replica (a first start, a
        new disk, a wiped one), as the operator does with ``raftcore format``: a static voter
        with the first voter set, a node that joins (a wiped one) without one."""
        from raftcore.endpoints import parse_voters
        from raftcore.node.data_dir import LOG_DIR, META_PROPERTIES, format_data_dir

        directory = self.data_dir(node_id)
        if any((directory / name).exists() for name in (META_PROPERTIES, "quorum-state", LOG_DIR)):
            return
        format_data_dir(
            directory,
            cluster_id=self.cluster_id,
            node_id=node_id,
            initial_voters=None if node_id in self.joined else list(parse_voters(self.voters)),
        )

    def start_all(self, timeout_s: float = 30.0) -> None:
        for node_id in self.node_ids:
            self.start(node_id, wait=False)
        for node_id in self.node_ids:
            self.wait_ready(node_id, timeout_s)

    def wait_ready(self, node_id: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        proc = self.procs[node_id]
        while not self._ready_file(node_id).exists():
            if proc.poll() is not None:
                raise NodeExited(
                    f"node {node_id} exited with status {proc.returncode} while starting:\n"
                    + self.log_tail(node_id)
                )
            if time.monotonic() > deadline:
                raise NodeExited(f"node {node_id} did not listen within {timeout_s} s")
            time.sleep(0.02)

    def signal(self, node_id: int, sig: int) -> bool:
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(node_id)
        elif sig == signal.SIGCONT:
            self.paused.discard(node_id)
        return True

    def kill(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return False
        os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        self.paused.discard(node_id)
        return True

    def resume_all(self) -> None:
        for node_id in list(self.paused):
            self.signal(node_id, signal.SIGCONT)

    def stop_all(self, timeout_s: float = 15.0) -> dict[int, int | None]:
        """SIGCONT then SIGTERM every running node (graceful: a leader resigns), SIGKILL after
        ``timeout_s``. The exit statuses."""
        self.resume_all()
        for node_id in self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.procs[node_id].pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        return {i: p.returncode for i, p in self.procs.items()}

    def close(self) -> None:
        """Kill, by pid, every node process still running (paused ones too)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._spawner.shutdown(wait=True)

    def unreaped(self) -> list[int]:
        """Pids this set started that still exist (must be empty after close())."""
        left = []
        for pid in self.started_pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            left.append(pid)
        return left

    # ---- membership ---------------------------------------------------------------------------

    def directory_id(self, node_id: int) -> bytes | None:
        """The directory id in the node's ``meta.properties`` (None: not written yet)."""
        return read_directory_id(self.data_dir(node_id))

    def add_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        """A new node in a place of its own, started with ``--bootstrap`` (an observer until
        it is added)."""
        if node_id in self.starts:
            raise ValueError(f"node {node_id} was already in this run")
        self.network.add_node(node_id)
        self.node_ids.append(node_id)
        self.joined.add(node_id)
        self.starts[node_id] = 0
        self.bootstrap_live.append(self.endpoint(node_id))
        self.start(node_id, wait=True, timeout_s=timeout_s)

    def wipe(self, node_id: int, timeout_s: float = 30.0) -> None:
        """SIGKILL the node, move its data directory aside (``node-N.wiped-K``: the node starts
        on an empty one, a new directory id) and start it again with ``--bootstrap``."""
        self.kill(node_id)
        self.wipes[node_id] = self.wipes.get(node_id, 0) + 1
        aside = self.run_dir / f"node-{node_id}.wiped-{self.wipes[node_id]}"
        if self.data_dir(node_id).exists():
            self.data_dir(node_id).rename(aside)
        self.joined.add(node_id)
        with open(self.log_file(node_id), "ab") as log:
            log.write(
                f"=== harness: disk of node {node_id} wiped (moved to {aside.name}) ===\n".encode()
            )
        self.start(node_id, wait=True, timeout_s=timeout_s)

    def lose_state(self, node_id: int, timeout_s: float = 30.0) -> None:
        """SIGKILL the node, delete its quorum-state file (its log and snapshots stay) and
        start it again with ``--bootstrap``: it must never vote as the voter it was (it
        forgot its vote), so it comes back an observer under a new directory id."""
        self.kill(node_id)
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir(node_id) / "quorum-state").unlink()
        self.joined.add(node_id)
        with open(self.log_file(node_id), "ab") as log:
            log.write(f"=== harness: quorum-state of node {node_id} deleted ===\n".encode())
        self.start(node_id, wait=True, timeout_s=timeout_s)

    def retire(self, node_id: int, timeout_s: float = 10.0) -> int | None:
        """Stop a node removed from the voters for good (SIGCONT, SIGTERM, SIGKILL after
        ``timeout_s``); it is no member any more. Its exit status."""
        self.node_ids.remove(node_id)
        self.retired.append(node_id)
        with contextlib.suppress(ValueError):
            self.bootstrap_live.remove(self.endpoint(node_id))
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        self.signal(node_id, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(node_id)
            return proc.returncode

    # ---- diagnostics ----------------------------------------------------------------------------

    def log_tail(self, node_id: int, lines: int = 25) -> str:
        try:
            text = self.log_file(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def snapshot_counts(self, node_id: int) -> dict[str, int]:
        """How often a node's log says it froze a snapshot, installed one from the leader, or
        moved its log start (over all its starts)."""
        counts = dict.fromkeys(SNAPSHOT_EVENTS, 0)
        try:
            text = self.log_file(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return counts
        for line in text.splitlines():
            for name, marker in SNAPSHOT_EVENTS.items():
                if marker in line:
                    counts[name] += 1
        return counts

    def listener_protocols(self) -> set[str]:
        """The security protocols the nodes' logs say they listened with (``SSL``...), so a
        run can tell that its nodes really spoke what it asked for."""
        return self._said(r" listening on ([A-Z_]+)://")

    def event_loops(self) -> set[str]:
        """The event loops the nodes' listening lines name (``asyncio``, ``uvloop``)."""
        return self._said(r", event loop (\w+)\)")

    def _said(self, pattern: str) -> set[str]:
        found: set[str] = set()
        for node_id in self.ever():
            try:
                text = self.log_file(node_id).read_text(errors="replace")
            except FileNotFoundError:
                continue
            found.update(re.findall(pattern, text))
        return found

    def log_problems(self, node_id: int) -> dict[str, int]:
        """Counts of lines worth a look in a node's log (tracebacks, errors, warnings)."""
        counts = {"traceback": 0, "error": 0, "critical": 0}
        try:
            text = self.log_file(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return counts
        for line in text.splitlines():
            if line.startswith("Traceback"):
                counts["traceback"] += 1
            elif " ERROR " in line:
                counts["error"] += 1
            elif " CRITICAL " in line:
                counts["critical"] += 1
        return counts
