"""Where the nodes live: one Linux network namespace per node, or loopback.

``NamespaceNetwork`` builds, for one run::

    root namespace (writers, consumers, the harness)
        rcf<pid>  10.77.X.254/24  ──┐
                                     │ veth
    hub namespace  rcf-<pid>-hub:  br0 ── h1 ── veth ── eth0 10.77.X.1  (rcf-<pid>-n1)
                                       ── h2 ── veth ── eth0 10.77.X.2  (rcf-<pid>-n2)
                                       ── ...

X is a /24 no interface of the root namespace uses yet (chosen under a file lock, so parallel
runs do not collide). Partitions are nftables drop rules in the *input* hook of node
namespaces: a dropped SYN or segment looks like a real partition to the sender (a timeout),
where a drop in the output hook would fail ``connect()`` at once with EPERM, which a node may
take for a refused connection (a dead peer) instead. Clients in the root namespace always reach
every node: partitions cut node-to-node traffic only.

``LoopbackNetwork`` is the fallback (not root, no ``ip``, or no ``nft`` for partitions): every
node on 127.0.0.1 with its own port, no partitions.

Everything created is removed by ``close()`` (idempotent; also registered with atexit). Nothing
here sends a packet anywhere but to these namespaces' addresses and loopback.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from raftcore.node.local_cluster import free_ports

__all__ = [
    "LoopbackNetwork",
    "NamespaceNetwork",
    "Network",
    "NetworkUnavailable",
    "make_network",
    "remove_stale_namespaces",
]

NFT_TABLE = "rcf_faults"
PORT = 9092
LOCK_FILE = "/tmp/rcf-netns.lock"
_NS_RE = re.compile(r"^rcf-(\d+)-(?:hub|n\d+)$")


class NetworkUnavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def _run(args: list[str], *, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        args, input=stdin, capture_output=True, text=True, timeout=20, check=False
    )
    if check and proc.returncode != 0:
        raise NetworkUnavailable(
            f"`{' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}"
        )
    return proc.stdout


@dataclass
class Network:
    """Addresses of the nodes, how to start a process in a node's place, and partitions."""

    kind: str  # "netns" or "loopback"
    hosts: dict[int, str]
    ports: dict[int, int]
    partitions: bool
    reason: str = ""  # why partitions are off, when they are

    def endpoint(self, node_id: int) -> str:
        return f"{self.hosts[node_id]}:{self.ports[node_id]}"

    def command_prefix(self, node_id: int) -> list[str]:
        return []

    def add_node(self, node_id: int) -> str:
        """A place for a node that joins during the run (an address of its own); its endpoint."""
        raise NotImplementedError

    def set_blocks(self, blocks: dict[int, set[int]]) -> None:
        """Make node ``n`` drop every packet from each node in ``blocks[n]`` (and nothing
        else); nodes absent from ``blocks`` drop nothing."""
        raise NotImplementedError("partitions need network namespaces and nftables")

    def heal(self) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self) -> str:
        where = ", ".join(f"n{i}={self.endpoint(i)}" for i in sorted(self.hosts))
        extra = "" if self.partitions else f"; partitions off: {self.reason}"
        return f"{self.kind} ({where}){extra}"


class LoopbackNetwork(Network):
    def __init__(self, node_ids: list[int], reason: str) -> None:
        ports = free_ports(len(node_ids))
        super().__init__(
            kind="loopback",
            hosts=dict.fromkeys(node_ids, "127.0.0.1"),
            ports=dict(zip(node_ids, ports, strict=True)),
            partitions=False,
            reason=reason,
        )

    def add_node(self, node_id: int) -> str:
        if node_id not in self.hosts:
            self.hosts[node_id] = "127.0.0.1"
            self.ports[node_id] = free_ports(1)[0]
        return self.endpoint(node_id)


