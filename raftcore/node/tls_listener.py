"""The node's TLS listener: every accepted socket is wrapped in TLS before a byte is read.

Why not ``asyncio.start_server`` then ``StreamWriter.start_tls`` (what this replaced): the plain
transport starts reading as soon as the connection is accepted, and whatever it reads before
``start_tls`` runs lands in the StreamReader, out of the TLS layer's reach. A client sends its
ClientHello at once, so the handshake then waits for bytes that never come, until the client
gives up. On asyncio's own loop the handler usually runs first and the race is rarely lost; on
uvloop the ClientHello is read first almost every time (200 handshakes out of 200 stalled with
the client on the same loop; across processes, peers and clients took seconds to connect, and a
leader resigned for want of fetches).

Here each socket goes through ``loop.connect_accepted_socket(ssl=...)``, which puts TLS on it
before reading, on either loop. Why not ``asyncio.start_server(ssl=...)``: it drops a failed
handshake silently; here a failure is a WARNING naming the address and OpenSSL's reason, once
per client host and reason, then once per 30 s with the count of those not logged (librdkafka
retries a refused handshake every ~50 ms, a refused node every second).

A connection past ``max.connections`` or ``max.connections.per.ip``
(:class:`~raftcore.node.connection_limits.ConnectionLimits`) is closed before its handshake
starts (an idle TLS connection costs the node about 330 KiB); a handshake must complete within
the node's login timeout.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from raftcore.connect_errors import host_port
from raftcore.log_limit import RepeatLimiter
from raftcore.node.connection_limits import ConnectionLimits
from raftcore.security.config import Principal
from raftcore.security.tls import HANDSHAKE_TIMEOUT_S, principal_of

__all__ = ["TlsServer", "serve_tls"]

logger = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Principal], Awaitable[None]]

ACCEPT_ERROR_PAUSE_S = 0.1  # after an accept error (EMFILE...), before the next accept
HANDSHAKE_LOG_EVERY_S = 30.0  # per client host and reason


class TlsServer:
    """Accepts on ``sock``, runs each connection's TLS handshake, and hands the streams and the
    principal the certificate proved to ``handler``. ``close``/``is_serving``/``sockets`` as
    ``asyncio.Server`` has them. ``limits`` (if any) admits each connection before its
    handshake and is told when it ends."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        handler: Handler,
        prefix: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        limits: ConnectionLimits | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._sock = sock
        self._context = context
        self._handler = handler
        self._prefix = prefix
        self._limits = limits
        self._handshake_timeout_s = handshake_timeout_s
        self._failures = RepeatLimiter(HANDSHAKE_LOG_EVERY_S, clock=clock)
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._accepting is None else (self._sock,)

    def is_serving(self) -> bool:
        return self._accepting is not None and not self._accepting.done()

    def start(self) -> None:
        self._sock.setblocking(False)
        self._accepting = asyncio.ensure_future(self._accept_loop())

    def close(self) -> None:
        """Stop accepting (connections already served are the node's to close)."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._connections):  # handshakes still running
            task.cancel()
        self._sock.close()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(self._sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # out of file descriptors, say: go on after a pause
                logger.warning("%s accept failed: %s", self._prefix, exc)
                await asyncio.sleep(ACCEPT_ERROR_PAUSE_S)
                continue
            host = None
            if self._limits is not None:
                host = self._limits.admit(address)
                if host is None:  # past a cap: counted and logged
                    conn.close()
                    continue
            task = asyncio.ensure_future(self._serve(conn, address, host))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket, address: Any, host: str | None) -> None:
        try:
            await self._handshake_and_serve(conn, address)
        finally:
            if host is not None:
                assert self._limits is not None
                self._limits.release(host)

    async def _handshake_and_serve(self, conn: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                conn,
                ssl=self._context,
                ssl_handshake_timeout=self._handshake_timeout_s,
            )
        except (OSError, asyncio.TimeoutError, EOFError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            self._log_failure(address, reason)
            return  # the transport closed the socket, which it owned
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        principal = principal_of(transport.get_extra_info("peercert"))
        await self._handler(reader, writer, principal)

    def _log_failure(self, address: Any, reason: str) -> None:
        host = str(address[0]) if isinstance(address, tuple) and address else str(address)
        line = f"{self._prefix} TLS handshake failed from {host_port(address)}: {reason}"
        left_out = self._failures.admit((host, reason))
        if left_out is None:
            logger.debug("%s", line)
        else:
            logger.warning("%s%s", line, RepeatLimiter.since(left_out, host))


async def serve_tls(
    handler: Handler,
    context: ssl.SSLContext,
    prefix: str,
    *,
    sock: socket.socket | None = None,
    host: str | None = None,
    port: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    limits: ConnectionLimits | None = None,
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> TlsServer:
    """A started :class:`TlsServer` on ``sock`` (bound and listening), or on a new socket
    bound to ``host:port``."""
    if sock is None:
        sock = socket.create_server((host or "", port or 0))
    server = TlsServer(
        sock,
        context,
        handler,
        prefix,
        clock,
        limits=limits,
        handshake_timeout_s=handshake_timeout_s,
    )
    server.start()
    return server
