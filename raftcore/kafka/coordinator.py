"""FindCoordinator (key 10): raftcore has no group or transaction coordinator, so every key is
answered at once with INVALID_REQUEST and a message saying why. librdkafka's ``subscribe()``
(and ``kcat -G``) then reports that message as a consumer error at once instead of waiting
forever. COORDINATOR_NOT_AVAILABLE, the error a Kafka broker gives while its coordinator
loads, is retriable: librdkafka keeps asking in silence. A consumer ``assign()``s the
partition instead (docs/getting-started.md).

An offset commit (``enable.auto.commit``, librdkafka's default) still waits for a coordinator
on ``close()`` whatever the answer here (measured with librdkafka 2.16: 45.5 s with no
answer, with COORDINATOR_NOT_AVAILABLE, with INVALID_REQUEST and with
GROUP_AUTHORIZATION_FAILED), so the docs' consumers turn it off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["NO_COORDINATOR", "find_coordinator"]

NO_COORDINATOR = (
    "raftcore has no group coordinator: consumer groups and committed offsets are not "
    "served; assign() the partition and keep your own offsets (enable.auto.commit=false)"
)


def find_coordinator(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.FIND_COORDINATOR).cls
    error = Errors.INVALID_REQUEST  # not retriable: librdkafka reports it at once
    if version >= 4:
        return cls(
            throttle_time_ms=0,
            coordinators=[
                cls.Coordinator(
                    key=key,
                    node_id=-1,
                    host="",
                    port=-1,
                    error_code=error,
                    error_message=NO_COORDINATOR,
                )
                for key in body.coordinator_keys
            ],
        )
    return cls(
        throttle_time_ms=0,
        error_code=error,
        error_message=NO_COORDINATOR,
        node_id=-1,
        host="",
        port=-1,
    )
