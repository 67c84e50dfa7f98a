"""Kafka framing over asyncio TCP: a server whose connections answer in request order, and
persistent client connections to peers that reconnect with backoff.

A frame is a 4-byte big-endian size and that many bytes. A frame larger than the configured
maximum closes the connection (with a log line) before anything is allocated for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
import types
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from raftcore.connect_errors import host_port
from raftcore.node.answer_writer import PIECE_BYTES, frame_pieces, write_frame
from raftcore.node.listeners import Role
from raftcore.protocol.framing import FrameReceiver, FrameTooLarge, take_over, too_large
from raftcore.security.config import ANONYMOUS, Principal

if TYPE_CHECKING:
    from raftcore.node.connection_limits import RequestBudget
    from raftcore.security.tls import PeerTls

__all__ = [
    "FrameTooLarge",
    "Later",
    "PeerConnection",
    "ServerConnection",
    "read_frame",
    "write_frame",
]

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


async def read_frame(reader: asyncio.StreamReader, max_bytes: int | Callable[[], int]) -> bytes:
    """One frame's bytes (without the size). IncompleteReadError at end of stream.
    ``max_bytes`` may be a function, asked once the size is read (a limit a SASL login
    raises, :mod:`raftcore.security.sasl`)."""
    head = await reader.readexactly(4)
    (size,) = _SIZE.unpack(head)
    if callable(max_bytes):
        max_bytes = max_bytes()
    if size < 0 or size > max_bytes:
        raise too_large(head, size, max_bytes)
    return await reader.readexactly(size)


# a handler answers with the frame's parts, None (nothing to send: acks=0), or a Later
Handler = Callable[["ServerConnection", bytes], Awaitable[Any]]


MAX_IN_FLIGHT = 64  # requests read and not yet answered, per connection
# A connection closed with answers its client has not read yet is aborted after this long
# (what it had not sent is dropped): a client that stops reading cannot keep the buffer.
CLOSE_LINGER_S = 5.0


class ServerConnection:
    """An accepted connection. Each request is handed to ``handler`` at once (requests may be
    worked on concurrently), but responses go out strictly in request order, as Kafka clients
    expect. A handler returning None sends nothing (acks=0 produce).

    Backpressure bounds what one client can make the node hold (Kafka mutes a connection for
    the same reason): the next frame is not read while ``max_in_flight`` requests, or requests
    of more than ``max_frame_bytes`` in all, are unanswered; and no further answer is written
    while the transport holds more than its high-water mark of unsent bytes (a client that
    asks and never reads). Without it, a few hundred pipelined fetches of 60 bytes each held
    hundreds of MiB of answers in the node.

    :meth:`serve` hands the connection (opened with the streams API, TLS and all) over to a
    :class:`~raftcore.protocol.framing.FrameReceiver`: frames arrive by callback, a large one in a
    buffer of its own that nothing copies; not reading is ``pause_reading`` on the transport.

    The node's bounds (:mod:`raftcore.node.connection_limits`, ``connection_timeouts``):
    request bytes are counted in ``budget`` from a frame's start to its answer, and a large
    frame waits for room in it; an answer of :data:`PIECE_BYTES` or more is written a piece
    at a time while the transport is under its high-water mark
    (:mod:`raftcore.node.answer_writer`); :meth:`activity` and :meth:`partial_frame` tell the
    timeouts what moves, and ``login_deadline`` when a login must be done by.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: Handler,
        max_frame_bytes: int,
        name: str,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        budget: RequestBudget | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.peer = writer.get_extra_info("peername")
        # the client as the log names it: host:port (peername is a tuple)
        peer = self.peer
        self.address = host_port(peer)
        self.name = name
        # who the connection proved to be (a TLS certificate, a SASL login): raftcore.security
        self.principal: Principal = ANONYMOUS
        # the listener it came in on: what may be asked on it (raftcore.node.listeners)
        self.listener_role = Role.SHARED
        # (slot of the answer, size of the request), in request order
        self._order: deque[tuple[asyncio.Future[Any], int]] = deque()
        self._order_bytes = 0
        self._write_blocked = False  # waiting for the client to read what was written
        self._pieces: Iterator[bytes | memoryview] | None = None  # an answer being written
        self._written = 0  # answers and pieces handed to the transport
        self._tasks: set[asyncio.Future[None]] = set()
        self.closed = False
        self._budget = budget
        self._reserved = 0  # budget taken for large frames not handed to _on_frame yet
        self._receiver = FrameReceiver(
            self._on_frame,
            self._frame_limit,
            self._on_lost,
            on_writable=self._on_writable,
            admit=None if budget is None else self._admit_large,
        )
        self._ended: asyncio.Future[None] | None = None
        # when a login must be done by (time.monotonic), and who the connection was before
        self.login_deadline: float | None = None
        self._login_as: Principal | None = None

    async def serve(self) -> None:
        """Serve requests until the connection ends."""
        self._ended = asyncio.get_running_loop().create_future()
        try:
            if not self.closed:
                take_over(self.reader, self.writer, self._receiver)
            if not self.closed:
                await self._ended
        finally:
            self.close()

    def _frame_limit(self) -> int:
        return self.max_frame_bytes

    # ---- what the bounds look at ---------------------------------------------------------------

    def expect_login(self, deadline: float) -> None:
        """The connection must log in (its principal change) by ``deadline``."""
        self.login_deadline = deadline
        self._login_as = self.principal

    def logged_in(self) -> bool:
        # a completed login sets a new principal (raftcore.security.sasl)
        return self.principal is not self._login_as

    def activity(self) -> tuple[int, int, int]:
        """Changes whenever a byte is received or an answer goes out or drains."""
        transport = self.writer.transport
        return self._receiver.received, self._written, transport.get_write_buffer_size()

    def partial_frame(self) -> int | None:
        return self._receiver.partial_frame()

    def _admit_large(self, size: int) -> bool:
        assert self._budget is not None
        if self._budget.try_take(size, self._receiver.admit_again):
            self._reserved += size
            return True
        return False

    # ---- requests ------------------------------------------------------------------------------

    def _on_frame(self, frame: bytes | memoryview) -> None:
        if self.closed:
            return
        size = len(frame)
        budget = self._budget
        if budget is not None:
            if size >= self._receiver.large_frame:
                self._reserved -= size  # taken when it started
            else:
                budget.used += size  # a small frame is counted, never refused
        slot: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._order.append((slot, size))
        self._order_bytes += size
        self._start(frame, slot)
        if self._full() and not self.closed:
            self._receiver.pause()

    def _full(self) -> bool:
        return len(self._order) >= self.max_in_flight or self._order_bytes > self.max_frame_bytes

    def _on_lost(self, exc: BaseException | None) -> None:
        if isinstance(exc, FrameTooLarge):
            logger.warning("%s closing connection from %s: %s", self.name, self.address, exc)
        self.close()

    def _on_writable(self) -> None:
        self._write_blocked = False
        self._drain()

    def _start(self, frame: bytes | memoryview, slot: asyncio.Future[Any]) -> None:
        """Handle one request: run its handler at once, to its end when it never has to wait
        (most Raft requests: the core answers within the step), so that no task and no loop
        hop is spent on it; a handler that waits (a produce waiting for its commit, a parked
        fetch) goes on in a task of its own from where it stopped."""
        coro = self._run(frame, slot)
        try:
            blocked_on = coro.send(None)
        except StopIteration:
            return
        task = asyncio.ensure_future(self._go_on(coro, blocked_on))
        self._tasks.add(task)  # it forgets itself when done: no done-callback, no loop hop

    async def _go_on(self, coro: Any, blocked_on: Any) -> None:
        """Drive, inside a task, a request's coroutine that was started outside one."""
        try:
            await _resume(coro, blocked_on)
        finally:
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _run(self, frame: bytes | memoryview, slot: asyncio.Future[Any]) -> None:
        try:
            result = await self.handler(self, frame)
        except CloseConnection as exc:
            logger.warning("%s closing connection from %s: %s", self.name, self.address, exc)
            result = CLOSE
        except Exception:
            logger.exception(
                "%s request from %s failed; closing the connection", self.name, self.address
            )
            result = CLOSE
        if slot.done():
            pass
        elif isinstance(result, Later):
            result._attach(self, slot)
        else:
            slot.set_result(result)
        self._drain()

    def _drain(self) -> None:
        """Write the answers that are ready, in request order, until one is not ready or the
        client stops reading."""
        order = self._order
        while not self._write_blocked and not self.closed:
            if self._pieces is not None:
                self._write_pieces()
                continue
            if not order or not order[0][0].done():
                break
            slot, size = order.popleft()
            self._order_bytes -= size
            budget = self._budget
            if budget is not None:
                budget.used -= size
                if budget.waiters:
                    budget.wake()
            result = slot.result()
            if result is CLOSE:
                self.close()
                return
            last = getattr(result, "reason", None)  # AnswerThenClose (raftcore.security.sasl)
            if last is not None:
                level = result.log_level  # DEBUG when sasl logged it (once per 30 s per host)
                if result.parts is not None:  # None: closed unanswered (Kafka's rule for it)
                    write_frame(self.writer, result.parts)  # small: a login's refusal
                logger.log(
                    level, "%s closing connection from %s: %s", self.name, self.address, last
                )
                self.close()  # the transport still sends what was written
                return
            if result is not None:
                self._written += 1
                size = sum(len(p) for p in result)
                if size >= PIECE_BYTES:
                    self._pieces = frame_pieces(result, size)  # written at the loop's top
                    continue
                write_frame(self.writer, result, size)
                if self._receiver.writing_paused:  # over the high-water mark: resume_writing
                    self._write_blocked = True
        if self._receiver.paused and not self._full() and not self.closed:
            # after the writes: the frames it hands out may answer at once (a nested _drain)
            self._receiver.resume()

    def _write_pieces(self) -> None:
        """The next pieces of a large answer, until it is all written or the transport is
        over its high-water mark (then ``resume_writing`` goes on)."""
        pieces = self._pieces
        assert pieces is not None
        transport = self.writer.transport
        receiver = self._receiver
        for piece in pieces:
            if transport.is_closing():  # lost while writing: the rest has nowhere to go
                break
            transport.write(piece)
            self._written += 1
            if receiver.writing_paused:
                self._write_blocked = True
                return
        self._pieces = None

    def close(self, *, abort: bool = False) -> None:
        """Close the connection and stop the requests still being worked on: their answers
        could only go back on it (a long-poll fetch would otherwise wait out its MaxWaitMs
        for nobody). What a request already did (an append) stays done.

        With ``abort`` (a bound was broken), what was not sent yet is dropped at once; else
        it is sent first, for :data:`CLOSE_LINGER_S` at most."""
        if self.closed:
            return
        self.closed = True
        self._pieces = None
        for slot, _ in self._order:
            if not slot.done():
                slot.cancel()
        if self._budget is not None:
            self._budget.give_back(self._order_bytes + self._reserved)
            self._budget.forget(self._receiver.admit_again)
            self._reserved = 0
        self._order.clear()
        self._order_bytes = 0
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        transport = self.writer.transport
        if self._receiver.lost:  # the transport is gone already
            self.writer.close()
        elif abort:
            transport.abort()
        else:
            unsent = transport.get_write_buffer_size()
            self.writer.close()
            if unsent:
                asyncio.get_running_loop().call_later(CLOSE_LINGER_S, transport.abort)


