"""Security for the node and the client: TLS with mutual authentication between nodes, and SASL
(PLAIN, SCRAM-SHA-256/512) for clients.

- :mod:`raftcore.security.config`: what a listener requires (:class:`ListenerSecurity`, in a
  node's :class:`~raftcore.node.NodeConfig`) and what a client presents (:class:`ClientSecurity`),
  named after Kafka's settings (``security.protocol``, ``ssl.*``, ``sasl.*``).
- A connection's :class:`Principal` is who it proved to be: a node (a certificate signed by the
  cluster's CA that names ``node-<id>``), a user (a client certificate's name, or a SASL login), or
  nobody (:data:`ANONYMOUS`). Raft RPCs are answered only for the node whose id they claim.
"""

from __future__ import annotations

from raftcore.security.config import (
    ANONYMOUS,
    SECURITY_PROTOCOLS,
    ClientSecurity,
    ListenerSecurity,
    Principal,
)

__all__ = ["ANONYMOUS", "SECURITY_PROTOCOLS", "ClientSecurity", "ListenerSecurity", "Principal"]
