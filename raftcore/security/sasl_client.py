"""The client side of a SASL login (KIP-43, KIP-152): SaslHandshake v1, then SaslAuthenticate
v1 requests carrying PLAIN's one message or SCRAM's two (and the server's proof is checked).

:func:`login` speaks through any ``request(api_key, version, body)`` coroutine (the client's
:class:`~raftcore.client.connection.Connection`); :func:`raw_login` through a bare stream
pair (a node logging in to a peer before its connection carries raft requests). A refusal
raises :class:`SaslAuthenticationError`: ``authentication failed for user alice: ...``. It is
not retried: wrong credentials stay wrong (Kafka's clients treat it as fatal too).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, decode_response, encode_request, request_spec
from raftcore.security.scram import ScramClient, ScramError
from raftcore.security.users import MECHANISMS

__all__ = ["SaslAuthenticationError", "login", "raw_login"]

HANDSHAKE_VERSION = 1  # v1: tokens in SaslAuthenticate (v0's raw tokens are not spoken)
AUTHENTICATE_VERSION = 1
_SIZE = struct.Struct(">i")

Request = Callable[[int, int, Any], Awaitable[Any]]


class SaslAuthenticationError(RaftcoreError):
    """The server refused the login (or the client refused the server's SCRAM proof)."""


async def login(request: Request, mechanism: str, username: str, password: str) -> None:
    """Log in as ``username``; SaslAuthenticationError when refused."""

    def failed(why: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(f"authentication failed for user {username}: {why}")

    if not mechanism:
        raise failed(
            "no SASL mechanism given (sasl.mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
        )
    if mechanism not in MECHANISMS:
        raise failed(f"unknown SASL mechanism {mechanism!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    if not username or password is None:
        raise failed("a username and a password are needed (sasl.username, sasl.password)")
    hs_cls = request_spec(ApiKey.SASL_HANDSHAKE).cls
    hs = await request(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, hs_cls(mechanism=mechanism))
    if hs.error_code == Errors.UNSUPPORTED_SASL_MECHANISM:
        raise failed(
            f"the server does not offer {mechanism} "
            f"(it offers {', '.join(hs.mechanisms) or 'none'})"
        )
    if hs.error_code != Errors.NONE:
        raise failed(f"SaslHandshake answered {error_name(hs.error_code)}")
    auth_cls = request_spec(ApiKey.SASL_AUTHENTICATE).cls

    async def authenticate(token: bytes) -> bytes:
        resp = await request(
            ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, auth_cls(auth_bytes=token)
        )
        if resp.error_code != Errors.NONE:
            raise failed(resp.error_message or error_name(resp.error_code))
        return bytes(resp.auth_bytes)

    if mechanism == "PLAIN":
        await authenticate(b"\x00" + username.encode() + b"\x00" + password.encode())
        return
    scram = ScramClient(mechanism, username, password)
    try:
        server_first = await authenticate(scram.first())
        server_final = await authenticate(scram.final(server_first))
        scram.verify(server_final)
    except ScramError as exc:
        raise failed(str(exc)) from None


async def raw_login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    mechanism: str,
    username: str,
    password: str,
    *,
    client_id: str = "raftcore-node",
    max_frame_bytes: int = 1 << 20,
) -> None:
    """:func:`login` over a fresh connection nothing else uses yet: one request at a time."""
    ids = itertools.count(1)

    async def request(key: int, version: int, body: Any) -> Any:
        cid = next(ids)
        frame = encode_request(key, version, cid, client_id, body)
        writer.write(_SIZE.pack(len(frame)) + frame)
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 4 <= size <= max_frame_bytes:
            raise ConnectionError(f"bad frame size {size} during the SASL login")
        got, answer = decode_response(key, version, await reader.readexactly(size))
        if got != cid:
            raise ConnectionError(f"answer {got} to request {cid} during the SASL login")
        return answer

    await login(request, mechanism, username, password)