@types.coroutine
def _resume(coro: Any, blocked_on: Any) -> Any:
    """A ``yield from`` whose first step has run already: hand the task what the coroutine is
    waiting on (a future), then pass the task's sends and throws (a cancellation) through."""
    value = blocked_on
    # What it waits for may be settled before the task's first step (a Produce whose group
    # was written at the end of the iteration it arrived in): go on now, not a loop hop later.
    while getattr(value, "_asyncio_future_blocking", False) and value.done():
        value._asyncio_future_blocking = False
        try:
            value = coro.send(None)
        except StopIteration as stop:
            return stop.value
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation: the coroutine decides what it means
            try:
                value = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                value = coro.send(sent)
            except StopIteration as stop:
                return stop.value


class Later:
    """A handler's answer that is not ready when the handler returns: whoever will have it
    calls :meth:`answer` (on the loop) with the frame's parts, and the connection writes it
    in its turn. No task waits for it (a parked fetch used to hold a task and cost the loop
    two or three task steps until its answer came)."""

    __slots__ = ("_conn", "_result", "_slot")

    def __init__(self) -> None:
        self._conn: ServerConnection | None = None
        self._slot: asyncio.Future[Any] | None = None
        self._result: Any = _NOT_YET

    def answer(self, result: Any) -> None:
        slot = self._slot
        if slot is None:  # answered before the handler returned
            self._result = result
        elif not slot.done():  # a closed connection cancelled its slots: nobody to tell
            slot.set_result(result)
            assert self._conn is not None
            self._conn._drain()

    def _attach(self, conn: ServerConnection, slot: asyncio.Future[Any]) -> None:
        if self._result is not _NOT_YET:
            slot.set_result(self._result)
        else:
            self._conn, self._slot = conn, slot


