"""How frames are received (raftcore.protocol.framing, raftcore.node.transport): a BufferedProtocol
cuts the byte stream into frames wherever the reads split it; a large frame is received into a
buffer of its own and handed out without a copy; a size over the limit ends the connection
before anything is allocated; a server connection stops reading while it holds
``max_in_flight`` unanswered requests and answers in request order; TLS connections and
bytes the stream had already received when the framer took over are served the same; a closed
connection's buffers are freed at once, without the cyclic GC; a large answer is written in
pieces (raftcore.node.answer_writer)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import mmap
import ssl
import struct
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from waits import until

from raftcore.node.answer_writer import PIECE_BYTES, frame_pieces
from raftcore.node.transport import ServerConnection, read_frame
from raftcore.protocol.framing import FrameReceiver, FrameTooLarge

pytestmark = pytest.mark.timeout(60)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True
        self.closed = False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True


class Received:
    """A FrameReceiver on a fake transport, and what it handed out."""

    def __init__(self, limit: int = 1 << 20, large_frame: int = 16) -> None:
        self.frames: list[Any] = []
        self.lost: list[BaseException | None] = []
        self.receiver = FrameReceiver(
            self.frames.append, limit, self.lost.append, large_frame=large_frame
        )
        self.transport = FakeTransport()
        self.receiver.connection_made(self.transport)

    def receive(self, data: bytes) -> None:
        """What a transport does: fill what get_buffer offers, as many times as needed."""
        view = memoryview(data)
        while view:
            buf = self.receiver.get_buffer(-1)
            assert len(buf) > 0
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            self.receiver.buffer_updated(n)
            view = view[n:]


# small (under 16 bytes) and large (16 and more) frames for a receiver with large_frame=16
PAYLOADS = [b"", b"a", b"small one", bytes(range(15)), bytes(range(16)), b"x" * 40, b"tail"]
STREAM = b"".join(framed(p) for p in PAYLOADS)


def test_frames_split_at_every_byte_boundary_are_delivered_whole_and_in_order():
    for cut in range(len(STREAM) + 1):
        r = Received()
        r.receive(STREAM[:cut])
        r.receive(STREAM[cut:])
        assert [bytes(f) for f in r.frames] == PAYLOADS, f"cut at byte {cut}"
        assert not r.lost


def test_frames_arriving_one_byte_per_read_are_delivered_whole_and_in_order():
    r = Received()
    for i in range(len(STREAM)):
        r.receive(STREAM[i : i + 1])
    assert [bytes(f) for f in r.frames] == PAYLOADS


def test_many_frames_in_one_read_are_all_delivered():
    payloads = [f"frame {i}".encode() * (i % 7) for i in range(500)]
    r = Received(large_frame=64 * 1024)
    r.receive(b"".join(framed(p) for p in payloads))
    assert r.frames == payloads


def test_a_large_frame_is_received_into_its_own_buffer_and_handed_out_uncopied():
    """After the read that carried its size, get_buffer offers the rest of the frame's own
    buffer: the kernel writes the records there, and a view of that very buffer is handed
    out."""
    payload = bytes(range(256)) * 1024  # 256 KiB
    r = Received(large_frame=64 * 1024)
    data = framed(payload)
    r.receive(data[:1000])
    buf = r.receiver.get_buffer(-1)
    assert len(buf) == len(payload) - 996  # exactly the rest of this frame
    target = buf.obj
    r.receive(data[1000:])
    [frame] = r.frames
    assert isinstance(frame, memoryview) and frame.obj is target
    assert frame == payload


def test_a_frame_over_the_limit_closes_the_connection_before_allocating():
    r = Received(limit=1 << 20)
    tracemalloc.start()
    try:
        r.receive(struct.pack(">i", 512 << 20) + b"abc")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert r.transport.closed
    [exc] = r.lost
    assert isinstance(exc, FrameTooLarge)
    assert "frame of 536870912 bytes (limit 1048576)" in str(exc)
    assert r.frames == []


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def test_a_large_frame_announced_but_not_sent_takes_no_memory_until_its_bytes_arrive():
    """A hostile client may announce frames up to the limit and send nothing more: the
    frame's buffer must not be zeroed (touched) up front."""
    r = Received(limit=256 << 20, large_frame=64 * 1024)
    before = _resident_bytes()
    r.receive(struct.pack(">i", 128 << 20) + b"x" * 100)
    assert _resident_bytes() - before < 16 << 20
    assert not r.lost and r.frames == []


