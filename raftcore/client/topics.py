"""Topics from Python and the command line (``raftcore topic create|list|describe|delete``): the
Kafka admin requests a Kafka AdminClient sends, to the controller that Metadata names.

A node that is not the controller answers NOT_CONTROLLER (the controller moved meanwhile): the
request goes again to the controller Metadata names then, until ``timeout_s``. Each call
returns a :class:`TopicOutcome` (its one line for the command line, and whether it was done)
or, for ``list`` and ``describe``, what Metadata says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raftcore.client.connection import Connection
from raftcore.endpoints import Endpoint, parse_endpoint
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security.config import ClientSecurity
from raftcore.security.tls import client_context

__all__ = [
    "PartitionInfo",
    "TopicInfo",
    "TopicOutcome",
    "create_topic",
    "delete_topic",
    "describe_topics",
    "format_topics",
]

_RETRY_PAUSE_S = 0.2
_METADATA_VERSION = 12


@dataclass(frozen=True)
class TopicOutcome:
    ok: bool
    line: str
    error: int = Errors.NONE


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: none known
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: list[PartitionInfo] = field(default_factory=list)
    error: int = Errors.NONE


class _Admin:
    """Connections to the cluster: one to a bootstrap node for Metadata, one to the
    controller for the admin requests."""

    def __init__(self, bootstrap: list[str], timeout_s: float, security: ClientSecurity | None):
        self.bootstrap = [parse_endpoint(b) for b in bootstrap]
        self.deadline = time.monotonic() + timeout_s
        self.security = security
        self.ssl = client_context(security) if security and security.uses_tls else None
        self._conns: dict[Endpoint, Connection] = {}

    def left(self) -> float:
        return max(0.05, self.deadline - time.monotonic())

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()

    async def _conn(self, endpoint: Endpoint) -> Connection:
        conn = self._conns.get(endpoint)
        if conn is None or conn.closed:
            conn = await Connection.open(
                endpoint.host,
                endpoint.port,
                timeout_s=min(5.0, self.left()),
                security=self.security,
                ssl=self.ssl,
                client_id="raftcore-topic",
            )
            self._conns[endpoint] = conn
        return conn

    async def request(self, endpoint: Endpoint, key: int, version: int, body: Any) -> Any:
        conn = await self._conn(endpoint)
        try:
            return await conn.request(key, version, body, timeout_s=self.left())
        except BaseException:
            self._conns.pop(endpoint, None)
            await conn.close()
            raise

    async def metadata(self, topics: list[str] | None) -> Any:
        """Metadata from the first bootstrap node that answers."""
        cls = request_spec(ApiKey.METADATA).cls
        asked = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
        body = cls(topics=asked, allow_auto_topic_creation=False)
        failures = []
        for endpoint in self.bootstrap:
            try:
                return await self.request(endpoint, ApiKey.METADATA, _METADATA_VERSION, body)
            except (OSError, RaftcoreError, asyncio.TimeoutError) as exc:
                failures.append(f"{endpoint}: {exc or type(exc).__name__}")
        raise RaftcoreError("cannot reach the cluster: " + "; ".join(failures))

    async def controller(self) -> Endpoint:
        """Where the controller takes requests, once Metadata names one."""
        while True:
            answer = await self.metadata([])
            brokers = {b.node_id: Endpoint(b.host, b.port) for b in answer.brokers}
            if answer.controller_id in brokers:
                return brokers[answer.controller_id]
            if time.monotonic() >= self.deadline:
                raise RaftcoreError("no controller is known (the metadata group has no leader)")
            await asyncio.sleep(_RETRY_PAUSE_S)

    async def to_controller(self, key: int, version: int, body: Any, error_of: Any) -> Any:
        """The controller's answer; asked again while a node answers NOT_CONTROLLER."""
        while True:
            answer = await self.request(await self.controller(), key, version, body)
            if error_of(answer) != Errors.NOT_CONTROLLER or time.monotonic() >= self.deadline:
                return answer
            await asyncio.sleep(_RETRY_PAUSE_S)


def _outcome(what: str, code: int, message: str | None) -> TopicOutcome:
    if code == Errors.NONE:
        return TopicOutcome(True, what)
    return TopicOutcome(False, f"{error_name(code)}: {message or what}", code)


async def create_topic(
    bootstrap: list[str],
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
    validate_only: bool = False,
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> TopicOutcome:
    """CreateTopics for one topic, at the controller."""
    admin = _Admin(bootstrap, timeout_s, security)
    try:
        cls = request_spec(ApiKey.CREATE_TOPICS).cls
        topic = cls.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        )
        body = cls(topics=[topic], timeout_ms=int(timeout_s * 1000), validate_only=validate_only)
        answer = await admin.to_controller(
            ApiKey.CREATE_TOPICS, 7, body, lambda a: a.topics[0].error_code
        )
        (result,) = answer.topics
        done = "would be created" if validate_only else "created"
        return _outcome(
            f"topic {name} {done}: {result.num_partitions} partition(s), replication factor "
            f"{result.replication_factor}",
            result.error_code,
            result.error_message,
        )
    finally:
        await admin.close()


async def delete_topic(
    bootstrap: list[str],
    name: str,
    *,
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> TopicOutcome:
    """DeleteTopics for one topic, at the controller."""
    admin = _Admin(bootstrap, timeout_s, security)
    try:
        cls = request_spec(ApiKey.DELETE_TOPICS).cls
        body = cls(
            topics=[cls.DeleteTopicState(name=name, topic_id=bytes(16))],
            timeout_ms=int(timeout_s * 1000),
        )
        answer = await admin.to_controller(
            ApiKey.DELETE_TOPICS, 6, body, lambda a: a.responses[0].error_code
        )
        (result,) = answer.responses
        return _outcome(f"topic {name} deleted", result.error_code, result.error_message)
    finally:
        await admin.close()


async def describe_topics(
    bootstrap: list[str],
    names: list[str] | None = None,
    *,
    timeout_s: float = 10.0,
    security: ClientSecurity | None = None,
) -> list[TopicInfo]:
    """The topics (all of them with ``names`` None), as Metadata describes them."""
    admin = _Admin(bootstrap, timeout_s, security)
    try:
        answer = await admin.metadata(names)
    finally:
        await admin.close()
    return [
        TopicInfo(
            t.name,
            bytes(t.topic_id),
            [
                PartitionInfo(
                    p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)
                )
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ],
            t.error_code,
        )
        for t in answer.topics
    ]


def format_topics(topics: list[TopicInfo]) -> str:
    """As ``kafka-topics --describe`` prints them: a line per topic, one per partition."""
    import base64

    lines = []
    for t in topics:
        if t.error != Errors.NONE:
            lines.append(f"Topic: {t.name}\t{error_name(t.error)}")
            continue
        topic_id = base64.urlsafe_b64encode(t.topic_id).rstrip(b"=").decode()
        factor = len(t.partitions[0].replicas) if t.partitions else 0
        lines.append(
            f"Topic: {t.name}\tTopicId: {topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {factor}"
        )
        for p in t.partitions:
            leader = "none" if p.leader < 0 else str(p.leader)
            lines.append(
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
    return "\n".join(lines)
