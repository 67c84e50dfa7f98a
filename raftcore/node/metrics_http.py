"""The node's Prometheus endpoint: ``GET /metrics`` over HTTP/1.x, served on the node's own
event loop.

Why not ``prometheus_client.start_http_server``: it serves from a thread of its own, and a
scrape runs the collectors there -- but the metrics that mirror the node's state read the Raft
core, which only the loop may touch (its dicts change under a reader on another thread). A
small asyncio handler reads them on the loop, between two steps of the core, and stops with
the node (``close``): no thread to join, no lock on the hot path. A scrape costs the loop the
time to render the text (about a millisecond).

One request per connection (``Connection: close``), as Prometheus is happy with. Anything but
``GET /metrics`` (or ``/``, which names the path) is answered 404 or 405.

Bounded: a request's head is at most ``MAX_HEAD_BYTES``, and must be complete within
``REQUEST_TIMEOUT_S`` of the accept (Prometheus sends it at once); the whole exchange takes at
most ``EXCHANGE_TIMEOUT_S``; at most ``MAX_CONNECTIONS`` connections are open at once, so that a
flood of scrapes (or of idle connections) holds neither memory nor the node's file descriptors,
which its Kafka listener needs. Idle connections cannot keep a scraper out: at the bound, the
oldest connection still waiting for its request is closed to make room for the new one; the new
one is refused (closed as it is accepted) only when every open connection is answering a
request, which takes no longer than writing one scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST

from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.node.preflight import ListenError, bind_listener

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["MetricsServer", "bind_metrics", "serve_metrics"]

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
REQUEST_TIMEOUT_S = 5.0  # from the accept to the request's last head byte
EXCHANGE_TIMEOUT_S = 10.0  # from the accept to the answer's last byte handed to the kernel
MAX_CONNECTIONS = 16  # Prometheus scrapes one at a time; a few more for people and probes
REQUEST_TIMEOUT, MADE_ROOM = "request_timeout", "made_room"  # why a connection was closed


def bind_metrics(config: NodeConfig) -> socket.socket | None:
    """The metrics socket, bound before the node writes anything (``raftcore node`` does
    this with its listener: a port in use must leave the data directory as it was);
    None without a metrics port. RaftcoreError, one line, when it cannot be bound."""
    if config.metrics_port is None:
        return None
    assert config.listen is not None
    host = config.metrics_host or config.listen.host
    try:
        return bind_listener(Endpoint(host, config.metrics_port))
    except ListenError as exc:
        reason = str(exc).rpartition(": ")[2]
        raise RaftcoreError(
            f"[node {config.node_id}] cannot serve metrics on {host}:{config.metrics_port}: "
            f"{reason[:1].upper()}{reason[1:]}"
        ) from None


async def serve_metrics(node: RaftNode) -> MetricsServer:
    """Serve the node's metrics where its config says (``metrics_host`` defaults to the listen
    host). A port in use raises a one-line error (the node's start then closes what it
    opened)."""
    cfg = node.config
    assert cfg.listen is not None and cfg.metrics_port is not None  # NodeConfig; the caller
    host = cfg.metrics_host or cfg.listen.host
    server = MetricsServer(node.metrics.text, node.prefix)
    try:
        node.metrics_address = await server.start(host, cfg.metrics_port, node.metrics_socket)
    except OSError as exc:
        raise RaftcoreError(
            f"{node.prefix} cannot serve metrics on {host}:{cfg.metrics_port}: "
            f"{os.strerror(exc.errno) if exc.errno else exc}"
        ) from None
    logger.info("%s metrics at http://%s:%d/metrics", node.prefix, *node.metrics_address)
    return server


class MetricsServer:
    """Serves ``render()`` (the exposition text) at ``/metrics``.

    Counted for the node's metrics: ``refused``, new connections closed as they were accepted
    (every open one answering a request); ``closed``, open connections closed before they sent
    a request, by reason: :data:`REQUEST_TIMEOUT` (none within ``request_timeout_s``) or
    :data:`MADE_ROOM` (the oldest such, for a new connection at the bound)."""

    def __init__(
        self,
        render: Callable[[], bytes],
        prefix: str = "",
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        exchange_timeout_s: float = EXCHANGE_TIMEOUT_S,
    ) -> None:
        self.render = render
        self.prefix = prefix
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.exchange_timeout_s = exchange_timeout_s
        self._server: asyncio.Server | None = None
        # the open connections counted against the bound, and those of them still waiting for
        # their request, oldest first (a dict keeps insertion order)
        self._handlers: set[asyncio.Task[None]] = set()
        self._waiting: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.refused = 0
        self.closed = {REQUEST_TIMEOUT: 0, MADE_ROOM: 0}

    async def start(
        self, host: str, port: int, sock: socket.socket | None = None
    ) -> tuple[str, int]:
        """Listen (on ``sock`` when it is bound already); the address bound (port 0 picks a
        free one). OSError if it cannot."""
        if sock is not None:
            self._server = await asyncio.start_server(self._serve, sock=sock, limit=MAX_HEAD_BYTES)
        else:
            self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD_BYTES)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def _make_room(self) -> bool:
        """At the bound: close the oldest connection that has not sent its request, and say
        whether there was one (its task ends on its own; it no longer counts from now)."""
        if not self._waiting:
            return False
        task, writer = next(iter(self._waiting.items()))
        del self._waiting[task]
        self._handlers.discard(task)
        self.closed[MADE_ROOM] += 1
        writer.transport.abort()  # its read ends at once; nothing was owed to it
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._handlers) >= self.max_connections and not self._make_room():
            self.refused += 1
            writer.close()  # every slot answering: no task, no buffer, the descriptor back
            return
        task = asyncio.current_task()
        assert task is not None  # start_server runs each connection in a task of its own
        self._handlers.add(task)
        self._waiting[task] = writer
        try:
            async with asyncio.timeout(self.exchange_timeout_s):
                try:
                    async with asyncio.timeout(self.request_timeout_s):
                        head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.TimeoutError:
                    self.closed[REQUEST_TIMEOUT] += 1
                    return
                if self._waiting.pop(task, None) is None:  # closed to make room meanwhile
                    return
                status, body, content_type = self._answer(head)
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
                    + body
                )
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.TimeoutError,
            ConnectionError,
        ):
            pass  # a client that went away or sent nonsense: nothing to answer
        except asyncio.CancelledError:
            pass  # the node stops
        finally:
            self._handlers.discard(task)
            self._waiting.pop(task, None)
            writer.close()

    def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        text = "text/plain; charset=utf-8"
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", b"bad request\n", text
        method, target = parts[0], parts[1].split("?", 1)[0]
        if target not in ("/metrics", "/"):
            return "404 Not Found", b"not found: the metrics are at /metrics\n", text
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n", text
        if target == "/":
            return "200 OK", b"raftcore node: metrics at /metrics\n", text
        try:
            body = self.render()
        except Exception:
            logger.exception("%s rendering the metrics failed", self.prefix)
            return "500 Internal Server Error", b"rendering the metrics failed\n", text
        return "200 OK", b"" if method == "HEAD" else body, CONTENT_TYPE_LATEST
