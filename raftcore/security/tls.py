"""TLS for the node's listener, its connections to the other voters, and the client.

- The listener (:func:`server_context`): TLS 1.2+, the node's certificate and key, and the
  cluster's CA for client certificates, asked for as ``ssl.client.auth`` says (``required``:
  a client without one fails the handshake; ``requested``: asked, not required; ``none``).
  The handshake runs in :mod:`raftcore.node.tls_listener`, before a byte is read, and a failure
  is one log line naming the address.
- Who a connection is (:func:`principal_of`): a certificate that names ``node-<id>`` (its
  subject CN, or a ``DNS:node-<id>`` subject alternative name) is that node; any other
  verified certificate is the user its CN names; no certificate is anonymous.
- Node to node (:class:`PeerTls`): the node presents its own certificate, verifies the peer's
  against the cluster's CA, and then checks that the certificate names ``node-<peer id>``. Host
  names are not checked (voters are addressed by IP): the node id in the certificate is the
  identity, checked after the handshake.
- A client (:func:`client_context`): the CA to verify the nodes with (or the system's), the
  host name checked as librdkafka does (``ssl.endpoint.identification.algorithm=https``), and a
  client certificate if given.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from pathlib import Path
from typing import Any

from raftcore.security.config import ANONYMOUS, ClientSecurity, ListenerSecurity, Principal

__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "PeerIdentityError",
    "PeerTls",
    "check_listener_security",
    "client_context",
    "node_name",
    "principal_of",
    "server_context",
]

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and says nothing is dropped after it
_NODE_NAME = re.compile(r"node-(\d+)")
_CLIENT_AUTH = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


def node_name(node_id: int) -> str:
    """The name a node's certificate carries (CN and ``DNS:`` SAN): ``node-<id>``."""
    return f"node-{node_id}"


class PeerIdentityError(ssl.SSLError):
    """A peer's certificate is valid but does not name the node it was expected to be."""


# ---- contexts ----------------------------------------------------------------------------------


def _load_chain(
    ctx: ssl.SSLContext, certfile: Path | None, keyfile: Path | None, what: str
) -> None:
    if certfile is None:
        return
    try:
        ctx.load_cert_chain(str(certfile), None if keyfile is None else str(keyfile))
    except FileNotFoundError as exc:
        raise ValueError(f"{what}: no such file: {exc.filename or certfile}") from None
    except ssl.SSLError as exc:
        key = f" and key {keyfile}" if keyfile is not None else ""
        raise ValueError(
            f"{what}: cannot use certificate {certfile}{key}: {exc.reason or exc} "
            "(is the key the certificate's, and are both PEM?)"
        ) from None


def _load_ca(ctx: ssl.SSLContext, cafile: Path | None, what: str) -> None:
    if cafile is None:
        return
    try:
        ctx.load_verify_locations(cafile=str(cafile))
    except FileNotFoundError:
        raise ValueError(f"{what}: no such file: {cafile}") from None
    except ssl.SSLError as exc:
        raise ValueError(f"{what}: cannot read CA {cafile}: {exc.reason or exc}") from None


def server_context(sec: ListenerSecurity) -> ssl.SSLContext:
    """The listener's context; ValueError (one line, naming the file) when a file is missing
    or the key does not match the certificate."""
    if sec.ssl_certfile is None:
        raise ValueError("an SSL listener needs a certificate (--ssl-certfile)")
    if sec.ssl_client_auth not in _CLIENT_AUTH:
        raise ValueError(
            f"ssl.client.auth must be required, requested or none, got {sec.ssl_client_auth!r}"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, sec.ssl_certfile, sec.ssl_keyfile, "the listener")
    if sec.ssl_client_auth != "none":
        if sec.ssl_cafile is None:
            raise ValueError(
                f"ssl.client.auth={sec.ssl_client_auth} needs the CA that signs client "
                "certificates (--ssl-cafile)"
            )
        _load_ca(ctx, sec.ssl_cafile, "the listener")
    ctx.verify_mode = _CLIENT_AUTH[sec.ssl_client_auth]
    return ctx


def peer_context(sec: ListenerSecurity) -> ssl.SSLContext:
    """The context of this node's connections to the other voters: its own certificate, the
    cluster's CA; the peer's node id is checked after the handshake (:class:`PeerTls`)."""
    if sec.ssl_cafile is None:
        raise ValueError("an SSL listener needs the cluster's CA (--ssl-cafile) to verify peers")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # voters are addressed by IP: the node id is checked instead
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_ca(ctx, sec.ssl_cafile, "peer connections")
    _load_chain(ctx, sec.ssl_certfile, sec.ssl_keyfile, "peer connections")
    return ctx