def test_a_tls_handshake_on_a_plaintext_connection_is_named_in_the_refusal():
    r = Received(limit=1 << 20)
    r.receive(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    [exc] = r.lost
    assert "a TLS handshake" in str(exc)


def test_the_limit_may_be_a_function_asked_for_each_frame():
    limits = [100, 5]
    frames: list[Any] = []
    lost: list[BaseException | None] = []
    receiver = FrameReceiver(frames.append, lambda: limits[0], lost.append)
    receiver.connection_made(FakeTransport())
    receiver.feed(framed(b"0123456789"))
    limits[0] = 5  # a SASL login lowered it
    receiver.feed(framed(b"0123456789"))
    assert frames == [b"0123456789"]
    assert isinstance(lost[0], FrameTooLarge)


def test_a_paused_receiver_hands_out_nothing_until_resumed_then_everything_in_order():
    r = Received()
    r.receiver.pause()
    assert not r.transport.reading
    r.receive(STREAM)
    assert r.frames == []
    r.receiver.resume()
    assert r.transport.reading
    assert [bytes(f) for f in r.frames] == PAYLOADS


# ---- server connections over loopback ----------------------------------------------------------


class Server:
    """ServerConnections whose handler answers b"now:X" with X at once, waits for the event
    of X before answering b"wait:X", answers b"big:" with b"answer:" and ``answer`` (a view),
    and any other request with its length and SHA-256."""

    def __init__(self, *, max_in_flight: int = 64, accept_delay: float = 0.0) -> None:
        self.max_in_flight = max_in_flight
        self.accept_delay = accept_delay
        self.events: dict[bytes, asyncio.Event] = {}
        self.seen: list[bytes] = []
        self.connections: list[ServerConnection] = []
        self.ssl: ssl.SSLContext | None = None
        self.answer = memoryview(b"")

    def event(self, name: bytes) -> asyncio.Event:
        return self.events.setdefault(name, asyncio.Event())

    async def handle(self, conn: ServerConnection, request: Any) -> list[Any]:
        kind, _, name = bytes(request[:64]).partition(b":")
        if kind == b"wait":
            self.seen.append(name)
            await self.event(name).wait()
            return [name]
        if kind == b"now":
            self.seen.append(name)
            return [name]
        if kind == b"big":
            return [b"answer:", self.answer]
        return [f"{len(request)} {hashlib.sha256(request).hexdigest()}".encode()]

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.accept_delay:
            await asyncio.sleep(self.accept_delay)  # the client's bytes wait in the stream
        conn = ServerConnection(
            reader, writer, self.handle, 64 << 20, "[test]", max_in_flight=self.max_in_flight
        )
        self.connections.append(conn)
        await conn.serve()


@contextlib.asynccontextmanager
async def connected(server: Server, client_ssl: ssl.SSLContext | None = None):  # type: ignore[no-untyped-def]
    listener = await asyncio.start_server(server.accept, "127.0.0.1", 0, ssl=server.ssl)
    port = listener.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_ssl, server_hostname="localhost" if client_ssl else None
    )
    try:
        yield reader, writer
    finally:
        writer.close()
        listener.close()
        await listener.wait_closed()


