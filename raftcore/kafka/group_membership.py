"""JoinGroup (11), SyncGroup (14), Heartbeat (12) and LeaveGroup (13) of the classic group
protocol: each version's fields mapped onto :mod:`raftcore.groups.messages`, the request run
on the group's coordinator (:mod:`raftcore.node.coordinator_shard`), the answer mapped back.

- JoinGroup v0 has no rebalance timeout: the session timeout stands for it (as Kafka does).
  From v4 a first join without a member id hears MEMBER_ID_REQUIRED with its id (KIP-394);
  from v5 a ``group.instance.id`` makes the member static (KIP-345).
- A node that does not lead the group's offsets partition answers NOT_COORDINATOR (the
  client asks FindCoordinator again); one that leads and has not loaded it yet,
  COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.groups.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
)
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["call_coordinator", "heartbeat", "join_group", "leave_group", "sync_group"]


async def call_coordinator(broker: Broker, group_id: str, call: Any) -> Any:
    """The coordinator's answer to ``call`` (coordinator, ref, now) -> Output, or the
    :class:`Errors` a client hears when this node does not coordinate ``group_id``."""
    coordinators = broker.coordinators
    if coordinators is None:
        return Errors.COORDINATOR_NOT_AVAILABLE
    return await coordinators.shard_of(group_id).call(call)


async def join_group(
    broker: Broker, body: Any, version: int, client_id: str = "", client_host: str = ""
) -> Any:
    cls = response_spec(ApiKey.JOIN_GROUP).cls
    rebalance_timeout = body.rebalance_timeout_ms if version >= 1 else -1
    req = JoinGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=(
            rebalance_timeout if rebalance_timeout >= 0 else body.session_timeout_ms
        ),
        group_instance_id=body.group_instance_id if version >= 5 else None,
        client_id=client_id,
        client_host=client_host,
        require_known_member_id=version >= 4,
    )
    answer = await call_coordinator(
        broker, req.group_id, lambda c, ref, now: c.join_group(ref, req, now)
    )
    if isinstance(answer, Errors):
        return cls(
            throttle_time_ms=0,
            error_code=answer,
            generation_id=-1,
            protocol_name="",
            leader="",
            member_id=body.member_id,
            members=[],
        )
    return cls(
        throttle_time_ms=0,
        error_code=answer.error,
        generation_id=answer.generation_id,
        protocol_name=answer.protocol_name or "",
        leader=answer.leader,
        member_id=answer.member_id,
        members=[
            cls.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in answer.members
        ],
    )


async def sync_group(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.SYNC_GROUP).cls
    req = SyncGroupRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=body.group_instance_id if version >= 3 else None,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in body.assignments),
    )
    answer = await call_coordinator(
        broker, req.group_id, lambda c, ref, now: c.sync_group(ref, req, now)
    )
    if isinstance(answer, Errors):
        return cls(throttle_time_ms=0, error_code=answer, assignment=b"")
    return cls(throttle_time_ms=0, error_code=answer.error, assignment=answer.assignment)


async def heartbeat(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.HEARTBEAT).cls
    req = HeartbeatRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=body.group_instance_id if version >= 3 else None,
    )
    answer = await call_coordinator(
        broker, req.group_id, lambda c, ref, now: c.heartbeat(ref, req, now)
    )
    return cls(throttle_time_ms=0, error_code=Errors(answer))


async def leave_group(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.LEAVE_GROUP).cls
    if version >= 3:
        members = tuple(MemberIdentity(m.member_id, m.group_instance_id) for m in body.members)
    else:
        members = (MemberIdentity(body.member_id),)
    req = LeaveGroupRequest(group_id=body.group_id, members=members)
    answer = await call_coordinator(
        broker, req.group_id, lambda c, ref, now: c.leave_group(ref, req, now)
    )
    if isinstance(answer, Errors):
        return cls(throttle_time_ms=0, error_code=answer, members=[])
    return cls(
        throttle_time_ms=0,
        # v0-2 name one member: its own error is the answer's
        error_code=answer.error
        if version >= 3 or not answer.members or answer.error != Errors.NONE
        else answer.members[0].error,
        members=[
            cls.MemberResponse(
                member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error
            )
            for m in answer.members
        ],
    )
