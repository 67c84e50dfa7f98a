"""The node's messages on the wire, a component :class:`~raftcore.node.node.RaftNode` owns:
what a group's core sends goes to a peer's connection (requests) or back to the waiting inbound
connection (responses); responses from peers and requests from inbound connections come back
into the core of the group they are for, found by its topic-partition among the node's
``groups`` (a request names it; a response goes to the group that asked), through that group's
``run`` (one step of its core); the voter RPCs of an operator
go to :mod:`raftcore.node.admin`, Kafka client requests to :mod:`raftcore.kafka` (with the
node's ``kafka`` Broker). The node's own requests to a peer (an auto-join's AddRaftVoter) share
the peer's connection, answered by future. Nothing here decides anything: it moves bytes,
within the bounds on accepted connections (:mod:`raftcore.node.connection_limits`,
:mod:`raftcore.node.connection_timeouts`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.kafka import server as kafka_server
from raftcore.kafka.invalid_request import InvalidRequest
from raftcore.node import admin, raft_wire
from raftcore.node.connection_limits import (
    ConnectionLimits,
    RequestBudget,
    resolve_hosts,
)
from raftcore.node.connection_timeouts import ConnectionTimeouts
from raftcore.node.listeners import RaftRefusals, Role, sees_directory_ids
from raftcore.node.peer_apis import PeerApis
from raftcore.node.peers import Peers
from raftcore.node.preflight import warn_if_open_files_short
from raftcore.node.tls_listener import serve_tls
from raftcore.node.topic_ids import METADATA_TOPIC
from raftcore.node.transport import CloseConnection, Later, ServerConnection
from raftcore.protocol.api import (
    RAFT_ONLY_APIS,
    ApiKey,
    UnknownApiKeyError,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_spec,
)
from raftcore.raft import Outbound
from raftcore.raft.messages import UpdateVoterRequest
from raftcore.security import authorization, sasl
from raftcore.security.config import ANONYMOUS, Principal
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker
    from raftcore.node.config import NodeConfig
    from raftcore.node.group import RaftGroup
    from raftcore.node.metrics import NodeMetrics
    from raftcore.node.peers import AddressBook
    from raftcore.node.topic_ids import TopicIds
    from raftcore.raft import RaftCore
    from raftcore.security.sasl import SaslAuthenticator

__all__ = ["RAFT_APIS", "Messaging"]

logger = logging.getLogger("raftcore.node.node")

RAFT_APIS = RAFT_ONLY_APIS  # and a Fetch naming a replica
_OWN_TOPIC_LANE, _METADATA_LANE, _TOPICS_LANE = "own", "metadata", "topics"
ABSENT_PAUSE_S = 1.0  # how long a group's requests wait for a peer that has no such group
# The connections each other node opens to this one: its node topic's Raft traffic, its own
# requests (Messaging._own_peers), and the metadata and created topics' lanes.
PEER_CONNECTIONS = 4


class Messaging:
    """The node's connections: to its peers (requests out, responses in) and from clients and
    other nodes (requests in, answers out). It holds the requests in flight each way; a core
    is reached through its group in ``groups`` (the node's, by topic-partition): its
    ``running_core()`` (None unless it runs) and ``run`` (one step of the core, whose output
    the group carries out)."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        prefix: str,
        address_book: AddressBook,
        metrics: NodeMetrics,
        kafka: Broker,
        sasl: SaslAuthenticator | None,
        groups: Mapping[TopicPartition, RaftGroup],
        admin_handle: Callable[[Any, Any], Awaitable[Any]],
        correlation_ids: Iterator[int],
        topic_ids: TopicIds | None = None,
    ) -> None:
        """``correlation_ids``: the node's one source of them, which its groups' cores use
        too: an answer on a connection to a peer is matched by (peer, correlation id)."""
        self.config = config
        self.prefix = prefix
        self.address_book = address_book  # the wire format learns and tells endpoints (raft_wire)
        self.metrics = metrics
        self.kafka = kafka  # the node as the Kafka API sees it
        self.sasl = sasl  # SASL logins on the listener, or None
        self.groups = groups  # the node's Raft groups, where raft messages go
        # the ids of their topics (raftcore.node.raft_wire; None: NodeConfig.topic's only)
        self.topic_ids = topic_ids
        self._admin_handle = admin_handle  # the voter RPCs of an operator (raftcore.node.admin)
        self._correlation_ids = correlation_ids
        self.peers: Peers | None = None  # the connections to the other nodes, from listen()
        self._own_peers: Peers | None = None  # and those for the node's own requests
        # and those of the metadata group, and of the topics created through it (listen())
        self._side_peers: dict[str, Peers] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tls_context: Any = None  # the listener's ssl.SSLContext, or None (PLAINTEXT)
        self.servers: list[Any] = []  # asyncio.Server or TlsServer: one, or client and node
        # Raft RPCs that came in on a client listener, refused (raftcore.node.listeners)
        self.raft_refusals = RaftRefusals(prefix)
        self.connections: set[ServerConnection] = set()  # accepted, open
        self.closed = False  # close() ran: a connection accepted just before is not served
        # raft requests sent to peers, not answered yet: (peer, correlation id) -> (key,
        # version, the group that sent it)
        self._peer_requests: dict[tuple[int, int], tuple[int, int, TopicPartition]] = {}
        # raft requests the core has not answered yet: (Later, api key, version, correlation
        # id, when it came), by the token the core answers with
        self._inbound: dict[int, tuple[Later, int, int, int, float]] = {}
        self._inbound_group: dict[int, TopicPartition] = {}  # the group each token went to
        # (peer, group) -> until when (loop time) the group's requests to that peer wait: the
        # peer answered that it has no such group (UNKNOWN_TOPIC_*): a node of the release
        # before the metadata group, a replica not opened yet or already deleted there
        self._absent_at: dict[tuple[int, TopicPartition], float] = {}
        self._token = 0
        self._foreign_peers: set[int] = set()  # answered INCONSISTENT_CLUSTER_ID (said once)
        # the node's own requests to peers: (peer, correlation id) -> (api key, version, future)
        self._own_requests: dict[tuple[int, int], tuple[int, int, asyncio.Future[Any]]] = {}
        self.peer_apis = PeerApis(self._api_versions_of, prefix)  # asked on each connect
        # The bounds on accepted connections (docs/security.md, "Bounds"): how many, their
        # timeouts, the bytes of requests they may make the node hold.
        self.limits = ConnectionLimits(
            config.max_connections,
            config.max_connections_per_ip,
            # every voter's connections past max.connections, so that a flood from elsewhere
            # cannot lock a voter out (with one lane each, four connections each since the
            # metadata and topics lanes; CI run 8 saw a voters' host refused in a flood)
            reserve=len(config.voters) * PEER_CONNECTIONS,
            prefix=prefix,
        )
        self.request_budget = RequestBudget(config.queued_max_request_bytes)
        self.timeouts = ConnectionTimeouts(
            self.connections,
            idle_ms=config.connections_max_idle_ms,
            login_ms=config.login_timeout_ms,
            frame_ms=config.frame_receive_timeout_ms,
            prefix=prefix,
        )

    # ---- lifecycle -------------------------------------------------------------------------------

    async def listen(
        self,
        peers: Peers,
        tls_context: Any,
        listen_socket: socket.socket | None,
        node_listen_socket: socket.socket | None = None,
    ) -> list[Any]:
        """Use ``peers`` for the node's requests, and start accepting connections (over TLS
        with ``tls_context``) on the listen address (or ``listen_socket``, bound to it), and on
        the node listener's (or ``node_listen_socket``) when the node has one; the servers
        (``close()`` stops accepting)."""
        self.peers = peers
        # The node's own requests (a forwarded write, ReadIndex, an admin request, ApiVersions)
        # go on connections of their own: a node answers each connection's requests in order,
        # and a forwarded acks=all Produce, answered only once the followers fetch past it,
        # would hold this follower's Fetch answers back behind it on a shared one (the leader
        # then misses a fetch timeout's worth of fetches and an election follows).
        self._own_peers = Peers(
            peers.book,
            peers.prefix,
            self._own_callbacks,
            tls_context=peers.tls_context,
            login=peers.login,
        )
        # The metadata group's Raft requests, and those of the created topics' groups, go on
        # connections of their own too: an idle group's fetch waits at its leader (the
        # purgatory, up to fetch_max_wait_ms) and holds back the answers to every request
        # behind it on the connection, NodeConfig.topic's fetches too.
        for lane in (_METADATA_LANE, _TOPICS_LANE):
            self._side_peers[lane] = Peers(
                peers.book,
                peers.prefix,
                functools.partial(self._side_callbacks, lane),
                tls_context=peers.tls_context,
                login=peers.login,
                quiet=True,
            )
        self._loop = asyncio.get_running_loop()
        self._tls_context = tls_context
        cfg = self.config
        listen = cfg.listen
        assert listen is not None  # NodeConfig makes it the voter's address when not given
        warn_if_open_files_short(cfg, self.prefix)
        voter_hosts = await resolve_hosts(e.host for e in cfg.voters.values())
        self.limits.protected = frozenset(voter_hosts)
        if cfg.node_listen is None:
            self.servers = [await self._serve(Role.SHARED, listen, listen_socket)]
        else:
            self.servers = [await self._serve(Role.CLIENT, listen, listen_socket)]
            try:
                self.servers.append(
                    await self._serve(Role.NODE, cfg.node_listen, node_listen_socket)
                )
            except BaseException:
                self.servers[0].close()
                raise
        self.timeouts.start()
        return self.servers

    async def _serve(self, role: Role, address: Any, sock: socket.socket | None) -> Any:
        """A server for one listener, whose connections serve as ``role`` says."""
        cfg = self.config
        if self._tls_context is not None:  # TLS before the first byte is read (tls_listener)
            return await serve_tls(
                functools.partial(self._accept, role=role),
                self._tls_context,
                self.prefix,
                sock=sock,
                host=address.host,
                port=address.port,
                limits=self.limits,
                handshake_timeout_s=cfg.login_timeout_ms / 1000,
            )
        accept = functools.partial(self._accept_plain, role=role)
        if sock is not None:
            return await asyncio.start_server(accept, sock=sock)
        return await asyncio.start_server(accept, address.host, address.port)

    async def close(self) -> None:
        """Close the accepted connections (the server stopped accepting) and forget the raft
        requests they made; stop asking peers what they serve."""
        self.closed = True
        self.timeouts.close()
        for conn in list(self.connections):
            conn.close()
        await self.peer_apis.close()
        if self._own_peers is not None:
            await self._own_peers.close()
        for side in self._side_peers.values():
            await side.close()
        self._inbound.clear()  # their connections close with the node
        self._inbound_group.clear()

    # ---- raft messages on the wire ---------------------------------------------------------------

    def send(self, group: TopicPartition, message: Outbound) -> None:
        """Send what the core of ``group`` says: a request to its peer, a response to the
        connection that asked (an fsync it had to wait for is behind it)."""
        if message.is_request:
            if isinstance(message.message, UpdateVoterRequest) and (
                # names no partition: the peer gives it to NodeConfig.topic's partition 0
                group.partition != 0
                or group.topic != self.config.topic
                or not self.peer_apis.may_send(message.destination, ApiKey.UPDATE_RAFT_VOTER)
            ):
                # Another group's would be answered by partition 0's core, whose leader
                # and epoch its own core would take for its own (and turn observer).
                # A leader of the release before dynamic voters would close the connection
                # (and the fetches on it): not sent, and lost for the core, which tells the
                # leader of the next epoch (raftcore.node.peer_apis)
                assert self._loop is not None
                self._loop.call_soon(
                    self._not_sent, group, message.destination, message.correlation_id
                )
                return
            if self._wait_for_absent(group, message):
                return
            assert self.peers is not None
            lanes = self._side_peers
            connections = lanes.get(self._lane(group), self.peers)
            peer = connections.get(message.destination)  # opened now if need be
            if peer is None:  # no address known (logged once by the address book)
                return
            api_key, version, frame = raft_wire.encode_request(self, message, group)
            # Sent or not, it is in flight until answered or found lost (_connected_handler);
            # each group's core has one in flight per peer: an older one of this group to this
            # peer is answered in vain (another group's is not: it waits for its own answer).
            requests = self._peer_requests
            for key in [
                k for k, v in requests.items() if k[0] == message.destination and v[2] == group
            ]:
                del requests[key]
            requests[(message.destination, message.correlation_id)] = (api_key, version, group)
            if peer.send([frame]):
                self.metrics.peer_sent_bytes += len(frame) + 4
            return
        pending = self._inbound.pop(message.correlation_id, None)
        self._inbound_group.pop(message.correlation_id, None)
        if pending is None:
            return  # the node is stopping
        later, api_key, version, correlation_id, started = pending
        self.metrics.raft_request(api_key)(time.perf_counter() - started)
        body = raft_wire.encode_response(self, message, api_key, version, group)
        parts = encode_response(api_key, version, correlation_id, body)
        self.metrics.inbound_sent_bytes += sum(len(part) for part in parts) + 4
        later.answer(parts)

    def _wait_for_absent(self, group: TopicPartition, message: Outbound) -> bool:
        """A request of ``group`` to a peer that said it has no such group, within
        ABSENT_PAUSE_S of saying so, is held until then and handed back to the core as lost
        (it asks again after its backoff): one probe per pause, not one per retry backoff
        (the release before the metadata group logs every refusal)."""
        key = (message.destination, group)
        until = self._absent_at.get(key)
        if until is None:
            return False
        assert self._loop is not None
        left = until - self._loop.time()
        if left <= 0:
            del self._absent_at[key]
            return False
        self._loop.call_later(
            left, self._not_sent, group, message.destination, message.correlation_id
        )
        return True

    def group_closed(self, name: TopicPartition) -> None:
        """The group ``name`` closed while the node runs (its topic deleted): the requests its
        core had not answered yet (a parked fetch) are answered UNKNOWN_TOPIC_OR_PARTITION
        now. A connection answers in the order it was asked: one never answered would hold
        back every later answer on it, the other groups' too."""
        for token in [t for t, n in self._inbound_group.items() if n == name]:
            del self._inbound_group[token]
            pending = self._inbound.pop(token, None)
            if pending is None:
                continue
            later, api_key, version, correlation_id, _ = pending
            code = (
                Errors.UNKNOWN_TOPIC_ID
                if api_key == ApiKey.FETCH
                else Errors.UNKNOWN_TOPIC_OR_PARTITION
            )
            body = raft_wire.error_response(self, api_key, version, code)
            later.answer(encode_response(api_key, version, correlation_id, body))
        for key in [k for k, v in self._peer_requests.items() if v[2] == name]:
            del self._peer_requests[key]
        for absent in [k for k in self._absent_at if k[1] == name]:
            del self._absent_at[absent]

    def _not_sent(self, name: TopicPartition, peer_id: int, correlation_id: int) -> None:
        group = self.groups.get(name)
        core = None if group is None else group.running_core()
        if group is not None and core is not None:
            group.run(functools.partial(core.request_lost, peer_id, correlation_id))

    def _any_core(self) -> RaftCore | None:
        """A running group's core, for what every group answers alike (a request's cluster
        id); None unless the node runs."""
        for group in self.groups.values():
            core = group.running_core()
            if core is not None:
                return core
        return None

    async def _api_versions_of(self, peer_id: int) -> frozenset[int]:
        """The API keys ``peer_id`` serves, as its ApiVersions answer lists them."""
        cls = request_spec(ApiKey.API_VERSIONS).cls
        body = cls(client_software_name=raft_wire.CLIENT_ID, client_software_version="")
        timeout_s = self.config.quorum.request_timeout_ms / 1000
        answer = await self.request_peer(peer_id, ApiKey.API_VERSIONS, 3, body, timeout_s)
        if answer.error_code != Errors.NONE:
            raise RaftcoreError(f"ApiVersions: {error_name(answer.error_code)}")
        return frozenset(k.api_key for k in answer.api_keys)

    def _response_handler(self, peer_id: int) -> Callable[[int, bytes], None]:
        def on_response(correlation_id: int, frame: bytes) -> None:
            self.metrics.peer_received_bytes += len(frame) + 4
            key = (peer_id, correlation_id)
            sent = self._peer_requests.pop(key, None)
            if sent is None:
                return
            api_key, version, name = sent
            group = self.groups.get(name)
            core = None if group is None else group.running_core()
            if group is None or core is None:
                return
            try:
                message = raft_wire.decode_response(self, api_key, version, frame, name)
            except RaftcoreError as exc:
                logger.warning("%s bad response from node %d: %s", self.prefix, peer_id, exc)
                return
            if message.error_code == Errors.INCONSISTENT_CLUSTER_ID:
                if peer_id not in self._foreign_peers:  # say it once per peer
                    self._foreign_peers.add(peer_id)
                    logger.error(
                        "%s node %d answers INCONSISTENT_CLUSTER_ID: it belongs to another "
                        "cluster than %r (check --cluster-id and the voters)",
                        self.prefix,
                        peer_id,
                        self.config.cluster_id,
                    )
            else:
                self._foreign_peers.discard(peer_id)
            if message.error_code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID):
                assert self._loop is not None
                self._absent_at[(peer_id, name)] = self._loop.time() + ABSENT_PAUSE_S
            group.run(lambda now: core.handle(peer_id, correlation_id, message, now))

        return on_response

    def _connected_handler(self, peer_id: int) -> Callable[[], None]:
        def on_connected() -> None:
            """Requests to ``peer_id`` not answered yet went with the old connection (or had
            none): fail them now, so the core sends again at once, not at the timeout (a
            snapshot download resumes from the bytes it holds)."""
            self.metrics.peer_opened += 1
            self.peer_apis.connected(peer_id)  # what it serves (after the failures below)
            lost = [
                cid
                for (peer, cid), sent in self._peer_requests.items()
                if peer == peer_id and self._lane(sent[2]) == _OWN_TOPIC_LANE
            ]
            for cid in lost:
                name = self._peer_requests.pop((peer_id, cid))[2]
                self._not_sent(name, peer_id, cid)

        return on_connected

    def _lane(self, group: TopicPartition) -> str:
        """Which connections to a peer a group's requests go on (see :meth:`listen`)."""
        if group.topic == self.config.topic:
            return _OWN_TOPIC_LANE
        return _METADATA_LANE if group.topic == METADATA_TOPIC else _TOPICS_LANE

    def _side_callbacks(self, lane: str, peer_id: int) -> tuple[Any, Any, Any]:
        """What a connection of ``lane`` to ``peer_id`` tells the node: answers as the main
        connection's; a refusal is heard on the main connection (every group hears it there);
        a new connection fails the requests of its lane's groups sent on the old one."""

        def on_connected() -> None:
            self.metrics.peer_opened += 1
            lost = [
                cid
                for (peer, cid), sent in self._peer_requests.items()
                if peer == peer_id and self._lane(sent[2]) == lane
            ]
            for cid in lost:
                name = self._peer_requests.pop((peer_id, cid))[2]
                self._not_sent(name, peer_id, cid)

        return (self._response_handler(peer_id), lambda: None, on_connected)

    def _own_callbacks(self, peer_id: int) -> tuple[Any, Any, Any]:
        """What a connection for the node's own requests to ``peer_id`` tells it: answers
        settle the requests' futures; a new connection fails those sent on the old one."""

        def on_response(correlation_id: int, frame: bytes) -> None:
            self.metrics.peer_received_bytes += len(frame) + 4
            own = self._own_requests.pop((peer_id, correlation_id), None)
            if own is None:
                return  # (timed out)
            api_key, version, fut = own
            if not fut.done():
                try:
                    fut.set_result(decode_response(api_key, version, frame)[1])
                except RaftcoreError as exc:
                    fut.set_exception(exc)

        def on_connected() -> None:
            for key in [k for k in self._own_requests if k[0] == peer_id]:
                fut = self._own_requests.pop(key)[2]
                if not fut.done():
                    fut.set_exception(ConnectionError(f"the connection to node {peer_id} was lost"))

        return (on_response, lambda: None, on_connected)

    def peer_callbacks(self, peer_id: int) -> tuple[Any, Any, Any]:
        """What a connection to ``peer_id`` tells the node (raftcore.node.peers)."""
        return (
            self._response_handler(peer_id),
            self._refused_handler(peer_id),
            self._connected_handler(peer_id),
        )

    async def request_peer(
        self, peer_id: int, api_key: int, version: int, body: Any, timeout_s: float
    ) -> Any:
        """Send the node's own request to ``peer_id`` on the node's own-request connection
        to it (apart from the Raft traffic: see :meth:`listen`), waiting for it to connect;
        the answer's body. ConnectionError when there is no address or the connection is
        lost, TimeoutError."""
        core = self._any_core()  # (running)
        own = self._own_peers
        if core is None or own is None or own.closed or self._loop is None:
            raise ConnectionError(f"{self.prefix} not running: no request to node {peer_id}")
        own.sweep({peer_id})  # the others unused for IDLE_CLOSE_S are closed
        peer = own.get(peer_id)
        if peer is None:
            raise ConnectionError(f"no address known for node {peer_id}")
        deadline = self._loop.time() + timeout_s
        if not peer.connected.is_set():
            await asyncio.wait_for(peer.connected.wait(), timeout_s)
            timeout_s = max(0.0, deadline - self._loop.time())
        correlation_id = next(self._correlation_ids)
        frame = encode_request(api_key, version, correlation_id, raft_wire.CLIENT_ID, body)
        fut: asyncio.Future[Any] = self._loop.create_future()
        key = (peer_id, correlation_id)
        self._own_requests[key] = (api_key, version, fut)
        try:
            if not peer.send([frame]):
                raise ConnectionError(f"not connected to node {peer_id}")
            self.metrics.peer_sent_bytes += len(frame) + 4
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._own_requests.pop(key, None)

    def _refused_handler(self, peer_id: int) -> Callable[[], None]:
        def on_refused() -> None:
            for group in self.groups.values():  # every group that runs hears it
                core = group.running_core()
                if core is not None:
                    group.run(functools.partial(core.peer_unreachable, peer_id))

        return on_refused

    # ---- inbound connections ---------------------------------------------------------------------

    async def _accept_plain(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        role: Role = Role.SHARED,
    ) -> None:
        """A new connection on a PLAINTEXT or SASL_PLAINTEXT listener: admitted by the
        connection limits (the TLS listener asks them itself, before the handshake)."""
        host = self.limits.admit(writer.get_extra_info("peername"))
        if host is None:
            writer.transport.abort()
            return
        try:
            await self._accept(reader, writer, role=role)
        finally:
            self.limits.release(host)

    async def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        principal: Principal = ANONYMOUS,
        *,
        role: Role = Role.SHARED,
    ) -> None:
        """A new connection on the listener ``role`` names; on a TLS listener, after its
        handshake, with the principal its certificate proved (raftcore.node.tls_listener)."""
        if self.closed:
            # Accepted in the loop iteration before the server closed, started after close()
            # closed the others: it would wait for a close that never comes, and be cancelled
            # when the loop ends (which asyncio's stream callback logs with a traceback).
            writer.transport.abort()
            return
        conn = ServerConnection(
            reader,
            writer,
            self._counted_frame,
            self.config.max_frame_bytes,
            self.prefix,
            budget=self.request_budget,
        )
        conn.principal = principal
        conn.listener_role = role
        sasl.on_accept(self, conn)
        if self.sasl is not None and principal.kind != "node":  # a login is due
            conn.expect_login(time.monotonic() + self.config.login_timeout_ms / 1000)
        self.connections.add(conn)
        self.metrics.inbound_opened += 1
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)

    async def _counted_frame(
        self, conn: ServerConnection, frame: bytes
    ) -> list[bytes | memoryview] | Later | None:
        """``_handle_frame``, with the bytes in and out counted (raftcore.node.metrics)."""
        self.metrics.inbound_received_bytes += len(frame) + 4
        answer = await self._handle_frame(conn, frame)
        if answer is not None and not isinstance(answer, Later):  # a Later counts in _send
            parts = getattr(answer, "parts", answer)  # an AnswerThenClose (SASL) holds its parts
            if parts is not None:
                self.metrics.inbound_sent_bytes += sum(len(part) for part in parts) + 4
        return answer

    async def _handle_frame(
        self, conn: ServerConnection, frame: bytes
    ) -> list[bytes | memoryview] | Later | None:
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as exc:
            try:
                return kafka_server.unsupported_version(
                    self.kafka, exc.header, raft_apis=conn.listener_role is not Role.CLIENT
                )
            except InvalidRequest as invalid:
                raise CloseConnection(str(invalid)) from None
        except UnknownApiKeyError as exc:
            raise CloseConnection(f"unknown API key {exc.header.request_api_key}") from None
        except RaftcoreError as exc:
            raise CloseConnection(f"unparseable request: {exc}") from None
        gated = sasl.gate(self, conn, header, body)  # SASL login first, on a SASL listener
        if asyncio.iscoroutine(gated):  # a login step (its PBKDF2 runs off the loop)
            gated = await gated
        if gated is not sasl.PASS:
            return gated
        api_key = header.request_api_key
        if api_key in RAFT_APIS or (api_key == ApiKey.FETCH and raft_wire.is_replica_fetch(body)):
            refused = self.raft_refusals.refuse(conn, header)  # not on a client listener
            if refused is None:
                refused = authorization.refuse_unless_node(self, conn, header)
            if refused is not None:
                return refused
            return await self._handle_raft_request(header, body, conn)
        if api_key in admin.ADMIN_APIS:
            refused = authorization.refuse_unless_admin(self, conn, header, body)
            if refused is not None:
                return refused
            started = time.perf_counter()
            answer = await self._admin_handle(header, body)
            self.metrics.kafka_request(api_key)(time.perf_counter() - started)
            return encode_response(
                api_key, header.request_api_version, header.correlation_id, answer
            )
        try:
            return await kafka_server.handle(
                self.kafka,
                header,
                body,
                raft_apis=conn.listener_role is not Role.CLIENT,
                directory_ids=sees_directory_ids(conn, self.config.admin_principals),
                client_host=conn.peer[0] if isinstance(conn.peer, tuple) else "",
            )
        except InvalidRequest as exc:
            raise CloseConnection(str(exc)) from None

    async def _handle_raft_request(
        self, header: Any, body: Any, conn: ServerConnection | None = None
    ) -> list[bytes | memoryview] | Later:
        core = self._any_core()
        if core is None:
            raise CloseConnection("node not running")
        api_key = header.request_api_key
        version = header.request_api_version
        cluster_id = getattr(body, "cluster_id", None)
        if not core.has_valid_cluster_id(cluster_id):
            # The core's rule, asked before the request is decoded: another cluster's request
            # is refused as such even when it names another topic (Kafka checks it first).
            logger.info("%s refusing a raft request of cluster %r", self.prefix, cluster_id)
            return encode_response(
                api_key,
                version,
                header.correlation_id,
                raft_wire.error_response(self, api_key, version, Errors.INCONSISTENT_CLUSTER_ID),
            )
        try:
            name, source, message = raft_wire.decode_request(self, header, body)
            group = self.groups.get(name)
            if group is None:
                raise raft_wire.WrongPartition(api_key, f"no replica of {name} on this node")
        except raft_wire.WrongPartition as exc:
            logger.info("%s refusing a raft request: %s", self.prefix, exc)
            code = (
                Errors.UNKNOWN_TOPIC_ID
                if api_key == ApiKey.FETCH
                else (Errors.UNKNOWN_TOPIC_OR_PARTITION)
            )
            return encode_response(
                api_key,
                version,
                header.correlation_id,
                raft_wire.error_response(self, api_key, version, code),
            )
        group_core = group.running_core()  # the core of the group the request names
        if group_core is None:
            raise CloseConnection("node not running")
        if conn is not None:
            refused = authorization.refuse_unless_that_node(self, conn, header, source)
            if refused is not None:
                return refused
            told = raft_wire.client_endpoint(body) if api_key == ApiKey.FETCH else None
            if told is not None and (
                conn.listener_role is Role.NODE or conn.principal.kind == "node"
            ):
                # where the fetching replica takes clients, from a node listener or a node's
                # own connection only: on a shared PLAINTEXT listener anyone could send clients
                # elsewhere (there the node endpoints serve clients too)
                self.address_book.learn_client(source, *told)
        raft_wire.learn_leader(self, api_key, source, body)  # not before the check above
        # The core's answer comes now (most requests) or later (a parked fetch); either way
        # _send hands it to the connection, which writes it in its turn: no task waits.
        later = Later()
        self._token += 1
        token = self._token
        started = time.perf_counter()
        self._inbound[token] = (later, api_key, version, header.correlation_id, started)
        self._inbound_group[token] = name
        group.run(lambda now: group_core.handle(source, token, message, now))
        return later
