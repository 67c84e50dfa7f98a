"""Who may send the Raft RPCs: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot,
UpdateRaftVoter and a replica's Fetch; and who may change the voter set (AddRaftVoter,
RemoveRaftVoter, TransferLeadership: :func:`refuse_unless_admin`).

On a TLS or SASL listener (SSL, SASL_PLAINTEXT, SASL_SSL) only a node may, and only for itself.
A connection is a node's when its certificate names ``node-<id>`` (SSL and SASL_SSL: there the
certificate is the only proof, a SASL login never makes a node), or when it logged in as
``node-<id>`` with that node's credentials (SASL_PLAINTEXT; :mod:`raftcore.security.sasl`).
The check has two steps, both here:

1. :func:`refuse_unless_node`, before the request is decoded: a connection that is not a node's
   (a user's certificate, no certificate, a user's login) is answered
   CLUSTER_AUTHORIZATION_FAILED whatever it sent, as Kafka checks the CLUSTER_ACTION permission
   before it reads the request.
2. :func:`refuse_unless_that_node`, once the request is decoded: the node must be the one the
   request speaks for (the candidate of a Vote, the leader of Begin/EndQuorumEpoch, the replica
   of a Fetch or FetchSnapshot); node 3 holding node 2's certificate and claiming to be node 3
   is answered CLUSTER_AUTHORIZATION_FAILED.

The voter set may be changed, on those listeners, only by a principal the node's configuration
names as an administrator (``--admin-principals User:alice,User:ops``, as Kafka's
``super.users``), and by a node for its own id only: AddRaftVoter of itself (``--auto-join``) and
UpdateRaftVoter of itself (step 2). A node's certificate or login is not an administrator's: it
cannot add or remove another replica nor hand leadership over. Anyone else is answered
CLUSTER_AUTHORIZATION_FAILED.

Each refusal is logged once per connection (a peer retries every few milliseconds). On a
PLAINTEXT listener nothing is checked: a PLAINTEXT cluster trusts its network.
"""

from __future__ import annotations

import logging
from typing import Any

from raftcore.connect_errors import host_port
from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, encode_response
from raftcore.protocol.error_answers import raft_error_response

__all__ = ["refuse_unless_admin", "refuse_unless_node", "refuse_unless_that_node"]

logger = logging.getLogger(__name__)

_CLAIMS: dict[int, str] = {
    ApiKey.VOTE: "a Vote for candidate",
    ApiKey.BEGIN_QUORUM_EPOCH: "a BeginQuorumEpoch from leader",
    ApiKey.END_QUORUM_EPOCH: "an EndQuorumEpoch from leader",
    ApiKey.FETCH: "a replica Fetch from replica",
    ApiKey.FETCH_SNAPSHOT: "a FetchSnapshot from replica",
    ApiKey.UPDATE_RAFT_VOTER: "an UpdateRaftVoter from voter",
}

Answer = list[bytes | memoryview]


def _checked(node: Any) -> bool:
    security = node.config.security
    return bool(security.uses_tls or security.uses_sasl)


def refuse_unless_node(node: Any, conn: Any, header: Any) -> Answer | None:
    """Step 1: the refusal of a raft RPC from a connection that is not a node's, or None."""
    if not _checked(node) or conn.principal.kind == "node":
        return None
    key = header.request_api_key
    _log_once(node, conn, f"{ApiKey(key).name}", "a node")
    return _refusal(header)


def refuse_unless_that_node(node: Any, conn: Any, header: Any, source: int) -> Answer | None:
    """Step 2: the refusal of a raft RPC speaking for node ``source`` from a connection that is
    not that node's, or None."""
    principal = conn.principal
    if not _checked(node) or (principal.kind == "node" and principal.node_id == source):
        return None
    key = header.request_api_key
    _log_once(node, conn, f"{_CLAIMS.get(key, f'API {key} for node')} {source}", f"node-{source}")
    return _refusal(header)


def refuse_unless_admin(node: Any, conn: Any, header: Any, body: Any) -> Answer | None:
    """The refusal of a voter change or a transfer from a connection that is not an
    administrator's, or None. A node speaks only for its own id: it may ask to add itself
    (``--auto-join``), never to add or remove another replica or hand leadership over."""
    principal = conn.principal
    if not _checked(node) or str(principal) in node.config.admin_principals:
        return None
    key = header.request_api_key
    if principal.kind == "node" and key == ApiKey.ADD_RAFT_VOTER:
        if body.voter_id == principal.node_id:
            return None  # a node adding itself (auto-join)
        wanted = f"node-{body.voter_id} or an administrator (--admin-principals)"
        _log_once(node, conn, f"an ADD_RAFT_VOTER of node {body.voter_id}", wanted)
        return _refusal(
            header,
            f"{principal} may add only itself as a voter: the administrators named by the "
            f"nodes' --admin-principals may add others (node {node.config.node_id} names "
            f"{_names(node.config.admin_principals)})",
        )
    _log_once(node, conn, ApiKey(key).name, "an administrator (--admin-principals)")
    # the answer says why too: the caller's command prints it (the node's log is elsewhere)
    return _refusal(
        header,
        f"{principal} may not change the voters or the leader: only the administrators named "
        f"by the nodes' --admin-principals may (node {node.config.node_id} names "
        f"{_names(node.config.admin_principals)})",
    )


def _names(principals: frozenset[str]) -> str:
    return ", ".join(sorted(principals)) if principals else "none"


def _refusal(header: Any, message: str | None = None) -> Answer:
    key = header.request_api_key
    version = header.request_api_version
    body = raft_error_response(key, Errors.CLUSTER_AUTHORIZATION_FAILED)
    if message is not None and hasattr(body, "error_message"):
        body.error_message = message
    return encode_response(key, version, header.correlation_id, body)


def _log_once(node: Any, conn: Any, what: str, wanted: str) -> None:
    if getattr(conn, "raft_refusal_logged", False):
        return
    conn.raft_refusal_logged = True
    logger.warning(
        "%s refusing %s from %s: the connection is %s, not %s (CLUSTER_AUTHORIZATION_FAILED)",
        node.prefix,
        what,
        host_port(conn.peer),
        conn.principal,
        wanted,
    )
