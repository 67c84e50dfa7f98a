"""Which listener a connection came in on, and what may be asked there.

A node has one listener serving everything (the default), or two when it is given a node
listener (``NodeConfig.node_listen``, Kafka's ``controller.listener.names``): the node
listener carries the Raft RPCs between nodes, and the client listener (``listen``) Kafka's
client APIs. The rules, each owned here:

- A client listener refuses the Raft RPCs: Vote, BeginQuorumEpoch, EndQuorumEpoch,
  FetchSnapshot, UpdateRaftVoter, and a Fetch naming a replica (a consumer's names none). Kafka's
  broker listeners do not serve the controller's RPCs at all (they are left out of its
  ApiVersions, and a request for one closes the connection); here the request is answered
  CLUSTER_AUTHORIZATION_FAILED before it is decoded, so that a node whose ``--voters`` name a
  client listener by mistake says why. A refused replica Fetch never reaches the core: it is
  not served as a consumer's either, so it can never count toward the high watermark. Each
  refusal is logged once per connection, and once per client host and ``LOG_EVERY_S``.
- DescribeQuorum on a client listener leaves out the replicas' directory ids (the zero uuid)
  unless the caller is an administrator (``--admin-principals``): with a voter's directory id
  anyone reaching a node listener could speak for that voter. On the node listener, or the one
  shared listener, it is whole.
- A PLAINTEXT listener that carries Raft traffic (the node listener, or the shared one) bound
  to an address other than loopback is one WARNING at start: whoever reaches it can vote, start
  epochs and fetch as a follower (docs/security.md, "The node listener").
"""

from __future__ import annotations

import enum
import ipaddress
import logging
from typing import Any

from raftcore.connect_errors import host_port
from raftcore.error_codes import Errors
from raftcore.log_limit import RepeatLimiter
from raftcore.protocol.api import ApiKey, encode_response
from raftcore.protocol.error_answers import raft_error_response

__all__ = [
    "LOG_EVERY_S",
    "Role",
    "RaftRefusals",
    "open_node_listener_warning",
    "sees_directory_ids",
]

logger = logging.getLogger(__name__)

LOG_EVERY_S = 30.0  # a refusal per client host is logged at most this often


class Role(enum.Enum):
    """What a listener serves: everything (the one listener), the Raft RPCs and everything
    else (the node listener: it is whole), or clients only (the client listener)."""

    SHARED = "shared"
    NODE = "node"
    CLIENT = "client"


class RaftRefusals:
    """The refusals of Raft RPCs on a client listener, and their log lines, within bounds."""

    def __init__(self, prefix: str, every_s: float = LOG_EVERY_S) -> None:
        self.prefix = prefix
        self.refused = 0
        self._logged = RepeatLimiter(every_s)

    def refuse(self, conn: Any, header: Any) -> list[bytes | memoryview] | None:
        """The answer to a Raft RPC on ``conn``, when it came in on a client listener; else
        None (served)."""
        if getattr(conn, "listener_role", Role.SHARED) is not Role.CLIENT:
            return None
        self.refused += 1
        key = header.request_api_key
        self._log(conn, ApiKey(key).name)
        body = raft_error_response(key, Errors.CLUSTER_AUTHORIZATION_FAILED)
        return encode_response(key, header.request_api_version, header.correlation_id, body)

    def _log(self, conn: Any, what: str) -> None:
        if getattr(conn, "client_listener_refusal_logged", False):
            return
        conn.client_listener_refusal_logged = True
        peer = conn.peer
        host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        left_out = self._logged.admit(host)
        if left_out is None:
            return
        logger.warning(
            "%s refusing %s from %s: Raft RPCs are served on the node listener only, not on "
            "the client listener (CLUSTER_AUTHORIZATION_FAILED)%s",
            self.prefix,
            what,
            host_port(peer),
            RepeatLimiter.since(left_out, host),
        )


def sees_directory_ids(conn: Any, admin_principals: frozenset[str]) -> bool:
    """Does DescribeQuorum on ``conn`` name the replicas' directory ids? Everywhere but on a
    client listener, and there to administrators."""
    if getattr(conn, "listener_role", Role.SHARED) is not Role.CLIENT:
        return True
    return str(conn.principal) in admin_principals


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it resolves to whatever the network says


def open_node_listener_warning(config: Any) -> str | None:
    """The warning a node logs at start when its Raft traffic goes over PLAINTEXT on an address
    other than loopback (None: nothing to say)."""
    if config.security.protocol != "PLAINTEXT":
        return None
    separate = config.node_listen is not None
    address = config.node_listen if separate else config.listen
    if address is None or _is_loopback(address.host):
        return None
    which = "the node listener" if separate else "the listener (shared by clients and nodes)"
    advice = (
        "keep it on a network only the nodes reach, or use SSL or SASL_SSL"
        if separate
        else "give the nodes a listener of their own (--node-listen) on a network only they "
        "reach, or use SSL or SASL_SSL"
    )
    return (
        f"{which} {address} is PLAINTEXT on an address other than loopback: anyone who reaches "
        "it can vote, start or end epochs, and fetch as any follower, moving the high watermark "
        f"past records a majority does not hold (acknowledged records can then be lost); {advice} "
        '(docs/security.md, "The node listener")'
    )
