"""What a client knows of the cluster: the nodes' endpoints and the leader of the one partition
it speaks to, kept up to date by Metadata and by KIP-951 leader hints in Produce/Fetch
responses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass
from typing import Any

from raftcore import connect_errors
from raftcore.client.connection import Connection, ConnectionClosed
from raftcore.endpoints import Endpoint, parse_endpoint
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security.config import ClientSecurity
from raftcore.security.sasl_client import SaslAuthenticationError
from raftcore.security.tls import client_context

__all__ = [
    "ClusterClient",
    "LeaderHint",
    "NoLeaderError",
    "UnknownPartitionError",
    "UnknownTopicError",
    "UnreachableError",
]

logger = logging.getLogger(__name__)

METADATA_VERSION = 12


class NoLeaderError(RaftcoreError):
    """No leader could be found before the deadline."""


class UnreachableError(NoLeaderError):
    """No node could be reached at all: every address refused (or named no host) for the
    client's short grace period, or stayed silent until its timeout. The message names each
    address and why: ``cannot reach 127.0.0.1:9092 (connection refused)``."""


class UnknownTopicError(RaftcoreError):
    """The cluster does not serve the topic asked for (Metadata answered
    UNKNOWN_TOPIC_OR_PARTITION): not retried, since raftcore creates no topics. The message
    names the topics it serves."""


class UnknownPartitionError(UnknownTopicError):
    """The topic has no partition of the index asked for (Metadata lists its partitions and
    that one is not among them): not retried. The message says how many it has."""


@dataclass(frozen=True, slots=True)
class LeaderHint:
    leader_id: int
    epoch: int


class ClusterClient:
    """Connections to the nodes, the partition's leader, and backoff for retries.

    KIP-951: ``learn_leader`` takes the CurrentLeader (and NodeEndpoints) of an error
    response; when its epoch is newer than what the client knew, the caller may retry at once.
    Retries to a leader the client already knew back off exponentially with jitter.

    A client that no node has answered yet gives up after ``unreachable_grace_ms`` when
    every address refuses at once, or closes the connection unanswered (a dead or mistyped
    address, or the wrong security protocol, fails in well under 2 s rather
    than at the timeout); once a node has answered, refusals are retried until the deadline,
    as during a leader change or a restart.
    """

    def __init__(
        self,
        bootstrap: list[str | Endpoint],
        *,
        topic: str = "raftcore",
        partition: int = 0,
        client_id: str = "raftcore-client",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 30_000,
        unreachable_grace_ms: int = 500,
        security: ClientSecurity | None = None,
    ) -> None:
        if not bootstrap:
            raise ValueError("at least one bootstrap address is needed")
        if partition < 0:
            raise ValueError(f"a partition index is >= 0, got {partition}")
        self.security = security or ClientSecurity()
        # TLS to every node (raftcore.security.tls); built now: a bad file fails here
        self.ssl = client_context(self.security) if self.security.uses_tls else None
        self.bootstrap = [parse_endpoint(b) if isinstance(b, str) else b for b in bootstrap]
        self.topic = topic
        self.partition = partition  # the one partition whose leader this client follows
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.unreachable_grace_s = unreachable_grace_ms / 1000
        self.answered = False  # some node answered a request once
        self.nodes: dict[int, Endpoint] = {}
        self.leader: LeaderHint | None = None
        self.topic_id: bytes | None = None
        self.cluster_id: str | None = None
        self._connections: dict[Endpoint, Connection] = {}
        self._refresh_wanted = asyncio.Event()
        self._refresh_task: asyncio.Task[None] | None = None
        self._refreshed = asyncio.Event()
        self.leader_moves = 0
        self.metadata_requests = 0
        # addresses whose last request timed out (a hung node): asked last for metadata
        self.silent: set[Endpoint] = set()

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, timeout_s: float | None = None) -> None:
        """Find the leader (within ``timeout_s``, default the request timeout)."""
        await self.refresh_metadata(timeout_s)
        self._refresh_task = asyncio.ensure_future(self._refresh_loop())

    async def close(self) -> None:
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresh_task
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()

    # ---- connections -----------------------------------------------------------------------------

    async def connection(self, endpoint: Endpoint) -> Connection:
        conn = self._connections.get(endpoint)
        if conn is None or conn.closed:
            conn = await Connection.open(
                endpoint.host,
                endpoint.port,
                client_id=self.client_id,
                ssl=self.ssl,
                security=self.security,
            )
            self._connections[endpoint] = conn
        return conn

    async def leader_connection(self) -> tuple[Connection, LeaderHint]:
        leader = self.leader
        if leader is None or leader.leader_id not in self.nodes:
            raise NoLeaderError("no known leader")
        return await self.connection(self.nodes[leader.leader_id]), leader

    async def request(self, endpoint: Endpoint, api_key: int, version: int, body: Any) -> Any:
        conn = await self.connection(endpoint)
        try:
            response = await conn.request(api_key, version, body, timeout_s=self.request_timeout_s)
        except (ConnectionClosed, OSError, asyncio.TimeoutError):
            self._connections.pop(endpoint, None)
            await conn.close()
            raise
        self.answered = True
        return response

    # ---- metadata and leader hints --------------------------------------------------------------

    def learn_leader(self, leader_id: int, epoch: int, endpoints: list[Any] | None = None) -> bool:
        """Take a leader hint (KIP-951). True when it advances what the client knew -- then a
        retry may go to the new leader at once, without backoff."""
        for ep in endpoints or []:
            self.nodes[ep.node_id] = Endpoint(ep.host, ep.port)
        if leader_id < 0:
            self.request_refresh()
            return False
        known = self.leader
        if known is not None and epoch <= known.epoch:
            return False
        self.leader = LeaderHint(leader_id, epoch)
        self.leader_moves += 1
        if leader_id not in self.nodes:
            self.request_refresh()
            return False
        self.request_refresh()  # as Kafka's clients do: refresh in the background anyway
        return True

    def request_refresh(self) -> None:
        self._refresh_wanted.set()

    async def leader_timed_out(self, timeout_s: float | None = None) -> None:
        """A request to the leader went unanswered for the request timeout (a hung or cut
        off node): ask the other nodes who leads now (for up to ``timeout_s``, default the
        request timeout), before the caller retries -- a retry on the stale leader would
        wait a whole timeout again."""
        leader = self.leader
        if leader is not None and leader.leader_id in self.nodes:
            self.silent.add(self.nodes[leader.leader_id])
        with contextlib.suppress(NoLeaderError, RaftcoreError, OSError):
            await self.refresh_metadata(timeout_s)

    async def refresh_metadata(self, timeout_s: float | None = None) -> None:
        """Ask the nodes, known ones first, until one answers with a leader. Each attempt is
        bounded by what is left of ``timeout_s`` (default: the request timeout)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        budget = timeout_s if timeout_s is not None else self.request_timeout_s
        deadline = started + budget
        attempt = 0
        # each address's last failure other than running out of time: a message that ends a
        # wait says why a node never answered (a TLS handshake, a closed connection), not
        # merely that the time was up
        reasons: dict[Endpoint, BaseException] = {}
        while True:
            candidates = list(dict.fromkeys([*self.nodes.values(), *self.bootstrap]))
            random.shuffle(candidates)
            candidates.sort(key=lambda ep: ep in self.silent)  # a hung node last
            # each address gets a share of the budget, not all that is left: a silent one
            # (a hung node: the kernel accepts, nothing answers) must not keep the others
            # from being asked
            share = budget / len(candidates)
            failures: dict[Endpoint, BaseException] = {}
            for endpoint in candidates:
                left = deadline - loop.time()
                if left <= 0:
                    failures[endpoint] = reasons.get(endpoint, asyncio.TimeoutError())
                    continue
                try:
                    answered = await asyncio.wait_for(
                        self._metadata_from(endpoint), min(left, share)
                    )
                    self.silent.discard(endpoint)
                    if answered:
                        return
                except (SaslAuthenticationError, UnknownTopicError):
                    raise  # wrong credentials stay wrong, a missing topic missing: no retry
                except (ConnectionClosed, OSError, asyncio.TimeoutError, RaftcoreError) as exc:
                    logger.debug("metadata from %s failed: %s", endpoint, exc)
                    if isinstance(exc, (OSError, asyncio.TimeoutError)):
                        failures[endpoint] = exc
                        if not isinstance(exc, asyncio.TimeoutError):
                            reasons[endpoint] = exc
            attempt += 1
            now = loop.time()
            unreached = len(failures) == len(candidates) and not self.answered
            if (
                unreached
                and now - started >= self.unreachable_grace_s
                and all(connect_errors.is_immediate(e) for e in failures.values())
            ):
                raise UnreachableError(_cannot_reach(failures))
            if now >= deadline:
                if unreached:
                    raise UnreachableError(f"{_cannot_reach(failures)} within {budget:g} s")
                raise NoLeaderError(
                    f"no node of {', '.join(map(str, candidates))} knows a leader for "
                    f"{self._named()} (waited {budget:g} s)"
                )
            await asyncio.sleep(min(self.backoff_s(attempt), max(0.0, deadline - now)))

    async def _metadata_from(self, endpoint: Endpoint) -> bool:
        cls = request_spec(ApiKey.METADATA).cls
        body = cls(
            topics=[cls.MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False
        )
        self.metadata_requests += 1
        resp = await self.request(endpoint, ApiKey.METADATA, METADATA_VERSION, body)
        self.cluster_id = resp.cluster_id
        nodes = {b.node_id: Endpoint(b.host, b.port) for b in resp.brokers}
        if nodes:
            self.nodes = nodes
        for topic in resp.topics:
            if topic.name != self.topic:
                continue
            if topic.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                served = await self._served_topics(endpoint)
                raise UnknownTopicError(
                    f"topic {self.topic!r} does not exist: the cluster at {endpoint} serves "
                    + (f"one topic, {served[0]}" if len(served) == 1 else ", ".join(served))
                    + " (--topic names it)"
                )
            if topic.error_code != Errors.NONE:
                raise RaftcoreError(f"topic {self.topic}: error {error_name(topic.error_code)}")
            self.topic_id = bytes(topic.topic_id)
            indexes = [p.partition_index for p in topic.partitions]
            if indexes and self.partition not in indexes:
                raise UnknownPartitionError(_no_such_partition(self.topic, self.partition, indexes))
            for p in topic.partitions:
                if p.partition_index == self.partition and p.leader_id >= 0:
                    known = self.leader
                    if known is None or p.leader_epoch >= known.epoch:
                        if known is None or known.leader_id != p.leader_id:
                            self.leader_moves += known is not None
                        self.leader = LeaderHint(p.leader_id, p.leader_epoch)
                    self._refreshed.set()
                    return True
        return False

    def _named(self) -> str:
        """``raftcore``, or ``raftcore partition 2`` for any partition but the first."""
        return self.topic if self.partition == 0 else f"{self.topic} partition {self.partition}"

    async def _served_topics(self, endpoint: Endpoint) -> list[str]:
        cls = request_spec(ApiKey.METADATA).cls
        body = cls(topics=None, allow_auto_topic_creation=False)
        resp = await self.request(endpoint, ApiKey.METADATA, METADATA_VERSION, body)
        return [t.name for t in resp.topics if t.error_code == Errors.NONE]

    async def _refresh_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._refresh_wanted.wait(), self.metadata_max_age_s)
            self._refresh_wanted.clear()
            try:
                await self.refresh_metadata()
            except (NoLeaderError, RaftcoreError, OSError) as exc:
                logger.debug("background metadata refresh failed: %s", exc)

    def backoff_s(self, attempt: int) -> float:
        """Exponential backoff with jitter (Kafka's retry.backoff.ms / retry.backoff.max.ms)."""
        base = min(self.retry_backoff_max_ms, self.retry_backoff_ms * (2 ** max(attempt - 1, 0)))
        return base * (0.8 + random.random() * 0.4) / 1000


def _no_such_partition(topic: str, partition: int, indexes: list[int]) -> str:
    """``topic raftcore has 3 partitions (0..2); no partition 5``."""
    count = len(indexes)
    span = "0" if count == 1 else f"0..{max(indexes)}"
    plural = "" if count == 1 else "s"
    return f"topic {topic} has {count} partition{plural} ({span}); no partition {partition}"


def _cannot_reach(failures: dict[Endpoint, BaseException]) -> str:
    """``cannot reach 127.0.0.1:9092 (connection refused), ...``, addresses in order."""
    parts = sorted((str(ep), connect_errors.describe(exc)) for ep, exc in failures.items())
    return "cannot reach " + ", ".join(f"{ep} ({why})" for ep, why in parts)
