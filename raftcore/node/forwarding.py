"""Writes made on any replica: appended here when this replica leads, else forwarded to the
leader as a Kafka Produce (acks=all) on the node's own peer connection, so an embedding
service never writes its own find-the-leader-and-retry loop.

The write is retried (:mod:`raftcore.node.leader_retry`), within the caller's ``timeout_s``,
while no leader is known or the one asked answers that it does not lead (an election is under
way). The forwarded batch carries no producer id (Kafka's non-idempotent producer): a leader
that appended it and then lost its leadership before answering cannot tell a retry from a new
write, so across such a leader change a forwarded write may be committed twice, as with
Kafka's ``enable.idempotence=false``.
A write appended here and then not acknowledged (this replica lost its leadership) is not
retried: :class:`~raftcore.raft.NotLeaderError` says so, and its fate is unknown.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.node.leader_retry import TryAgain, until_done
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import Appended, NotLeaderError
from raftcore.records import encode_batch

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["ForwardError", "write"]

PRODUCE_VERSION = 10
_LEADER_ERRORS = {
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH,
    Errors.LEADER_NOT_AVAILABLE,
}


class ForwardError(RaftcoreError):
    """The leader refused a forwarded write with a definite error (``error_code``, Kafka's):
    it is not in the log."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


async def write(node: RaftNode, records: list[Any], timeout_s: float, forward: bool) -> Appended:
    """Commit ``records`` as one batch, through whichever replica leads; the Appended (its
    epoch is the one it was committed in, or -1 when forwarded). ``forward=False``: only here,
    NotLeaderError elsewhere. TimeoutError when no leader committed it within ``timeout_s``
    (a forwarded write already sent may still be committed)."""

    async def attempt(left: float) -> Appended:
        core = node.running_core()
        assert core is not None  # until_done checked it
        why = "no leader known"
        if core.is_leader() or not forward:
            try:
                appended = await node.append_tracked(records)
            except NotLeaderError:  # not appended: it lost its leadership meanwhile
                if not forward:
                    raise
                why = "this replica's leadership ended"
            else:
                await node.wait_committed(appended, left)  # NotLeaderError: fate unknown
                return appended
        leader = core.leader_hint()
        if not leader.known or leader.leader_id == node.node_id:
            raise TryAgain(why)
        assert leader.leader_id is not None
        try:
            body = _produce(node, records, left)
            answer = await node.request_peer(
                leader.leader_id, ApiKey.PRODUCE, PRODUCE_VERSION, body, left
            )
        except (ConnectionError, asyncio.TimeoutError) as exc:
            raise TryAgain(f"node {leader.leader_id}: {exc or type(exc).__name__}") from None
        part = answer.responses[0].partition_responses[0]
        if part.error_code == Errors.NONE:
            n = len(records)
            return Appended(part.base_offset, part.base_offset + n - 1, -1)
        if part.error_code not in _LEADER_ERRORS:
            raise ForwardError(
                part.error_code,
                f"{node.prefix} leader {leader.leader_id} refused a forwarded write: "
                f"{error_name(part.error_code)}"
                + (f" ({part.error_message})" if part.error_message else ""),
            )
        raise TryAgain(f"node {leader.leader_id} answered {error_name(part.error_code)}")

    return await until_done(
        node,
        attempt,
        timeout_s=timeout_s,
        not_done=f"a write of {len(records)} record(s) was not committed",
    )


def _produce(node: RaftNode, records: list[Any], left_s: float) -> Any:
    cls = request_spec(ApiKey.PRODUCE).cls
    data = encode_batch(records, base_offset=0, leader_epoch=-1)
    return cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=max(1, int(left_s * 1000)),
        topic_data=[
            cls.TopicProduceData(
                name=node.config.topic,
                partition_data=[cls.PartitionProduceData(index=0, records=data)],
            )
        ],
    )