class NamespaceNetwork(Network):
    def __init__(self, node_ids: list[int], *, nft: bool, reason: str = "") -> None:
        ip = _tool("ip")
        if ip is None:
            raise NetworkUnavailable("no `ip` command (install iproute2)")
        self.ip = ip
        self.nft = _tool("nft") if nft else None
        self.pid = os.getpid()
        self.prefix = f"rcf-{self.pid}"
        self.hub = f"{self.prefix}-hub"
        self.node_ns = {i: f"{self.prefix}-n{i}" for i in node_ids}
        self.root_if = f"rcf{self.pid}"[:15]
        self._made: list[str] = []  # namespaces, in creation order
        self._tables: set[int] = set()
        self._closed = False
        atexit.register(self.close)
        try:
            subnet = self._build(node_ids)
        except BaseException:
            self.close()
            raise
        hosts = {i: str(subnet.network_address + i) for i in node_ids}
        super().__init__(
            kind="netns",
            hosts=hosts,
            ports=dict.fromkeys(node_ids, PORT),
            partitions=self.nft is not None,
            reason=reason or ("" if self.nft else "no `nft` command (install nftables)"),
        )
        self.subnet = subnet

    # ---- building -------------------------------------------------------------------------------

    def _ns_add(self, name: str) -> None:
        _run([self.ip, "netns", "add", name])
        self._made.append(name)

    def _build(self, node_ids: list[int]) -> ipaddress.IPv4Network:
        ip = self.ip
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnet = self._free_subnet()
            self._ns_add(self.hub)
            _run([ip, "-n", self.hub, "link", "set", "lo", "up"])
            _run([ip, "-n", self.hub, "link", "add", "br0", "type", "bridge"])
            _run([ip, "-n", self.hub, "link", "set", "br0", "up"])
            # the root namespace's leg: created from the hub, its peer moved to our namespace
            root_leg = ["peer", "name", self.root_if, "netns", str(self.pid)]
            _run([ip, "-n", self.hub, "link", "add", "root", "type", "veth", *root_leg])
            _run([ip, "-n", self.hub, "link", "set", "root", "master", "br0", "up"])
            root_addr = subnet.network_address + 254
            _run([ip, "addr", "add", f"{root_addr}/24", "dev", self.root_if])
            _run([ip, "link", "set", self.root_if, "up"])
        for i in node_ids:
            self._node_leg(i, subnet)
        if self.nft is not None:
            # nft must work inside a namespace, or partitions are off (with the reason)
            try:
                self._nft(node_ids[0], f"add table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}")
            except NetworkUnavailable as exc:
                self.nft = None
                self._nft_problem = str(exc)
        return subnet

    def _node_leg(self, i: int, subnet: ipaddress.IPv4Network) -> None:
        """Node ``i``'s namespace, its veth to the hub's bridge and its address (.i)."""
        ip, ns = self.ip, self.node_ns[i]
        self._ns_add(ns)
        _run([ip, "-n", ns, "link", "set", "lo", "up"])
        node_leg = ["peer", "name", "eth0", "netns", ns]
        _run([ip, "-n", self.hub, "link", "add", f"h{i}", "type", "veth", *node_leg])
        _run([ip, "-n", self.hub, "link", "set", f"h{i}", "master", "br0", "up"])
        _run([ip, "-n", ns, "addr", "add", f"{subnet.network_address + i}/24", "dev", "eth0"])
        _run([ip, "-n", ns, "link", "set", "eth0", "up"])

    def add_node(self, node_id: int) -> str:
        if node_id not in self.node_ns:
            if not 0 < node_id < 254:
                raise NetworkUnavailable(f"node id {node_id}: no address for it in {self.subnet}")
            self.node_ns[node_id] = f"{self.prefix}-n{node_id}"
            self._node_leg(node_id, self.subnet)
            self.hosts[node_id] = str(self.subnet.network_address + node_id)
            self.ports[node_id] = PORT
        return self.endpoint(node_id)

    def _free_subnet(self) -> ipaddress.IPv4Network:
        used = set(re.findall(r"inet (10\.77\.\d+)\.", _run([self.ip, "-o", "-4", "addr", "show"])))
        for k in range(254):
            octet = (self.pid + k) % 254 + 1
            if f"10.77.{octet}" not in used:
                return ipaddress.IPv4Network(f"10.77.{octet}.0/24")
        raise NetworkUnavailable("every 10.77.X.0/24 is in use")

    def command_prefix(self, node_id: int) -> list[str]:
        return [self.ip, "netns", "exec", self.node_ns[node_id]]

    # ---- partitions -----------------------------------------------------------------------------

    def _nft(self, node_id: int, script: str) -> None:
        assert self.nft is not None
        _run([self.ip, "netns", "exec", self.node_ns[node_id], self.nft, "-f", "-"], stdin=script)

    def set_blocks(self, blocks: dict[int, set[int]]) -> None:
        if self.nft is None:
            raise NotImplementedError(f"partitions are off: {self.reason}")
        for node_id in self.node_ns:
            sources = sorted(blocks.get(node_id, set()) - {node_id})
            # one transaction: the table is replaced atomically
            script = f"add table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n"
            if sources:
                addrs = ", ".join(self.hosts[s] for s in sources)
                script += (
                    f"table inet {NFT_TABLE} {{\n"
                    "  chain input {\n"
                    "    type filter hook input priority 0; policy accept;\n"
                    f"    ip saddr {{ {addrs} }} drop\n"
                    "  }\n"
                    "}\n"
                )
                self._tables.add(node_id)
            else:
                self._tables.discard(node_id)
            self._nft(node_id, script)

    def heal(self) -> None:
        if self.nft is None:
            return
        for node_id in sorted(self._tables):
            with contextlib.suppress(NetworkUnavailable, subprocess.SubprocessError):
                self._nft(node_id, f"delete table inet {NFT_TABLE}")
        self._tables.clear()

    # ---- teardown -------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.heal()
        # deleting the hub removes the veths (and so the root leg); delete the leg anyway
        for ns in reversed(self._made):
            with contextlib.suppress(Exception):
                _run([self.ip, "netns", "delete", ns], check=False)
        with contextlib.suppress(Exception):
            _run([self.ip, "link", "delete", self.root_if], check=False)
        self._made.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)


