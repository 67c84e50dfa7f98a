"""The node's address book and its connections to the other nodes.

The voter set changes at run time (KIP-853), so the peers are not a fixed list: the core sends
to node ids, and the node finds where each one listens. For node N, the first that knows:

1. this node itself: its advertised address;
2. the voter set in force (each voter's endpoint is in the Voters record that added it);
3. the static ``--voters`` (the voter set of kraft.version 0 carries no endpoints);
4. what other nodes said: the leader endpoints of a BeginQuorumEpoch or EndQuorumEpoch, the
   NodeEndpoints (KIP-951) of any raft answer -- how a joining node learns where its leader is;
5. the bootstrap servers (``--bootstrap``), under ids -2, -3, ... (Kafka's
   ``controller.quorum.bootstrap.servers``): addresses, not nodes; the core asks them who leads
   when it knows no voter to ask.

A connection is opened the first time the core sends to an id, and closed once the id is not
needed: not a voter, not the leader, and nothing sent to it for ``IDLE_CLOSE_S``. An id whose
address changed (a voter replaced at another address) gets a new connection.

Where a node takes client requests is another question when the nodes have listeners of
their own (``NodeConfig.node_listen``): the endpoints above are node listeners, never told to
clients. A node's client endpoint is its own ``advertised`` address, or what the node said
itself in its Fetch (to the leader) and the leader then tells every fetcher; without a node
listener of its own, this node names the others by their node endpoints to clients too, as
one listener serves both (:meth:`AddressBook.client_endpoint_of`; a node listener of another
node serves clients too, whole).

On TLS a peer must show the certificate of the node it is addressed as (``node-<id>``); a
bootstrap server is any node of the cluster, so any node's certificate will do there. A SASL
login is the same everywhere: this node's name and the inter-node password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.peer_health import PeerReachability, call_both
from raftcore.node.transport import PeerConnection
from raftcore.raft.values import LeaderAndEpoch
from raftcore.raft.voters import VoterSet
from raftcore.security import tls

__all__ = ["IDLE_CLOSE_S", "AddressBook", "Peers", "bootstrap_id"]

logger = logging.getLogger("raftcore.node.node")

IDLE_CLOSE_S = 10.0  # an id no longer needed keeps its connection this long after its last use
SWEEP_EVERY_S = 1.0


def bootstrap_id(index: int) -> int:
    """The id under which the core addresses the ``index``-th bootstrap server (-2, -3, ...)."""
    return -2 - index


class AddressBook:
    """Where each node listens (see the module docstring). ``voters`` returns the voter set in
    force (the node points it at its core's)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.static = dict(config.voters)
        self.bootstrap = {bootstrap_id(i): ep for i, ep in enumerate(config.bootstrap)}
        self.learned: dict[int, Endpoint] = {}
        self.clients_learned: dict[int, Endpoint] = {}  # where other nodes take clients
        static = VoterSet.static(config.voters)
        self.voters: Callable[[], VoterSet] = lambda: static

    def voter_set(self) -> VoterSet:
        return self.voters()

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        if node_id == self.config.node_id:
            return self.config.node_advertised
        if node_id < 0:
            return self.bootstrap.get(node_id)
        ep = self.voter_set().endpoint_of(node_id)
        if ep is not None:
            return Endpoint(ep.host, ep.port)
        return self.static.get(node_id) or self.learned.get(node_id)

    def directory_id_of(self, node_id: int) -> bytes | None:
        """The directory id the voter set has for voter ``node_id`` (None: none, or not a
        voter)."""
        key = self.voter_set().key_of(node_id)
        return None if key is None else key.directory_id

    def learn(self, node_id: int, host: str, port: int) -> None:
        """Another node said where ``node_id`` listens."""
        if node_id < 0 or node_id == self.config.node_id or not host or not 0 < port < 65536:
            return
        endpoint = Endpoint(host, port)
        if self.learned.get(node_id) != endpoint:
            self.learned[node_id] = endpoint
            logger.debug("[node %d] node %d listens at %s", self.config.node_id, node_id, endpoint)

    def learn_client(self, node_id: int, host: str, port: int) -> None:
        """``node_id`` said (or the leader said for it) where it takes client requests. Kept
        for voters only (Metadata names the voters, the leader and this node): as many entries
        as voters, whatever ids fetches name."""
        if node_id == self.config.node_id or not host or not 0 < port < 65536:
            return
        if node_id not in self.voter_set():
            return
        self.clients_learned[node_id] = Endpoint(host, port)

    def client_endpoint_of(self, node_id: int) -> Endpoint | None:
        """Where ``node_id`` takes client requests, if known: never a node listener of a node
        that has a separate one (see the module docstring)."""
        if node_id == self.config.node_id:
            return self.config.advertised
        if not self.config.separate_node_listener:
            # One listener here: the others' node endpoints, as today, never a learned one
            # (it could outlive a voter that moved; a node listener serves clients too).
            return self.endpoint_of(node_id)
        return self.clients_learned.get(node_id)

    def client_endpoints(self) -> list[tuple[int, Endpoint]]:
        """(id, client endpoint) of every voter whose client endpoint is known, by id."""
        out = []
        for voter_id in sorted(self.voter_set()):
            ep = self.client_endpoint_of(voter_id)
            if ep is not None:
                out.append((voter_id, ep))
        return out

    def told_client_endpoints(self) -> list[tuple[int, Endpoint]]:
        """What a leader tells its fetchers: this node's client endpoint and every voter's it
        learned, by id."""
        own = self.config.advertised
        assert own is not None  # NodeConfig makes it the listen address when not given
        voters = self.voter_set()
        known = {i: ep for i, ep in self.clients_learned.items() if i in voters}
        known[self.config.node_id] = own
        return sorted(known.items())

    def voter_endpoints(self) -> list[tuple[int, Endpoint]]:
        """(id, endpoint) of every voter whose address is known, by id."""
        out = []
        for voter_id in sorted(self.voter_set()):
            ep = self.endpoint_of(voter_id)
            if ep is not None:
                out.append((voter_id, ep))
        return out

    def describe(self, node_id: int) -> str:
        """``voter 2``, ``node 4`` (not a voter) or ``bootstrap server``, for log lines (which
        name the address after it)."""
        if node_id < 0:
            return "bootstrap server"  # its address follows in every line that names it
        return f"{'voter' if node_id in self.voter_set() else 'node'} {node_id}"


@dataclass(slots=True)
class _Peer:
    connection: PeerConnection
    endpoint: Endpoint
    last_used: float


# what a connection to node N tells the node: (on_response, on_refused, on_connected)
Callbacks = tuple[Callable[[int, bytes], None], Callable[[], None], Callable[[], None]]


class Peers:
    """The connections to other nodes, opened on demand (:meth:`get`), closed when no longer
    needed (:meth:`sweep`)."""

    def __init__(
        self,
        book: AddressBook,
        prefix: str,
        callbacks: Callable[[int], Callbacks],
        *,
        tls_context: ssl.SSLContext | None = None,
        login: Any = None,
        clock: Callable[[], float] = time.monotonic,
        quiet: bool = False,
    ) -> None:
        """``quiet``: the reachability of each peer is logged at DEBUG only (a second set of
        connections to the same peers, whose first set says it)."""
        self.book = book
        self.quiet = quiet
        self.prefix = prefix
        self.callbacks = callbacks
        self.tls_context = tls_context
        self.login = login  # a SASL login on each new connection (raftcore.security.sasl)
        self.clock = clock
        self.connections: dict[int, _Peer] = {}
        self._stopping: set[asyncio.Future[None]] = set()
        self._unknown_logged: set[int] = set()
        self.opened = 0  # connections ever opened (for tests and metrics)
        self.closed = False  # after close(), nothing is opened again

    def get(self, node_id: int) -> PeerConnection | None:
        """The connection to ``node_id``, opened now if there is none (None: its address is
        not known, or these connections are closed)."""
        if self.closed:  # a step or a request late in the node's close opens nothing to leak
            return None
        endpoint = self.book.endpoint_of(node_id)
        peer = self.connections.get(node_id)
        if peer is not None and peer.endpoint != endpoint:
            logger.info(
                "%s %s moved from %s to %s: reconnecting",
                self.prefix,
                self.book.describe(node_id),
                peer.endpoint,
                endpoint,
            )
            self._close(node_id)
            peer = None
        if endpoint is None:
            if node_id not in self._unknown_logged:
                self._unknown_logged.add(node_id)
                logger.warning("%s no address known for node %d", self.prefix, node_id)
            return None
        if peer is None:
            peer = self.connections[node_id] = _Peer(
                self._open(node_id, endpoint), endpoint, self.clock()
            )
        else:
            peer.last_used = self.clock()
        return peer.connection

    def down(self) -> list[int]:
        """The peers whose connection is down and failed its last attempt to reconnect."""
        return sorted(i for i, peer in self.connections.items() if peer.connection.down)

    def _open(self, node_id: int, endpoint: Endpoint) -> PeerConnection:
        on_response, on_refused, on_connected = self.callbacks(node_id)
        health = PeerReachability(
            self.prefix, self.book.describe(node_id), str(endpoint), quiet=self.quiet
        )
        peer_tls = None
        if self.tls_context is not None:
            peer_tls = tls.PeerTls(self.tls_context, node_id, self.prefix)
        connection = PeerConnection(
            f"{self.prefix}->{node_id}",
            endpoint.host,
            endpoint.port,
            on_response,
            on_refused=on_refused,
            on_connected=call_both(health.connected, on_connected),
            on_failed=health.failed,
            max_frame_bytes=self.book.config.max_frame_bytes,
            authenticate=self.login,
            tls=peer_tls,
        )
        connection.start()
        self.opened += 1
        self._unknown_logged.discard(node_id)
        return connection

    def open_count(self) -> int:
        """Connections that are up now."""
        return sum(1 for p in self.connections.values() if p.connection.connected.is_set())

    def sweep(self, needed: set[int]) -> None:
        """Close the connections to ids not in ``needed`` and unused for ``IDLE_CLOSE_S``, and
        to ids whose address changed."""
        now = self.clock()
        for node_id, peer in list(self.connections.items()):
            moved = self.book.endpoint_of(node_id) != peer.endpoint
            idle = node_id not in needed and now - peer.last_used >= IDLE_CLOSE_S
            if moved or idle:
                logger.debug(
                    "%s closing the connection to %s (%s)",
                    self.prefix,
                    self.book.describe(node_id),
                    "its address changed" if moved else "no longer needed",
                )
                self._close(node_id)

    def keep_open(self, voters: Iterable[int], leader: LeaderAndEpoch, own_id: int) -> None:
        """Connections to the voters and the leader open (so that an election or a first fetch
        does not wait for a TLS handshake), none kept to the ids no longer needed."""
        needed = set(voters)
        if leader.leader_id is not None:
            needed.add(leader.leader_id)
        needed.discard(own_id)
        self.sweep(needed)
        for node_id in needed:
            self.get(node_id)

    def _close(self, node_id: int) -> None:
        peer = self.connections.pop(node_id, None)
        if peer is not None:
            task = asyncio.ensure_future(peer.connection.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        self.closed = True
        for node_id in list(self.connections):
            self._close(node_id)
        for task in list(self._stopping):
            with contextlib.suppress(Exception):
                await task
