"""A cluster of node processes on loopback, for the demo, the multi-process tests and the
benchmarks. Every process it starts, it ends by its pid (``close`` kills what is still running;
use it as a context manager).

The first ``size`` nodes are the static voters (``--voters``); :meth:`LocalCluster.join_node`
starts more, each joining through ``--bootstrap`` with a data directory and port of its own
(a node replaced under an old id gets a new directory and port: a new disk, a new machine).
The cluster formats the data directories it creates (:func:`raftcore.node.data_dir.
format_data_dir`: the static voters with the first voter set, a joined node without one),
never one that exists."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any

from raftcore.errors import RaftcoreError

__all__ = [
    "LocalCluster",
    "free_ports",
    "new_cluster_id",
    "tls_client_security",
    "tls_listener_args",
]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (a base64url UUID, 22 characters)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def tls_listener_args(tls_dir: Path, node_id: int, endpoint: str) -> list[str]:
    """``raftcore node`` arguments for an SSL listener at ``endpoint`` with the certificates
    ``raftcore certs`` wrote into ``tls_dir`` (mutual TLS: ``ssl.client.auth=required``)."""
    return [
        f"--listeners=SSL://{endpoint}",
        f"--ssl-certfile={tls_dir / f'node-{node_id}.pem'}",
        f"--ssl-keyfile={tls_dir / f'node-{node_id}.key'}",
        f"--ssl-cafile={tls_dir / 'ca.pem'}",
    ]


def tls_client_security(tls_dir: Path, client: str | None = None) -> Any:
    """The :class:`~raftcore.security.ClientSecurity` of an SSL client trusting the CA in
    ``tls_dir``, presenting ``client-<client>.pem/.key`` when ``client`` is named."""
    from raftcore.security.config import ClientSecurity

    return ClientSecurity(
        protocol="SSL",
        ssl_cafile=tls_dir / "ca.pem",
        ssl_certfile=None if client is None else tls_dir / f"client-{client}.pem",
        ssl_keyfile=None if client is None else tls_dir / f"client-{client}.key",
    )


class LocalCluster:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        size: int = 3,
        *,
        cluster_id: str | None = None,
        host: str = "127.0.0.1",
        ports: list[int] | None = None,
        node_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        tls_dir: str | os.PathLike[str] | None = None,
        partitions: int = 1,
    ) -> None:
        """``partitions``: of the topic, each its own Raft group (``--partitions``, given to
        ``raftcore format`` and to every node). ``tls_dir``: a directory made by ``raftcore
        certs`` (:mod:`raftcore.security.certs`) with ``ca.pem`` and ``node-<id>.pem/.key`` for
        every node: the nodes then listen on SSL with mutual TLS (``ssl.client.auth=required``);
        see :meth:`client_security`."""
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.directory = Path(directory).absolute()
        self.size = size
        self.partitions = partitions
        self.cluster_id = cluster_id or new_cluster_id()
        self.host = host
        self.ports = ports or free_ports(size, host)
        self.node_ids = list(range(1, size + 1))
        self.node_args = node_args or []
        # arguments of one node only, after node_args (an option given again there wins):
        # its own password file, say (docs/security.md)
        self.node_own_args: dict[int, list[str]] = {}
        self.env = env
        # the environment of one node only, instead of env: another release's PYTHONPATH, say
        # (tests/test_upgrade_processes.py runs the previous release's nodes beside this one's)
        self.node_env: dict[int, dict[str, str]] = {}
        self.tls_dir = None if tls_dir is None else Path(tls_dir).absolute()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        # nodes started with --bootstrap: id -> (port, data directory, extra arguments)
        self.joined: dict[int, tuple[int, Path, list[str]]] = {}
        self._logs: dict[int, IO[bytes]] = {}
        self.started_pids: list[int] = []
        # the nodes that format their own directory (another release's, tests/previous_release)
        self.unformatted: set[int] = set()
        self._made: set[Path] = set()  # the data directories this cluster created and formatted

    # ---- addresses ---------------------------------------------------------------------------

    def endpoint(self, node_id: int) -> str:
        if node_id in self.joined:
            return f"{self.host}:{self.joined[node_id][0]}"
        return f"{self.host}:{self.ports[node_id - 1]}"

    @property
    def voters(self) -> str:
        """The static voters: the first ``size`` nodes."""
        return ",".join(f"{i}@{self.host}:{self.ports[i - 1]}" for i in self.node_ids)

    @property
    def bootstrap(self) -> list[str]:
        """Every node's address (the static voters', then the joined nodes')."""
        ids = [i for i in self.node_ids if i not in self.joined] + list(self.joined)
        return [self.endpoint(i) for i in ids]

    def data_dir(self, node_id: int) -> Path:
        if node_id in self.joined:
            return self.joined[node_id][1]
        return self.directory / f"node-{node_id}"

    def log_file(self, node_id: int) -> Path:
        return self.directory / f"node-{node_id}.log"

    def command(self, node_id: int, cluster_id: str | None = None) -> list[str]:
        if node_id in self.joined:
            peers = ["--bootstrap", self.joined_through(node_id), *self.joined[node_id][2]]
        else:
            peers = ["--voters", self.voters]
        return [
            sys.executable,
            "-m",
            "raftcore",
            "node",
            "--id",
            str(node_id),
            *self._listener_args(node_id),
            *peers,
            "--data-dir",
            str(self.data_dir(node_id)),
            # one argument: an id may start with "-" (base64), which argparse would take
            # for an option
            f"--cluster-id={cluster_id or self.cluster_id}",
            "--ready-file",
            str(self._ready_file(node_id)),
            *([] if self.partitions == 1 else [f"--partitions={self.partitions}"]),
            *self.node_args,
            *self.node_own_args.get(node_id, []),
        ]

    def joined_through(self, node_id: int) -> str:
        """The --bootstrap of a joining node: the other nodes running now (all, if none)."""
        others = [i for i in [*self.node_ids, *self.joined] if i != node_id]
        running = [i for i in others if self.alive(i)] or others
        return ",".join(dict.fromkeys(self.endpoint(i) for i in running))

    def join_node(
        self,
        node_id: int,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        args: list[str] | None = None,
        wait: bool = True,
        timeout_s: float = 30.0,
    ) -> subprocess.Popen[bytes]:
        """Start node ``node_id`` with ``--bootstrap`` (the nodes running now) on a new port and
        in ``data_dir`` (default: a new directory): it joins as an observer. An id already in
        use (a voter replaced with a new disk) must be stopped first; it keeps its log file."""
        if self.alive(node_id):
            raise RaftcoreError(f"node {node_id} is already running")
        directory = Path(data_dir) if data_dir is not None else self._new_data_dir(node_id)
        self.joined[node_id] = (free_ports(1, self.host)[0], directory.absolute(), args or [])
        return self.start_node(node_id, wait=wait, timeout_s=timeout_s)

    def _new_data_dir(self, node_id: int) -> Path:
        for n in range(1, 1000):
            candidate = self.directory / f"node-{node_id}-{n}"
            if not candidate.exists():
                return candidate
        raise RaftcoreError(f"no new data directory name for node {node_id}")

    def _listener_args(self, node_id: int) -> list[str]:
        if self.tls_dir is None:
            return ["--listen", self.endpoint(node_id)]
        return tls_listener_args(self.tls_dir, node_id, self.endpoint(node_id))

    def client_security(self, client: str | None = None) -> Any:
        """The :class:`~raftcore.security.ClientSecurity` of a client of this cluster: PLAINTEXT
        without ``tls_dir``; else SSL with its CA, and ``client-<client>.pem/.key`` if named."""
        from raftcore.security.config import ClientSecurity

        if self.tls_dir is None:
            return ClientSecurity()
        return tls_client_security(self.tls_dir, client)

    def _ready_file(self, node_id: int) -> Path:
        return self.directory / f"node-{node_id}.ready"

    # ---- processes ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        for node_id in self.node_ids:
            self.start_node(node_id, wait=False)
        for node_id in self.node_ids:
            self.wait_listening(node_id, timeout_s)

    def start_node(
        self,
        node_id: int,
        *,
        wait: bool = True,
        cluster_id: str | None = None,
        timeout_s: float = 30.0,
    ) -> subprocess.Popen[bytes]:
        if node_id in self.procs and self.procs[node_id].poll() is None:
            raise RaftcoreError(f"node {node_id} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._format_new(node_id, cluster_id or self.cluster_id)
        with contextlib.suppress(FileNotFoundError):
            self._ready_file(node_id).unlink()
        log = open(self.log_file(node_id), "ab")  # noqa: SIM115 (closed in close())
        old = self._logs.pop(node_id, None)
        if old is not None:
            old.close()
        self._logs[node_id] = log
        proc = subprocess.Popen(
            self.command(node_id, cluster_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.node_env.get(node_id, self.env),
            # Not the caller's directory: run from a source checkout, "python -m raftcore"
            # would import the unbuilt sources there instead of the installed package.
            cwd=self.directory,
        )
        self.procs[node_id] = proc
        self.started_pids.append(proc.pid)
        if wait:
            self.wait_listening(node_id, timeout_s)
        return proc

    def _format_new(self, node_id: int, cluster_id: str) -> None:
        """Format ``node_id``'s data directory if this cluster is about to create it. Never a
        directory that exists, nor one made before (a test that wiped it formats it itself,
        as an operator would: ``raftcore format``, or :meth:`format`)."""
        directory = self.data_dir(node_id)
        if node_id in self.unformatted or directory in self._made or directory.exists():
            return
        self.format(node_id, cluster_id)

    def format(self, node_id: int, cluster_id: str | None = None) -> None:
        """Format ``node_id``'s data directory (new or empty), as ``raftcore format`` does:
        the static voters with the first voter set, a joined node with none (an observer
        until added)."""
        from raftcore.node.data_dir import format_data_dir

        directory = self.data_dir(node_id)
        format_data_dir(
            directory,
            cluster_id=cluster_id or self.cluster_id,
            node_id=node_id,
            initial_voters=None if node_id in self.joined else self.node_ids,
            partitions=self.partitions,
        )
        self._made.add(directory)

    def wait_listening(self, node_id: int, timeout_s: float = 30.0) -> None:
        """Until the node has bound its port (or exited: an error with its log's tail)."""
        deadline = time.monotonic() + timeout_s
        ready = self._ready_file(node_id)
        proc = self.procs[node_id]
        while not ready.exists():
            if proc.poll() is not None:
                raise RaftcoreError(
                    f"node {node_id} exited with status {proc.returncode}:\n"
                    + self.log_tail(node_id)
                )
            if time.monotonic() > deadline:
                raise RaftcoreError(f"node {node_id} did not start within {timeout_s} s")
            time.sleep(0.02)

    def log_tail(self, node_id: int, lines: int = 20) -> str:
        try:
            text = self.log_file(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def pid(self, node_id: int) -> int:
        return self.procs[node_id].pid

    def alive(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[node_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(10)

    def stop(self, node_id: int, timeout_s: float = 10.0) -> int:
        """SIGTERM (a leader resigns), then SIGKILL after ``timeout_s``. The exit status."""
        proc = self.procs[node_id]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        return proc.returncode

    def stop_all(self, timeout_s: float = 10.0) -> None:
        for node_id in list(self.procs):
            proc = self.procs[node_id]
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node_id in list(self.procs):
            proc = self.procs[node_id]
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def close(self) -> None:
        """Kill (by pid) every process this cluster started that is still running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
