"""Who may send the Raft RPCs.

On a TLS listener (SSL, SASL_SSL), Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot and
a replica's Fetch are answered only when the connection's certificate names the node the request
speaks for (the candidate of a Vote, the leader of Begin/EndQuorumEpoch, the replica of a Fetch
or FetchSnapshot). Anything else -- a user's certificate, no certificate, node 3 with node 2's
certificate claiming to be node 3 -- is answered with CLUSTER_AUTHORIZATION_FAILED and logged
once per connection. On a SASL listener a node logs in as ``node-<id>`` (or proves it by its
certificate on SASL_SSL) and the same rule holds. On a PLAINTEXT listener nothing is checked (a
PLAINTEXT cluster trusts its network, as before).
"""

from __future__ import annotations

import logging
from typing import Any

from raftcore.protocol.api import ApiKey

__all__ = ["may_send_raft"]

logger = logging.getLogger(__name__)

_CLAIMS: dict[int, str] = {
    ApiKey.VOTE: "a Vote for candidate",
    ApiKey.BEGIN_QUORUM_EPOCH: "a BeginQuorumEpoch from leader",
    ApiKey.END_QUORUM_EPOCH: "an EndQuorumEpoch from leader",
    ApiKey.FETCH: "a replica Fetch from replica",
    ApiKey.FETCH_SNAPSHOT: "a FetchSnapshot from replica",
}


def may_send_raft(node: Any, conn: Any, api_key: int, source: int) -> bool:
    """True when ``conn`` may send raft request ``api_key`` speaking for node ``source``."""
    security = node.config.security
    if not (security.uses_tls or security.uses_sasl):
        return True
    principal = conn.principal
    if principal.kind == "node" and principal.node_id == source:
        return True
    if not getattr(conn, "raft_refusal_logged", False):
        conn.raft_refusal_logged = True  # once per connection: a peer retries every few ms
        logger.warning(
            "%s refusing %s %d from %s: the connection is %s, not node-%d "
            "(CLUSTER_AUTHORIZATION_FAILED)",
            node.prefix,
            _CLAIMS.get(api_key, f"API {api_key} for node"),
            source,
            _address(conn.peer),
            principal,
            source,
        )
    return False


def _address(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
