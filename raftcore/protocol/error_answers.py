"""Top-level error answers to the raft RPCs and the voter changes: the response body whose
``error_code`` says why, with no partition in it.

Both the node's raft wire (a request of another cluster, or naming a partition this node does
not have) and the security checks (CLUSTER_AUTHORIZATION_FAILED) answer with these; they need
nothing of the node.
"""

from __future__ import annotations

from typing import Any

from raftcore.error_codes import error_name
from raftcore.protocol.api import ApiKey, response_spec

__all__ = ["raft_error_response"]


def raft_error_response(api_key: int, error_code: int) -> Any:
    """The response body of ``api_key`` (Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum,
    Fetch, FetchSnapshot, UpdateRaftVoter, AddRaftVoter, RemoveRaftVoter, TransferLeadership)
    that carries only ``error_code``."""
    cls = response_spec(api_key).cls
    if api_key == ApiKey.FETCH:
        return cls(throttle_time_ms=0, error_code=error_code, session_id=0, responses=[])
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return cls(throttle_time_ms=0, error_code=error_code, topics=[])
    if api_key == ApiKey.UPDATE_RAFT_VOTER:
        return cls(throttle_time_ms=0, error_code=error_code)
    if api_key in (
        ApiKey.ADD_RAFT_VOTER,
        ApiKey.REMOVE_RAFT_VOTER,
        ApiKey.TRANSFER_LEADERSHIP,
        ApiKey.READ_INDEX,
    ):
        return cls(throttle_time_ms=0, error_code=error_code, error_message=error_name(error_code))
    return cls(error_code=error_code, topics=[])
