"""Every connection bounded (docs/security.md, "Bounds"), one node in this process:

- ``max.connections`` and ``max.connections.per.ip``: a connection past a cap is closed as it is
  accepted, counted and logged once; other hosts, and the voters' host, are still served;
- ``connections.max.idle.ms``, the login timeout (TLS handshake, SASL login) and the frame
  receive timeout close a connection that breaks them, within one period of the check;
- ``queued.max.request.bytes``: a large frame starts while the budget has room, else its
  connection stops reading until answers give bytes back; small frames go on;
- a connection closed for a bound is aborted: what its client did not read goes with it.

A closed connection's buffers freed without the cyclic GC, and large answers written in
pieces: test_transport_framing.py. The same attacks against node processes, with their
resident memory: test_connection_memory.py and test_wire_fuzz.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.connection_limits import ConnectionLimits, RequestBudget
from raftcore.node.connection_timeouts import ConnectionTimeouts
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.node.transport import ServerConnection, read_frame
from raftcore.protocol.api import ApiKey, decode_response, encode_request, request_spec
from raftcore.raft import QuorumConfig

pytestmark = pytest.mark.timeout(60)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def run(coro: Any, timeout_s: float = 30.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


# ---- one node in this process --------------------------------------------------------------


@contextlib.asynccontextmanager
async def one_node(tmp_path: Path, **bounds: Any):  # type: ignore[no-untyped-def]
    """A single voter (it elects itself at once) on 127.0.0.1 with ``bounds`` in its config."""
    (port,) = free_ports(1)
    node = RaftNode(
        NodeConfig(
            node_id=1,
            voters={1: Endpoint("127.0.0.1", port)},
            data_dir=tmp_path / "node-1",
            cluster_id="bounds-tests",
            quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
            **bounds,
        )
    )
    await node.start()
    try:
        deadline = time.monotonic() + 10
        while not node.is_leader():
            assert time.monotonic() < deadline, "the single voter did not become leader"
            await asyncio.sleep(0.01)
        yield node
    finally:
        await node.stop(timeout_s=0.5)


async def connect(node: RaftNode, source: str = "127.0.0.1") -> tuple[Any, Any]:
    ep = node.config.listen
    return await asyncio.open_connection(ep.host, ep.port, local_addr=(source, 0))


API_VERSIONS = framed(
    encode_request(
        ApiKey.API_VERSIONS,
        3,
        7,
        "bounds",
        request_spec(ApiKey.API_VERSIONS).cls(
            client_software_name="b", client_software_version="1"
        ),
    )
)


async def served(reader: Any, writer: Any, timeout_s: float = 3.0) -> bool:
    """True when an ApiVersions request on this connection is answered."""
    try:
        writer.write(API_VERSIONS)
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))
        data = await asyncio.wait_for(reader.readexactly(size), timeout_s)
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    cid, _ = decode_response(ApiKey.API_VERSIONS, 3, data)
    return cid == 7


async def closed_within(reader: Any, timeout_s: float) -> float | None:
    """Seconds until the node closed the connection (EOF or reset), or None if it did not."""
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), timeout_s - (time.monotonic() - started)):
            pass
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    except asyncio.TimeoutError:
        return None
    return time.monotonic() - started


# ---- connection caps -------------------------------------------------------------------------


def test_a_connection_past_max_connections_per_ip_is_closed_at_accept_and_other_hosts_are_served(
    tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="raftcore.node.connection_limits")

    async def main() -> None:
        async with one_node(tmp_path, max_connections=20, max_connections_per_ip=4) as node:
            held = [await connect(node, "127.0.0.2") for _ in range(4)]
            for reader, writer in held:
                assert await served(reader, writer)
            refused = [await connect(node, "127.0.0.2") for _ in range(3)]
            for reader, _ in refused:
                assert await closed_within(reader, 2.0) is not None
            assert await served(*await connect(node, "127.0.0.3"))  # another host
            assert node.limits.refused["max_connections_per_ip"] == 3
            for _, writer in held:  # room again once they close
                writer.close()
            await asyncio.sleep(0.2)
            assert await served(*await connect(node, "127.0.0.2"))

    run(main())
    lines = [r.getMessage() for r in caplog.records if "refusing a connection" in r.getMessage()]
    assert len(lines) == 1, lines  # once per host and reason, then once per 30 s
    assert "from 127.0.0.2:" in lines[0] and "max.connections.per.ip 4" in lines[0], lines[0]


def test_a_connection_past_max_connections_is_closed_at_accept_but_a_voter_host_gets_in(
    tmp_path,
):
    """Past max.connections only the voters' hosts get in (as many more as there are voters):
    a flood from elsewhere cannot lock a voter out of the quorum."""

    async def main() -> None:
        async with one_node(tmp_path, max_connections=6, max_connections_per_ip=3) as node:
            held = [await connect(node, f"127.0.0.{2 + i // 3}") for i in range(6)]
            for reader, writer in held:
                assert await served(reader, writer)
            reader, _ = await connect(node, "127.0.0.9")
            assert await closed_within(reader, 2.0) is not None
            assert node.limits.refused["max_connections"] == 1
            assert await served(*await connect(node, "127.0.0.1"))  # the voter's host
            assert node.limits.open == 7

    run(main())


def test_connection_limits_count_by_host_and_release():
    limits = ConnectionLimits(3, 2, protected={"10.0.0.1"}, reserve=1)
    a = limits.admit(("10.0.0.2", 1))
    assert a == "10.0.0.2" and limits.admit(("10.0.0.2", 2)) == "10.0.0.2"
    assert limits.admit(("10.0.0.2", 3)) is None  # per IP
    assert limits.admit(("::ffff:10.0.0.3", 1, 0, 0)) == "10.0.0.3"  # IPv4-mapped is IPv4
    assert limits.admit(("10.0.0.4", 1)) is None  # in all
    assert limits.admit(("10.0.0.1", 1)) == "10.0.0.1"  # a voter's host, the reserve
    assert limits.admit(("10.0.0.1", 2)) is None  # the reserve is spent
    limits.release("10.0.0.2")
    assert limits.admit(("10.0.0.4", 1)) is None  # 4 open: the voter's reserve is still in use
    limits.release("10.0.0.1")
    assert limits.admit(("10.0.0.4", 1)) == "10.0.0.4"
    assert limits.by_host == {"10.0.0.2": 1, "10.0.0.3": 1, "10.0.0.4": 1}
    assert limits.refused == {"max_connections": 3, "max_connections_per_ip": 1}


# ---- timeouts --------------------------------------------------------------------------------


def test_a_connection_that_receives_and_sends_nothing_for_connections_max_idle_ms_is_closed(
    tmp_path,
):
    async def main() -> None:
        async with one_node(tmp_path, connections_max_idle_ms=400) as node:
            idle_reader, _ = await connect(node)
            busy_reader, busy_writer = await connect(node)
            started = time.monotonic()
            while time.monotonic() - started < 1.0:  # busy: a request every 100 ms
                assert await served(busy_reader, busy_writer)
                await asyncio.sleep(0.1)
            assert await closed_within(idle_reader, 0.1) is not None
            assert await served(busy_reader, busy_writer)
            assert node.timeouts.closed["idle"] == 1

    run(main())


def test_a_frame_that_does_not_arrive_whole_within_the_frame_receive_timeout_closes_its_connection(
    tmp_path,
):
    """A slowloris: a request a byte every 100 ms, at the node with a 500 ms frame receive
    timeout, is cut off after about 500 ms (one check period late at most), though bytes keep
    arriving and the connection is never idle."""

    async def main() -> None:
        async with one_node(tmp_path, frame_receive_timeout_ms=500) as node:
            reader, writer = await connect(node)
            closed = asyncio.ensure_future(closed_within(reader, 5.0))
            started = time.monotonic()
            sent = 0
            with contextlib.suppress(ConnectionError):
                for i in range(len(API_VERSIONS)):
                    if closed.done():
                        break
                    writer.write(API_VERSIONS[i : i + 1])
                    sent += 1
                    await asyncio.sleep(0.1)
            elapsed = await closed
            assert elapsed is not None, "the slow frame's connection was not closed"
            assert 0.45 < time.monotonic() - started < 0.9, time.monotonic() - started
            assert sent < len(API_VERSIONS)
            assert node.timeouts.closed["frame_timeout"] == 1
            assert await served(*await connect(node))  # a whole frame at once is served

    run(main())


@pytest.mark.slow
def test_a_sasl_connection_that_does_not_log_in_within_the_login_timeout_is_closed(tmp_path):
    from sasl_helpers import NODE_PASSWORD, USERS, users_file
    from test_sasl import Raw

    from raftcore.security.config import ListenerSecurity

    sec = ListenerSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_users_file=users_file(tmp_path),
        sasl_node_password=NODE_PASSWORD,
    )

    async def main() -> None:
        async with one_node(tmp_path, security=sec, login_timeout_ms=500) as node:
            lazy_reader, lazy_writer = await connect(node)
            assert await served(lazy_reader, lazy_writer)  # ApiVersions is allowed before it
            user = await Raw.open(node)
            await user.login_plain("alice", USERS["alice"])
            assert await closed_within(lazy_reader, 2.0) is not None
            await asyncio.sleep(0.5)
            assert await served(user.reader, user.writer)  # logged in: stays
            assert node.timeouts.closed["login_timeout"] == 1

    run(main())


def test_a_tls_handshake_must_complete_within_the_login_timeout(tmp_path):
    from raftcore.security.certs import make_certs
    from raftcore.security.config import ListenerSecurity

    make_certs(tmp_path / "tls", [1], clients=[])
    sec = ListenerSecurity(
        protocol="SSL",
        ssl_certfile=tmp_path / "tls" / "node-1.pem",
        ssl_keyfile=tmp_path / "tls" / "node-1.key",
        ssl_cafile=tmp_path / "tls" / "ca.pem",
    )

    async def main() -> None:
        async with one_node(tmp_path, security=sec, login_timeout_ms=400) as node:
            reader, _ = await connect(node)  # says nothing: no ClientHello
            elapsed = await closed_within(reader, 5.0)
            assert elapsed is not None and elapsed < 2.0, elapsed

    run(main())


class FakeConn:
    """What ConnectionTimeouts looks at."""

    def __init__(self) -> None:
        self.closed = False
        self.address = "10.0.0.5:4242"
        self.login_deadline: float | None = None
        self.done_login = False
        self.moves = 0
        self.frame: int | None = None

    def activity(self) -> int:
        return self.moves

    def logged_in(self) -> bool:
        return self.done_login

    def partial_frame(self) -> int | None:
        return self.frame

    def close(self, *, abort: bool = False) -> None:
        assert abort
        self.closed = True


def test_the_timeouts_count_from_the_last_change_they_saw():
    conns = [FakeConn() for _ in range(3)]
    idle, slow, login = conns
    login.login_deadline = 2.0
    t = ConnectionTimeouts(conns, idle_ms=10_000, login_ms=2_000, frame_ms=3_000)
    assert t.period_s == 0.5
    for now in (0.0, 1.0, 1.9):
        slow.frame = 0  # the same frame, still partial
        slow.moves += 1  # bytes keep coming
        login.moves += 1
        t.check(now)
    assert not any(c.closed for c in conns)
    t.check(2.0)
    assert login.closed and not slow.closed
    t.check(3.0)
    assert slow.closed and not idle.closed
    t.check(9.9)
    assert not idle.closed
    t.check(10.0)
    assert idle.closed
    assert t.closed == {"idle": 1, "login_timeout": 1, "frame_timeout": 1}
    a_login = FakeConn()
    a_login.login_deadline = 1.0
    a_login.done_login = True
    t = ConnectionTimeouts([a_login], idle_ms=10_000, login_ms=1_000, frame_ms=3_000)
    t.check(5.0)
    assert not a_login.closed and a_login.login_deadline is None


# ---- the request budget ----------------------------------------------------------------------


class Server:
    """ServerConnections (with ``budget``) whose handler waits for the event named by the
    request's first bytes (``wait:X``) and answers ``X``; ``now:X`` answers at once; a
    request ``big:N`` answers N bytes, as a view."""

    def __init__(self, budget: RequestBudget | None = None) -> None:
        self.budget = budget
        self.events: dict[bytes, asyncio.Event] = {}
        self.seen: list[bytes] = []
        self.connections: list[ServerConnection] = []
        self.ssl: ssl.SSLContext | None = None
        self.answer = memoryview(b"")

    def event(self, name: bytes) -> asyncio.Event:
        return self.events.setdefault(name, asyncio.Event())

    async def handle(self, conn: ServerConnection, request: Any) -> list[Any]:
        kind, _, name = bytes(request[:32]).partition(b":")
        name = name.rstrip(b"\x00")
        self.seen.append(name)
        if kind == b"wait":
            await self.event(name).wait()
        if kind == b"big":
            return [b"answer:", self.answer]
        return [name]

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection(reader, writer, self.handle, 64 << 20, "[test]", budget=self.budget)
        self.connections.append(conn)
        await conn.serve()


@contextlib.asynccontextmanager
async def listening(server: Server):  # type: ignore[no-untyped-def]
    listener = await asyncio.start_server(server.accept, "127.0.0.1", 0, ssl=server.ssl)
    try:
        yield listener.sockets[0].getsockname()[1]
    finally:
        for conn in server.connections:
            conn.close()
        listener.close()
        await listener.wait_closed()


def padded(text: bytes, size: int) -> bytes:
    return framed(text + b"\x00" * (size - len(text)))


def test_a_large_frame_starts_while_the_budget_has_room_and_otherwise_waits_for_an_answer():
    """Kafka's MemoryPool: a frame may start while any room is left (the node then holds at
    most the budget plus one frame); the next large one waits, its connection not read, until
    an answer gives bytes back. Small frames are never made to wait."""

    async def main() -> None:
        budget = RequestBudget(1 << 20)
        server = Server(budget)
        async with listening(server) as port:
            clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
            for name, (_, writer) in zip((b"a", b"b", b"c"), clients, strict=False):
                writer.write(padded(b"wait:" + name, 800_000))
                await asyncio.sleep(0.2)
            assert server.seen == [b"a", b"b"]  # c waits: 1.6 MB taken, over the budget
            assert budget.used == 1_600_000 and budget.waiting == 1
            waiting = server.connections[2]
            assert not waiting.writer.transport.is_reading()
            small_reader, small_writer = clients[3]
            small_writer.write(framed(b"now:small"))
            assert await asyncio.wait_for(read_frame(small_reader, 1 << 20), 5) == b"small"
            server.event(b"a").set()
            assert await asyncio.wait_for(read_frame(clients[0][0], 1 << 20), 5) == b"a"
            await asyncio.sleep(0.1)
            assert server.seen[-1] == b"c" and budget.waiting == 0
            server.event(b"b").set()
            server.event(b"c").set()
            for reader, _ in clients[1:3]:
                await asyncio.wait_for(read_frame(reader, 1 << 20), 5)
            assert budget.used == 0
            for _, writer in clients:
                writer.close()

    run(main())


def test_a_closed_connection_gives_its_request_bytes_back_to_the_budget():
    async def main() -> None:
        budget = RequestBudget(1 << 20)
        server = Server(budget)
        async with listening(server) as port:
            _, holder = await asyncio.open_connection("127.0.0.1", port)
            holder.write(padded(b"wait:held", 900_000))  # handled, never answered
            _, partial = await asyncio.open_connection("127.0.0.1", port)
            partial.write(padded(b"x", 900_000)[:500_000])  # half a frame
            await asyncio.sleep(0.2)
            assert budget.used == 1_800_000
            holder.close()
            partial.close()
            await asyncio.sleep(0.2)
            assert budget.used == 0

    run(main())


# ---- buffers of closed connections -----------------------------------------------------------


# ---- closing for a bound -----------------------------------------------------------------------


def test_closing_for_a_bound_drops_what_a_non_reading_client_was_sent():
    """A connection closed for a timeout or a limit is aborted: the transport's buffer goes
    with it, rather than wait for a client that does not read."""

    async def main() -> None:
        server = Server()
        server.answer = memoryview(b"z" * (16 << 20))
        async with listening(server) as port:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(framed(b"big:"))
            await asyncio.sleep(0.3)
            (conn,) = server.connections
            transport = conn.writer.transport
            assert transport.get_write_buffer_size() > 0
            conn.close(abort=True)
            await asyncio.sleep(0.05)
            assert transport.get_write_buffer_size() == 0
            writer.close()

    run(main())