_NOT_YET: Any = object()


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (an unparseable or unsupported request)."""


CLOSE: Any = object()


class PeerConnection:
    """A persistent connection to another node, for the requests this node sends.

    ``send`` is fire-and-forget: it returns False when there is no connection (a reconnect is
    under way, with exponential backoff and jitter). Responses are handed to ``on_response``
    with the correlation id; what the connection loses, the sender's own request timeout
    handles. ``on_refused`` is told when a connection attempt is refused (nothing listens at
    the peer's address: its process is gone); ``on_connected`` each time a connection is up;
    ``on_failed`` after every failed attempt (:mod:`raftcore.node.peer_health` logs them).
    """

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        on_response: Callable[[int, bytes], None],
        *,
        on_refused: Callable[[], None] | None = None,
        on_connected: Callable[[], None] | None = None,
        on_failed: Callable[[BaseException], None] | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        backoff_ms: int = 50,
        backoff_max_ms: int = 1000,
        connect_timeout_s: float = 5.0,
        authenticate: Callable[[Any, Any], Awaitable[None]] | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.on_response = on_response
        self.on_refused = on_refused
        self.on_connected = on_connected
        self.on_failed = on_failed  # each failed connection attempt, with its exception
        self.max_frame_bytes = max_frame_bytes
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_s = connect_timeout_s
        self.authenticate = authenticate  # a SASL login on each new connection (or None)
        self.tls = tls  # TLS to the peer, which must prove it is the node we expect
        self._writer: asyncio.StreamWriter | None = None
        self._receiver: FrameReceiver | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._failures = 0
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stopped = True
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    @property
    def down(self) -> bool:
        """No connection now, and the last attempt to open one failed."""
        return self._failures > 0 and not self.connected.is_set()

    def send(self, parts: list[bytes | memoryview]) -> bool:
        writer = self._writer
        if writer is None or writer.is_closing():
            return False
        write_frame(writer, parts)
        return True

    async def _run(self) -> None:
        while not self._stopped:
            try:
                reader, writer = await asyncio.wait_for(
                    (self.tls.open_connection if self.tls else asyncio.open_connection)(
                        self.host, self.port
                    ),
                    self.connect_timeout_s,
                )
            except (OSError, asyncio.TimeoutError) as exc:
                if isinstance(exc, ConnectionRefusedError) and self.on_refused is not None:
                    self.on_refused()
                if self.on_failed is not None:
                    self.on_failed(exc)
                self._failures += 1
                delay = min(self.backoff_max_ms, self.backoff_ms * (2 ** min(self._failures, 10)))
                delay = delay * (0.5 + random.random() / 2)
                logger.debug(
                    "%s cannot reach %s:%d (%s); retrying in %d ms",
                    self.name,
                    self.host,
                    self.port,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay / 1000)
                continue
            if self.authenticate is not None and not await self._log_in(reader, writer):
                continue
            if self._stopped:  # stopped meanwhile: Python 3.11's wait_for can swallow the
                writer.close()  # cancellation when the connection completes at that moment
                return
            self._failures = 0
            self._writer = writer
            self.connected.set()
            if self.on_connected is not None:
                self.on_connected()
            ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

            def lost(exc: BaseException | None, ended: asyncio.Future[Any] = ended) -> None:
                if not ended.done():
                    ended.set_result(exc)

            receiver = self._receiver = FrameReceiver(self._on_frame, self.max_frame_bytes, lost)
            try:
                take_over(reader, writer, receiver)
                exc = await ended
                logger.debug(
                    "%s connection to %s:%d lost: %s", self.name, self.host, self.port, exc
                )
            finally:
                self.connected.clear()
                self._writer = None
                writer.close()
            if not self._stopped:
                await asyncio.sleep(self.backoff_ms / 1000)

    def _on_frame(self, frame: bytes | memoryview) -> None:
        """A response (by callback from the connection's FrameReceiver)."""
        if len(frame) < 4:
            if self._receiver is not None:
                self._receiver.fail(ConnectionError("response frame too short for a header"))
            return
        (correlation_id,) = _SIZE.unpack_from(frame)
        try:
            self.on_response(correlation_id, frame)
        except Exception:  # the handler's bug must not end this connection
            logger.exception(
                "%s handling a response from %s:%d failed", self.name, self.host, self.port
            )

    async def _log_in(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Run ``authenticate`` on a new connection; on failure close it, back off, say False."""
        assert self.authenticate is not None
        try:
            await asyncio.wait_for(self.authenticate(reader, writer), self.connect_timeout_s)
            return True
        except Exception as exc:  # refused, lost, timed out: try again later
            log = logger.warning if self._failures == 0 else logger.debug
            log("%s cannot log in to %s:%d: %s", self.name, self.host, self.port, exc)
            writer.close()
            self._failures += 1
            delay = min(self.backoff_max_ms, self.backoff_ms * (2 ** min(self._failures, 10)))
            await asyncio.sleep(delay * (0.5 + random.random() / 2) / 1000)
            return False
