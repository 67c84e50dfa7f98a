"""What a listener requires and what a client presents, in Kafka's terms.

``security.protocol`` is one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (Kafka's
``SecurityProtocol``). Certificates and keys are PEM files (Kafka's ``ssl.keystore.type=PEM``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["ANONYMOUS", "SECURITY_PROTOCOLS", "ClientSecurity", "ListenerSecurity", "Principal"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection proved to be. ``kind``: ``"node"`` (``node_id`` set), ``"user"`` or
    ``"anonymous"``."""

    kind: str
    name: str
    node_id: int | None = None

    def __str__(self) -> str:
        return f"{'User' if self.kind != 'node' else 'Node'}:{self.name}"


ANONYMOUS = Principal("anonymous", "ANONYMOUS")


@dataclass(frozen=True)
class ListenerSecurity:
    """A node listener's security (Kafka: ``listeners=SSL://...``, ``ssl.keystore.location``,
    ``ssl.truststore.location``, ``ssl.client.auth``, ``sasl.enabled.mechanisms``).

    - ``protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
    - ``ssl_certfile`` / ``ssl_keyfile``: this node's certificate chain and private key (PEM);
    - ``ssl_cafile``: the cluster's CA (PEM): peers' and clients' certificates must chain to it;
    - ``ssl_client_auth``: ``required``, ``requested`` or ``none`` (Kafka's default);
    - ``sasl_mechanisms``: the mechanisms offered to clients on a SASL_* listener;
    - ``sasl_users_file``: the users and their credentials (see :mod:`raftcore.security.users`);
    - ``sasl_node_password``: this node's password on SASL_PLAINTEXT: it logs in to its peers'
      listeners as ``node-<id>`` with it (``raftcore users add-node`` writes one; a password
      shared by the nodes is still accepted for nodes without their own credentials, with a
      warning: :mod:`raftcore.security.sasl`). Never shown by ``repr``.
    """

    protocol: str = "PLAINTEXT"
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_cafile: Path | None = None
    ssl_client_auth: str = "none"
    sasl_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    sasl_users_file: Path | None = None
    sasl_node_password: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return _repr_hiding(self, "sasl_node_password")

    __str__ = __repr__

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    """What a client presents (librdkafka's names: ``security.protocol``, ``ssl.ca.location``,
    ``ssl.certificate.location``, ``ssl.key.location``, ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``)."""

    protocol: str = "PLAINTEXT"
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return _repr_hiding(self, "sasl_password")

    __str__ = __repr__

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _repr_hiding(obj: Any, secret: str) -> str:
    """The dataclass's repr with ``secret`` shown as ``'***'`` when set (never its value)."""
    parts = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == secret:
            if value is not None:
                parts.append(f"{f.name}='***'")
        else:
            parts.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"
