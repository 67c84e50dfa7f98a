"""A client connection to one node: pipelined requests, responses matched by correlation id."""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl as ssl_module
import struct
from typing import Any

from raftcore.errors import RaftcoreError
from raftcore.protocol.api import decode_response, encode_request
from raftcore.protocol.framing import FrameReceiver, take_over
from raftcore.security.config import ClientSecurity

__all__ = ["Connection", "ConnectionClosed"]

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class ConnectionClosed(RaftcoreError, ConnectionError):
    pass


class Connection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "raftcore-client",
        max_frame_bytes: int = 100 * 1024 * 1024,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.ssl = ssl  # TLS (raftcore.security.tls.client_context), or None for PLAINTEXT
        self.port = port
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._ids = itertools.count(1)
        self._receiver: FrameReceiver | None = None  # responses, by callback
        self.closed = False

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        timeout_s: float = 5.0,
        security: ClientSecurity | None = None,
        **kw: Any,
    ) -> Connection:
        """A connection, logged in when ``security`` asks for SASL (SaslAuthenticationError,
        a RaftcoreError, when refused)."""
        conn = cls(host, port, **kw)
        try:
            conn._reader, conn._writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=conn.ssl), timeout_s
            )
        except (ssl_module.SSLError, ConnectionResetError) as exc:
            if conn.ssl is None:
                raise
            # the node's certificate, or a listener that does not speak TLS
            reason = getattr(exc, "reason", None) or "connection reset (is the listener SSL?)"
            raise ConnectionClosed(
                f"cannot reach {host}:{port} (TLS handshake failed: {reason})"
            ) from None
        conn._receiver = FrameReceiver(conn._on_frame, conn.max_frame_bytes, conn._on_lost)
        take_over(conn._reader, conn._writer, conn._receiver)
        if security is not None and security.uses_sasl:
            await conn._log_in(security, timeout_s)
        return conn

    async def _log_in(self, security: ClientSecurity, timeout_s: float) -> None:
        from raftcore.security.sasl_client import login

        try:
            await asyncio.wait_for(
                login(
                    self.request,
                    security.sasl_mechanism or "",
                    security.sasl_username or "",
                    security.sasl_password or "",
                ),
                max(timeout_s, 10.0),
            )
        except BaseException:
            await self.close()
            raise

    async def request(
        self,
        api_key: int,
        version: int,
        body: Any,
        *,
        timeout_s: float = 30.0,
        expect_response: bool = True,
    ) -> Any:
        if self.closed or self._writer is None:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} is closed")
        cid = next(self._ids)
        frame = encode_request(api_key, version, cid, self.client_id, body)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending[cid] = (fut, api_key, version)
        self._writer.write(_SIZE.pack(len(frame)) + frame)
        if not expect_response:
            return None
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(cid, None)

    def _on_frame(self, frame: bytes | memoryview) -> None:
        """A response (from the connection's FrameReceiver: a large one in its own buffer,
        its records decoded as views of it, uncopied)."""
        if len(frame) < 4:
            assert self._receiver is not None
            self._receiver.fail(ConnectionClosed(f"bad frame size {len(frame)}"))
            return
        (cid,) = _SIZE.unpack_from(frame)
        pending = self._pending.get(cid)
        if pending is None:
            return
        fut, api_key, version = pending
        try:
            _, body = decode_response(api_key, version, frame)
        except Exception as exc:  # a response we cannot read: fail that request
            if not fut.done():
                fut.set_exception(exc)
            return
        if not fut.done():
            fut.set_result(body)

    def _on_lost(self, exc: BaseException | None) -> None:
        if not self.closed:
            why = "the node closed it" if exc is None else exc
            self._fail(ConnectionClosed(f"connection to {self.host}:{self.port} lost: {why}"))

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        for fut, _, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        if not self.closed:
            self._fail(ConnectionClosed(f"connection to {self.host}:{self.port} closed"))