def remove_stale_namespaces() -> list[str]:
    """Delete namespaces a run that died without cleaning up left behind (named
    rcf-<pid>-..., where no process <pid> exists any more). Processes still inside them
    are nodes of that run: they are killed by pid. What was removed, for the log."""
    ip = _tool("ip")
    if ip is None or os.geteuid() != 0:
        return []
    removed = []
    try:
        names = _run([ip, "netns", "list"], check=False).split()
    except (OSError, subprocess.SubprocessError):
        return []
    for name in names:
        m = _NS_RE.match(name)
        if m is None:
            continue
        owner = int(m.group(1))
        if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
            continue
        for pid in _run([ip, "netns", "pids", name], check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        _run([ip, "netns", "delete", name], check=False)
        with contextlib.suppress(Exception):
            _run([ip, "link", "delete", f"rcf{owner}"[:15]], check=False)
        removed.append(name)
    return removed


def make_network(
    node_ids: list[int], *, partitions: bool = True, loopback: bool = False
) -> Network:
    """Namespaces when this machine allows them, otherwise loopback (the reason is in
    ``Network.reason`` and ``describe()``)."""
    if loopback:
        return LoopbackNetwork(node_ids, "--loopback: all nodes on loopback")
    if os.geteuid() != 0:
        return LoopbackNetwork(node_ids, "not root: no network namespaces, all nodes on loopback")
    if _tool("ip") is None:
        return LoopbackNetwork(node_ids, "no `ip` command (iproute2): all nodes on loopback")
    remove_stale_namespaces()
    nft = partitions and _tool("nft") is not None
    reason = ""
    if not partitions:
        reason = "--no-partitions"
    elif not nft:
        reason = "no `nft` command (install nftables)"
    try:
        net = NamespaceNetwork(node_ids, nft=nft, reason=reason)
    except NetworkUnavailable as exc:
        return LoopbackNetwork(node_ids, f"network namespaces failed ({exc}): all on loopback")
    problem = getattr(net, "_nft_problem", None)
    if problem:
        net.partitions = False
        net.reason = f"nftables does not work in a namespace: {problem}"
    return net
