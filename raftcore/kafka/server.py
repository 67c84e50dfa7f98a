"""The Kafka client API's entry: a decoded request to the module of its API, the answer
encoded, the time it took counted. The node hands over every client request it does not
serve itself (the Raft RPCs, the admin APIs, SASL) with its :class:`~.partition.Broker`."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka.api_versions import api_versions, api_versions_body
from raftcore.kafka.coordinator import find_coordinator
from raftcore.kafka.delete_records import delete_records
from raftcore.kafka.describe_quorum import describe_quorum
from raftcore.kafka.fetch import consumer_fetch
from raftcore.kafka.group_listing import delete_groups, describe_groups, list_groups
from raftcore.kafka.group_membership import heartbeat, join_group, leave_group, sync_group
from raftcore.kafka.group_offsets import offset_commit, offset_fetch
from raftcore.kafka.invalid_request import InvalidRequest
from raftcore.kafka.list_offsets import list_offsets
from raftcore.kafka.metadata import NODE_CLIENT_ID, metadata
from raftcore.kafka.produce import produce
from raftcore.kafka.producer_ids import describe_producers, init_producer_id
from raftcore.kafka.topic_admin import create_topics, describe_configs
from raftcore.kafka.topic_create import create_partitions, delete_topics
from raftcore.protocol.api import ApiKey, encode_response

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["HANDLERS", "handle", "unsupported_version"]


def unsupported_version(
    broker: Broker, header: Any, *, raft_apis: bool = True
) -> list[bytes | memoryview]:
    """An ApiVersions request at a version we do not speak is answered at v0 with
    UNSUPPORTED_VERSION and our list, so the client retries lower (KIP-511); other APIs at an
    unsupported version are an InvalidRequest (the connection closes)."""
    if header.request_api_key != ApiKey.API_VERSIONS:
        raise InvalidRequest(
            f"API {header.request_api_key} version {header.request_api_version} is not supported"
        )
    body = api_versions_body(0, broker.uses_sasl, raft=raft_apis)
    body.error_code = Errors.UNSUPPORTED_VERSION
    return encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id, body)


async def handle(
    broker: Broker,
    header: Any,
    body: Any,
    *,
    raft_apis: bool = True,
    directory_ids: bool = True,
    client_host: str = "",
) -> list[bytes | memoryview] | None:
    """The encoded answer to a client request (None: Produce with acks=0 is not answered);
    InvalidRequest for an API not served here. As the listener says (raftcore.node.listeners):
    ``raft_apis``, whether ApiVersions lists the Raft RPCs; ``directory_ids``, whether
    DescribeQuorum names the replicas' directory ids to this caller. ``client_host``: the
    client's address, which a group member's description shows."""
    key = header.request_api_key
    version = header.request_api_version
    handler = HANDLERS.get(key)
    if handler is None:
        raise InvalidRequest(f"API {key} is not served here")
    started = time.perf_counter()
    if key == ApiKey.DESCRIBE_QUORUM:
        response = describe_quorum(broker, body, version, directory_ids=directory_ids)
    elif key == ApiKey.API_VERSIONS:
        response = api_versions_body(version, broker.uses_sasl, raft=raft_apis)
    elif key == ApiKey.JOIN_GROUP:  # the member's client id and host, for DescribeGroups
        # Kafka shows a member's host as Java prints an InetAddress: "/127.0.0.1"
        host = f"/{client_host}" if client_host else ""
        response = join_group(broker, body, version, header.client_id or "", host)
    elif key == ApiKey.METADATA:
        response = metadata(broker, body, version, local_only=header.client_id == NODE_CLIENT_ID)
    else:
        response = handler(broker, body, version)
    if asyncio.iscoroutine(response):
        response = await response
    broker.metrics.kafka_request(key)(time.perf_counter() - started)
    if response is None:
        return None  # acks=0
    return encode_response(key, version, header.correlation_id, response)


HANDLERS: dict[int, Any] = {
    ApiKey.API_VERSIONS: api_versions,
    ApiKey.DELETE_RECORDS: delete_records,
    ApiKey.METADATA: metadata,
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: consumer_fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.DESCRIBE_QUORUM: describe_quorum,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers,
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.SYNC_GROUP: sync_group,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
}
