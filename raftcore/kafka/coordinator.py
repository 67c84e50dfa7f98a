"""FindCoordinator (key 10): where a consumer group's coordinator is.

A group's coordinator is the leader of its ``__consumer_offsets`` partition
(:mod:`raftcore.node.offsets_groups`); any node answers with that leader's client endpoint,
or COORDINATOR_NOT_AVAILABLE (retriable: the client asks again) while the partition has no
known leader. raftcore has no transaction coordinator: a transaction key (key type 1) is
answered INVALID_REQUEST with a message saying so, which librdkafka reports at once instead
of retrying in silence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["NO_TRANSACTIONS", "find_coordinator"]

NO_TRANSACTIONS = "raftcore has no transaction coordinator: transactions are not served"
_GROUP = 0


def _locate(broker: Broker, key: str, key_type: int) -> tuple[Errors, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key."""
    if key_type != _GROUP:
        return Errors.INVALID_REQUEST, NO_TRANSACTIONS, -1, "", -1
    coordinators = broker.coordinators
    if coordinators is None:
        return Errors.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    error, node_id, endpoint = coordinators.locate(key)
    if error != Errors.NONE or endpoint is None:
        return error, None, -1, "", -1
    return Errors.NONE, None, node_id, endpoint.host, endpoint.port


def find_coordinator(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.FIND_COORDINATOR).cls
    key_type = body.key_type if version >= 1 else _GROUP
    if version >= 4:
        coordinators = []
        for key in body.coordinator_keys:
            error, message, node_id, host, port = _locate(broker, key, key_type)
            coordinators.append(
                cls.Coordinator(
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message,
                )
            )
        return cls(throttle_time_ms=0, coordinators=coordinators)
    error, message, node_id, host, port = _locate(broker, body.key, key_type)
    return cls(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        node_id=node_id,
        host=host,
        port=port,
    )
