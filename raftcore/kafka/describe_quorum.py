"""DescribeQuorum (key 55, v0-2) on the leader: the epoch, the high watermark and every
replica's progress (KIP-595, KIP-836), each replica named by id and directory id, the voters'
endpoints (v2, KIP-853), and raftcore's own tagged fields: the kraft.version in force, the
voter change or leadership transfer not done yet, and where each observer listens.

Asked without ``directory_ids`` (a caller on a client listener who is not an administrator:
:mod:`raftcore.node.listeners`), every directory id is Kafka's zero uuid: a voter's directory
id is what a forged replica needs to speak for it.

A node that does not lead answers NOT_LEADER_OR_FOLLOWER (as Kafka's do): only the leader
knows how far each replica has fetched. An observer silent for five minutes is not listed
(Kafka's observer session): a removed voter or a replaced disk drops out of the table.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.raft.states import LeaderState
from raftcore.raft.voters import ReplicaKey, VoterSet

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker
    from raftcore.raft.core import RaftCore

__all__ = ["OBSERVER_SESSION_MS", "describe_quorum", "pending_change"]

# an observer that has not fetched for this long is not listed (Kafka's observer session)
OBSERVER_SESSION_MS = 300_000


def describe_quorum(broker: Broker, body: Any, version: int, *, directory_ids: bool = True) -> Any:
    cls = response_spec(ApiKey.DESCRIBE_QUORUM).cls
    topics = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            resp = cls.PartitionData(
                partition_index=p.partition_index, leader_id=-1, leader_epoch=-1, high_watermark=-1
            )
            partition = broker.partition(topic.topic_name, p.partition_index)
            core = None if partition is None else partition.quorum()
            if partition is None:
                resp.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif core is None or not isinstance(core.state, LeaderState):
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            else:
                _describe(
                    partition.now_ms(), core, core.state, resp, cls, directory_ids=directory_ids
                )
            parts.append(resp)
        topics.append(cls.TopicData(topic_name=topic.topic_name, partitions=parts))
    response = cls(error_code=Errors.NONE, topics=topics)
    if version >= 2 and broker.partitions:  # the voters of the node's (first) Raft group
        group = broker.partitions[0]
        core = group.quorum()
        name = broker.listener_name
        response.nodes = []
        for voter_id, ep in group.voter_endpoints():
            voter = None if core is None else core.voter_set.get(voter_id)
            if voter is not None and voter.endpoints:
                name = voter.endpoints[0].name
            response.nodes.append(
                cls.Node(
                    node_id=voter_id,
                    listeners=[cls.Listener(name=name, host=ep.host, port=ep.port)],
                )
            )
    return response


def _describe(
    now_mono: int,
    core: RaftCore,
    state: LeaderState,
    resp: Any,
    cls: Any,
    *,
    directory_ids: bool,
) -> None:
    now_wall = int(time.time() * 1000)

    def wall(t: int) -> int:
        return -1 if t < 0 else now_wall - (now_mono - t)

    resp.leader_id = state.local_id
    resp.leader_epoch = state.epoch
    resp.high_watermark = -1 if state.high_watermark is None else state.high_watermark
    resp.k_raft_version = core.kraft_version
    resp.pending_voter_change = pending_change(core, state, directory_ids=directory_ids)
    zero = bytes(16)

    def replica(s: Any, observer: bool) -> Any:
        directory = (s.directory_id or zero) if directory_ids else zero
        if s.replica_id == state.local_id and s.key.admits(core.local_key):
            own = core.local_key.directory_id if directory_ids else None
            entry = cls.ReplicaState(
                replica_id=s.replica_id,
                replica_directory_id=own or zero,
                log_end_offset=core.log.end_offset,
                last_fetch_timestamp=now_wall,
                last_caught_up_timestamp=now_wall,
            )
        else:
            entry = cls.ReplicaState(
                replica_id=s.replica_id,
                replica_directory_id=directory,
                log_end_offset=-1 if s.end_offset is None else s.end_offset,
                last_fetch_timestamp=wall(s.last_fetch_ms),
                last_caught_up_timestamp=wall(s.last_caught_up_ms),
            )
        ep = getattr(s, "endpoint", None)
        if observer and ep is not None:
            entry.listener = cls.ReplicaListener(name=ep.name, host=ep.host, port=ep.port)
        return entry

    resp.current_voters = [replica(s, False) for _, s in sorted(state.voter_states.items())]
    observers = sorted(state.observer_states.items(), key=lambda kv: _order(kv[0]))
    resp.observers = [
        replica(s, True)
        for _, s in observers
        if s.last_fetch_ms >= 0 and now_mono - s.last_fetch_ms <= OBSERVER_SESSION_MS
    ]


def _order(key: ReplicaKey) -> tuple[int, bytes]:
    return key.id, key.directory_id or b""


def pending_change(core: RaftCore, state: LeaderState, *, directory_ids: bool = True) -> str | None:
    """The voter change or leadership transfer not done yet, in words (None: none); the
    replicas by id alone without ``directory_ids``."""
    transfer = state.transfer
    if transfer is not None:
        return f"handing leadership to node {transfer.key.id}"  # type: ignore[attr-defined]
    hw = state.high_watermark
    history = core.history
    if not history.uncommitted_change(hw):
        return None
    offset = history.latest_offset()
    latest = history.latest()
    if history.kraft_version_at(offset - 1) < history.kraft_version:
        what = f"moving the voter set into the log (kraft.version {history.kraft_version})"
    else:
        what = _difference(history.at(offset - 1), latest, directory_ids)
    return f"{what} at offset {offset}, not committed yet (high watermark {hw})"


def _difference(before: VoterSet, after: VoterSet, directory_ids: bool) -> str:
    def named(key: ReplicaKey) -> str:
        return str(key) if directory_ids else str(key.id)

    added = [named(v.key) for v in after.values() if not before.is_voter(v.key)]
    removed = [named(v.key) for v in before.values() if not after.is_voter(v.key)]
    if added and not removed:
        return "adding " + ", ".join(added)
    if removed and not added:
        return "removing " + ", ".join(removed)
    if added or removed:
        return f"replacing {', '.join(removed)} by {', '.join(added)}"
    return "updating the voter set"