def client_context(sec: ClientSecurity) -> ssl.SSLContext:
    """A client's context: ``ssl_cafile`` (or the system's CAs), host name check as
    ``ssl_check_hostname`` says, and the client certificate if one is given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = sec.ssl_check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    if sec.ssl_cafile is not None:
        _load_ca(ctx, sec.ssl_cafile, "ssl.ca.location")
    else:
        ctx.load_default_certs()
    if sec.ssl_keyfile is not None and sec.ssl_certfile is None:
        raise ValueError("ssl.key.location needs ssl.certificate.location")
    _load_chain(ctx, sec.ssl_certfile, sec.ssl_keyfile, "ssl.certificate.location")
    return ctx


def check_listener_security(sec: ListenerSecurity, voters: int) -> None:
    """Everything wrong with a listener's TLS settings, before the node starts (ValueError,
    one line). On a TLS listener the voters prove who they are with their certificates, so a
    cluster of more than one voter needs ``ssl.client.auth`` required or requested."""
    if sec.protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"unknown security protocol {sec.protocol!r}")
    if not sec.uses_tls:
        given = [n for n in ("ssl_certfile", "ssl_keyfile", "ssl_cafile") if getattr(sec, n)]
        if given:
            raise ValueError(
                f"--{given[0].replace('_', '-')} given for a {sec.protocol} listener "
                "(use --listeners SSL://host:port)"
            )
        return
    server_context(sec)
    peer_context(sec)
    if voters > 1 and sec.ssl_client_auth == "none":
        raise ValueError(
            "ssl.client.auth=none on an SSL listener: the voters could not prove who they are "
            "to each other; use required (or requested, to let clients in without a certificate)"
        )


# ---- who a connection is -----------------------------------------------------------------------


def _names(cert: dict[str, Any]) -> tuple[str | None, list[str]]:
    cn = None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
    dns = [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
    return cn, dns


def principal_of(cert: dict[str, Any] | None) -> Principal:
    """The principal of a verified peer certificate (``getpeercert()``'s dict): the node its
    CN or a DNS SAN names as ``node-<id>`` (one id only: a certificate naming two nodes is
    neither), else the user its CN names; no certificate: :data:`ANONYMOUS`."""
    if not cert:
        return ANONYMOUS
    cn, dns = _names(cert)
    ids = {
        int(m.group(1))
        for name in [cn, *dns]
        if name is not None and (m := _NODE_NAME.fullmatch(name)) is not None
    }
    if len(ids) == 1:
        node_id = ids.pop()
        return Principal("node", node_name(node_id), node_id)
    return Principal("user", cn or (dns[0] if dns else "unknown"))


class PeerTls:
    """How this node opens its connection to node ``peer_id``: TLS with its own certificate,
    and the peer's certificate must name ``node-<peer_id>`` (any node's, for a bootstrap
    server: a negative id). A failure is logged once (until the next success or a different
    failure), naming the peer, and raised as an OSError, which the connection's reconnect loop
    handles like any other."""

    def __init__(self, context: ssl.SSLContext, peer_id: int, prefix: str) -> None:
        self.context = context
        self.peer_id = peer_id
        self.prefix = prefix
        self._last_failure: str | None = None

    async def open_connection(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=self.context,
                server_hostname=host,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
            )
        except ssl.SSLError as exc:
            self._failed(host, port, f"TLS handshake failed: {exc.reason or exc}")
            raise
        principal = principal_of(writer.get_extra_info("peercert"))
        # a bootstrap server (a negative id) is whichever node listens there: any node will do
        anyone = self.peer_id < 0 and principal.kind == "node"
        if principal.node_id != self.peer_id and not anyone:
            writer.close()
            wanted = "a node's" if self.peer_id < 0 else node_name(self.peer_id)
            reason = f"its certificate names {principal}, not {wanted}: refusing it"
            self._failed(host, port, reason)
            raise PeerIdentityError(reason)
        self._last_failure = None
        return reader, writer

    def _failed(self, host: str, port: int, reason: str) -> None:
        if reason != self._last_failure:
            self._last_failure = reason
            logger.warning("%s node %d at %s:%d: %s", self.prefix, self.peer_id, host, port, reason)