async def answers(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    return [await asyncio.wait_for(read_frame(reader, 1 << 20), 10) for _ in range(n)]


def test_with_max_in_flight_unanswered_requests_the_connection_stops_reading_until_answers_go():
    async def main() -> None:
        server = Server(max_in_flight=3)
        async with connected(server) as (reader, writer):
            writer.write(b"".join(framed(b"wait:%d" % i) for i in range(10)))
            await asyncio.sleep(0.2)
            conn = server.connections[0]
            assert server.seen == [b"0", b"1", b"2"]
            assert not conn.writer.transport.is_reading()
            server.event(b"0").set()
            assert await answers(reader, 1) == [b"0"]
            await asyncio.sleep(0.1)
            assert server.seen == [b"0", b"1", b"2", b"3"]  # room for one more
            for i in range(10):
                server.event(b"%d" % i).set()
            assert await answers(reader, 9) == [b"%d" % i for i in range(1, 10)]
            assert conn.writer.transport.is_reading()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_answers_go_out_in_request_order_when_handlers_finish_out_of_order():
    async def main() -> None:
        server = Server()
        async with connected(server) as (reader, writer):
            names = [b"%d" % i for i in range(6)]
            writer.write(b"".join(framed(b"wait:" + n) for n in names) + framed(b"now:last"))
            await asyncio.sleep(0.1)
            for n in reversed(names):
                server.event(n).set()
                await asyncio.sleep(0.01)
            assert await answers(reader, 7) == [*names, b"last"]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_bytes_received_before_the_framer_took_over_are_served():
    """TLS or a SASL login run on the streams first: what the stream already holds then is
    handed to the framer, not lost."""

    async def main() -> None:
        server = Server(accept_delay=0.2)
        async with connected(server) as (reader, writer):
            writer.write(b"".join(framed(b"now:%d" % i) for i in range(3)))
            assert await answers(reader, 3) == [b"0", b"1", b"2"]

    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    from raftcore.security.certs import make_certs

    d = tmp_path_factory.mktemp("tls")
    make_certs(d, [1], clients=[])
    return d


@pytest.mark.parametrize("use_tls", [False, True], ids=["plaintext", "tls"])
def test_large_and_small_frames_arrive_whole_and_identical_over_plaintext_and_tls(use_tls, certs):
    async def main() -> None:
        server = Server()
        client_ssl = None
        if use_tls:
            server.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server.ssl.load_cert_chain(certs / "node-1.pem", certs / "node-1.key")
            client_ssl = ssl.create_default_context(cafile=str(certs / "ca.pem"))
            client_ssl.check_hostname = False
        payloads = [
            bytes([i % 251]) * size
            for i, size in enumerate([10, 3 << 20, 70_000, 60_000, 65_535, 5])
        ]
        async with connected(server, client_ssl) as (reader, writer):
            for p in payloads:
                writer.write(framed(p))
            got = await answers(reader, len(payloads))
        assert got == [f"{len(p)} {hashlib.sha256(p).hexdigest()}".encode() for p in payloads]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_follower_appends_the_records_of_a_large_fetch_response_from_its_receive_buffer(
    tmp_path,
):
    """The records of a fetch response of 64 KiB or more reach the follower's log append as a
    view of the buffer the response was received into: no copy on the way."""
    from test_node import cluster, leader_of, run

    from raftcore.protocol.framing import LARGE_FRAME
    from raftcore.records import encode_batch

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            log = follower.core.log
            seen: list[Any] = []
            append = log.append_as_follower

            def spy(records: Any, **kwargs: Any) -> Any:
                seen.append(records)
                return append(records, **kwargs)

            log.append_as_follower = spy
            batch = encode_batch([(None, b"v" * 1000)] * 200, base_offset=0, leader_epoch=0)
            leader.append_batches(batch, track=False)
            end = leader.core.log.end_offset
            for _ in range(500):
                if log.end_offset >= end:
                    break
                await asyncio.sleep(0.01)
            assert log.end_offset >= end
            large = [r for r in seen if len(r) >= LARGE_FRAME]
            assert large, "no large fetch response reached the follower"
            for records in large:
                assert isinstance(records, memoryview)
                assert isinstance(records.obj, np.ndarray)  # the frame's own receive buffer

    run(main())


def test_a_client_fetch_gets_the_records_of_a_large_response_as_a_view_of_its_receive_buffer(
    tmp_path,
):
    from test_node import cluster, leader_of, run

    from raftcore.client.connection import Connection
    from raftcore.protocol.api import ApiKey, request_spec
    from raftcore.records import encode_batch

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            batch = encode_batch([(None, b"v" * 1000)] * 200, base_offset=0, leader_epoch=0)
            await leader.wait_committed(leader.append_batches(batch), 10)
            cls = request_spec(ApiKey.FETCH).cls
            body = cls(
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=1,
                topics=[
                    cls.FetchTopic(
                        topic_id=leader.config.topic_id,
                        partitions=[
                            cls.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            ep = leader.config.listen
            conn = await Connection.open(ep.host, ep.port)
            try:
                resp = await conn.request(ApiKey.FETCH, 16, body, timeout_s=10)
            finally:
                await conn.close()
            records = resp.responses[0].partitions[0].records
            assert len(records) >= 200_000
            assert isinstance(records, memoryview)
            assert isinstance(records.obj, np.ndarray)  # the response's own receive buffer

    run(main())


# ---- a closed connection's buffers -------------------------------------------------------------


@pytest.fixture
def no_cyclic_gc():  # type: ignore[no-untyped-def]
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_closed_connection_frees_its_frame_buffers_without_the_cyclic_gc(no_cyclic_gc):
    """The buffer of a frame half received, and of one whose request was being handled, go
    with their connection, and so does the connection itself: nothing waits for the cyclic
    garbage collector (which ran seldom enough that 1.47 GiB of closed connections' frames
    stayed resident)."""

    async def main() -> None:
        server = Server()
        async with connected(server) as (_, writer):
            writer.write(framed(b"x" * (8 << 20))[: 3 << 20])  # 3 of 8 MiB
            await asyncio.sleep(0.3)
            async with connected(server) as (_, writer2):
                writer2.write(framed(b"wait:handled" + b"\x00" * (4 << 20)))
                await asyncio.sleep(0.3)
            partial_conn, handled_conn = server.connections
            connections = [weakref.ref(c) for c in server.connections]
            big = partial_conn._receiver._big
            assert big is not None
            partial_buffer = weakref.ref(big.obj)
            del big
            handled = [weakref.ref(t) for t in handled_conn._tasks]
            assert handled, "the waiting request has no task"
        deadline = time.monotonic() + 5
        while not (partial_conn.closed and handled_conn.closed):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        # the transports' connection_lost callbacks let go of the buffer and the task
        await until(
            lambda: partial_buffer() is None and all(t() is None for t in handled),
            10,
            "the closed connections' partial buffer and cancelled request to be let go",
            last=lambda: gc.get_referrers(partial_buffer()) if partial_buffer() else "a task",
        )
        assert partial_buffer() is None, gc.get_referrers(partial_buffer())
        assert all(t() is None for t in handled), "the cancelled request is still held"
        server.connections.clear()
        del partial_conn, handled_conn
        assert [c() for c in connections] == [None, None], "a closed connection is held"

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_closed_tls_connection_frees_its_receiver_and_tls_buffers_without_the_cyclic_gc(
    no_cyclic_gc, certs
):
    """asyncio's TLS protocol keeps the receiver's get_buffer and buffer_updated after the
    connection ends (Python 3.11), and the receiver kept its transport: each closed TLS
    connection was a cycle holding its 256 KiB TLS read buffer, OpenSSL's buffers and its
    receiver until the cyclic garbage collector ran. 200 unauthenticated connections, each
    sending most of a 512 KiB frame and closed by the login timeout, left about 120 MiB
    resident. Closed by the node (a bound aborts it) or by the client: nothing is left."""

    async def main() -> None:
        server = Server()
        server.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.ssl.load_cert_chain(certs / "node-1.pem", certs / "node-1.key")
        client_ssl = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        client_ssl.check_hostname = False
        held = []
        for closed_by in ("node", "client"):
            async with connected(server, client_ssl) as (reader, writer):
                writer.write(framed(b"x" * (512 << 10))[: 300 << 10])  # most of a frame
                deadline = time.monotonic() + 5
                while not server.connections or server.connections[-1]._receiver.received < (
                    300 << 10
                ):
                    assert time.monotonic() < deadline, "the frame's bytes did not arrive"
                    await asyncio.sleep(0.01)
                conn = server.connections[-1]
                held.append(
                    (
                        closed_by,
                        weakref.ref(conn._receiver),
                        weakref.ref(conn.writer.transport._ssl_protocol),  # type: ignore[attr-defined]
                    )
                )
                if closed_by == "node":
                    conn.close(abort=True)
                    assert await asyncio.wait_for(reader.read(), 5) == b""
                del conn
            deadline = time.monotonic() + 5
            while not server.connections[-1]._receiver.lost:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the transports' connection_lost callbacks
        server.connections.clear()
        left = [(by, r() is not None, p() is not None) for by, r, p in held]
        assert left == [("node", False, False), ("client", False, False)], left

    asyncio.run(asyncio.wait_for(main(), 30))


# ---- answers written in pieces -----------------------------------------------------------------


def test_frame_pieces_cut_large_parts_into_views_and_join_only_small_runs():
    source = bytes(range(256)) * 4096  # 1 MiB
    parts = [b"head", memoryview(source), b"mid" * 10, b"x" * 100_000, b"tail"]
    size = sum(len(p) for p in parts)
    pieces = list(frame_pieces(parts, size))
    assert b"".join(pieces) == struct.pack(">i", size) + b"".join(bytes(p) for p in parts)
    assert all(len(p) <= PIECE_BYTES for p in pieces)
    views = [p for p in pieces if isinstance(p, memoryview)]
    assert sum(len(v) for v in views) == len(source) + 100_000
    assert all(v.obj is source for v in views[:4])  # the records, never copied


def held_for_writing(transport: Any) -> int:
    """Bytes a server transport holds for sending: the TLS layer's (plaintext waiting and
    ciphertext in its BIO) and the socket transport's below it."""
    protocol = getattr(transport, "_ssl_protocol", None)
    if protocol is None:
        return transport.get_write_buffer_size()
    below = protocol._transport.get_write_buffer_size()
    return protocol._outgoing.pending + protocol._write_buffer_size + below


@pytest.mark.parametrize("use_tls", [False, True], ids=["plaintext", "tls"])
def test_a_large_answer_to_a_client_that_does_not_read_is_held_a_piece_at_a_time(use_tls, certs):
    """A 48 MiB answer (a view, as a Fetch's records are) to a client that reads nothing:
    the transports hold about a piece plus their high-water marks, not the answer (over TLS
    the whole answer was encrypted into the TLS layer's buffer, then copied into the socket
    transport's); once the client reads, all of it arrives intact."""

    async def main() -> None:
        server = Server()
        server.answer = memoryview(bytes(range(256)) * (48 << 12))  # 48 MiB
        client_ssl = None
        if use_tls:
            server.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server.ssl.load_cert_chain(certs / "node-1.pem", certs / "node-1.key")
            client_ssl = ssl.create_default_context(cafile=str(certs / "ca.pem"))
            client_ssl.check_hostname = False
        async with connected(server, client_ssl) as (reader, writer):
            writer.write(framed(b"big:"))
            await asyncio.sleep(0.5)
            (conn,) = server.connections
            held = held_for_writing(conn.writer.transport)
            assert held < 2 << 20, f"the server holds {held} bytes of a 48 MiB answer"
            answer = await asyncio.wait_for(read_frame(reader, 64 << 20), 20)
            expected = hashlib.sha256(b"answer:" + server.answer).hexdigest()
            assert hashlib.sha256(answer).hexdigest() == expected

    asyncio.run(asyncio.wait_for(main(), 30))
