"""Why a connection attempt failed, in a user's words, and whether it failed at once.

``describe`` turns the exceptions of ``asyncio.open_connection`` (and of a request on a new
connection) into a short reason for messages such as
``cannot reach 127.0.0.1:9092 (connection refused)``. ``is_immediate`` tells a refusal (nothing
listens there, or no such host) from a silence (a timeout): a client whose every address
refuses can give up quickly, one that waits on a silent address needs its timeout.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import socket
import ssl

__all__ = ["describe", "host_port", "is_immediate"]

_IMMEDIATE = {
    errno.ECONNREFUSED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EADDRNOTAVAIL,
}
_ERRNO_TEXT = re.compile(r"\[Errno (-?\d+)\]")


def host_port(peer: object) -> str:
    """A socket address as ``host:port`` (a peername tuple's first two items), for log lines;
    anything else as its ``str``."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _errnos(exc: BaseException) -> list[int]:
    """The errno of ``exc``, or those of each attempt when asyncio tried several addresses
    (``OSError('Multiple exceptions: [Errno 111] ..., [Errno 111] ...')``, errno None)."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int):
        return [code]
    return [int(m) for m in _ERRNO_TEXT.findall(str(exc))]


def describe(exc: BaseException) -> str:
    """A short reason: ``connection refused``, ``timed out``, ``unknown host``, ..."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        # its errno is 1 for every OpenSSL error (strerror: "operation not permitted"), and
        # str() of one raised with a message is the repr of its arguments
        if getattr(exc, "reason", None):
            return f"TLS handshake failed: {exc.reason}"
        if len(exc.args) == 1 and isinstance(exc.args[0], str):
            return exc.args[0]
    text = str(exc)
    if text.startswith("cannot reach ") and text.endswith(")") and " (" in text:
        return text[text.index(" (") + 2 : -1]  # already says why (a TLS handshake)
    if _closed_unanswered(exc):
        # what a client that speaks plaintext to a TLS listener, or lacks the certificate it
        # requires, sees: the node closes the connection unanswered
        return (
            "the node closed the connection: does its listener want TLS, a client certificate "
            "or SASL? see --command-config"
        )
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror.lower()}" if exc.strerror else "unknown host"
    codes = _errnos(exc)
    if codes and all(c == errno.ECONNREFUSED for c in codes):
        return "connection refused"
    if codes and all(c == codes[0] for c in codes) and codes[0] > 0:
        return os.strerror(codes[0]).lower()
    return str(exc) or type(exc).__name__


def _closed_unanswered(exc: BaseException) -> bool:
    """The node closed the connection without answering (the client's ConnectionClosed)."""
    text = str(exc)
    return text.startswith("connection to ") and (" closed" in text or " lost" in text)


def _handshake_failed(exc: BaseException) -> bool:
    """The client's TLS handshake failed (``cannot reach H:P (TLS handshake failed: ...)``):
    an untrusted certificate, or a listener that does not speak TLS, fails the next one too."""
    return str(exc).startswith("cannot reach ") and "(TLS handshake failed: " in str(exc)


def is_immediate(exc: BaseException) -> bool:
    """True when the attempt failed at once and for a lasting reason: refused, no route, no
    such host, closed unanswered (a plaintext client at a TLS or SASL listener, a missing
    client certificate: the next attempt is closed too), or a failed TLS handshake. False for
    a timeout or a reset."""
    if isinstance(exc, socket.gaierror) or _closed_unanswered(exc) or _handshake_failed(exc):
        return True
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return False
    if not isinstance(exc, OSError) or isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return False
    codes = _errnos(exc)
    return bool(codes) and all(c in _IMMEDIATE for c in codes)
