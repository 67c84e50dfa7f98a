"""ListGroups (16), DescribeGroups (15) and DeleteGroups (42): the groups this node
coordinates, for the lag tools (``kafka-consumer-groups``, kcat, Burrow). A tool asks every
node (ListGroups) or the group's coordinator (DescribeGroups, DeleteGroups); a node that does
not coordinate a group answers NOT_COORDINATOR for it. Only an Empty group can be deleted
(NON_EMPTY_GROUP otherwise); its offsets go with it, answered once the tombstones are
committed in Raft."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["delete_groups", "describe_groups", "list_groups"]


def list_groups(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.LIST_GROUPS).cls
    states = list(body.states_filter or ()) if version >= 4 else []
    coordinators = broker.coordinators
    shards = [] if coordinators is None else coordinators.coordinating()
    groups = [
        cls.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state)
        for shard in shards
        for g in shard.coordinator.list_groups(states)
    ]
    return cls(throttle_time_ms=0, error_code=Errors.NONE, groups=groups)


def describe_groups(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.DESCRIBE_GROUPS).cls
    coordinators = broker.coordinators
    answers = []
    for group_id in body.groups:
        shard = None if coordinators is None else coordinators.shard_of(group_id)
        error = Errors.COORDINATOR_NOT_AVAILABLE if shard is None else shard.error()
        if error is not None or shard is None or shard.coordinator is None:
            answers.append(
                cls.DescribedGroup(
                    error_code=error or Errors.COORDINATOR_NOT_AVAILABLE,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        described = shard.coordinator.describe_groups([group_id])[0]
        answers.append(
            cls.DescribedGroup(
                error_code=described.error,
                group_id=described.group_id,
                group_state=described.state,
                protocol_type=described.protocol_type,
                protocol_data=described.protocol_name,
                members=[
                    cls.DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in described.members
                ],
            )
        )
    return cls(throttle_time_ms=0, groups=answers)


async def delete_groups(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.DELETE_GROUPS).cls
    coordinators = broker.coordinators
    wanted = list(dict.fromkeys(body.groups_names))
    errors: dict[str, Errors] = {}
    if coordinators is None:
        errors = dict.fromkeys(wanted, Errors.COORDINATOR_NOT_AVAILABLE)
    else:
        by_shard: dict[int, tuple[Any, list[str]]] = {}
        for group_id in wanted:
            shard = coordinators.shard_of(group_id)
            by_shard.setdefault(id(shard), (shard, []))[1].append(group_id)

        async def delete(shard: Any, group_ids: list[str]) -> None:
            answer = await shard.call(lambda c, ref, now: c.delete_groups(ref, group_ids, now))
            if isinstance(answer, Errors):
                errors.update(dict.fromkeys(group_ids, answer))
            else:
                errors.update((g.group_id, g.error) for g in answer)

        await asyncio.gather(*(delete(shard, ids) for shard, ids in by_shard.values()))
    return cls(
        throttle_time_ms=0,
        results=[
            cls.DeletableGroupResult(group_id=group_id, error_code=errors[group_id])
            for group_id in wanted
        ],
    )
