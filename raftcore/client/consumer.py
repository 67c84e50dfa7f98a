"""An asyncio consumer for raftcore (and Kafka: Fetch v16 on one assigned partition, no group
coordinator).

It reads committed records only (a raftcore leader serves nothing above the high watermark),
in offset order, skipping control batches (the LeaderChange records the leaders write). Leader
changes follow KIP-951 as in the producer: a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
answer that names a newer leader sends the next fetch there at once; otherwise the consumer
backs off with jitter and refreshes metadata.

A poll gives up (ConsumeError, REQUEST_TIMED_OUT) when no leader served it for
``request_timeout_ms``: no leader known, a majority lost, a leader that does not answer and no
other to go to. A hung leader whose successor the other nodes name costs one request timeout,
then the poll goes on at the new leader (with a new request timeout to get its answer).

    async with Consumer(["127.0.0.1:9091"], start="earliest") as consumer:
        async for record in consumer:
            print(record.offset, record.key, record.value)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.connection import ConnectionClosed
from raftcore.connect_errors import describe
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.records import Record, iter_batches, scan_batches
from raftcore.security.config import ClientSecurity

__all__ = ["ConsumeError", "Consumer"]

logger = logging.getLogger(__name__)

FETCH_VERSION = 16
LIST_OFFSETS_VERSION = 7
EARLIEST = -2
LATEST = -1
LEADER_ERRORS = {
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH,
    Errors.LEADER_NOT_AVAILABLE,
}


class ConsumeError(RaftcoreError):
    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"fetch failed: {error_name(error_code)}")
        self.error_code = error_code


class Consumer:
    """Reads one partition of ``topic`` (``partition``, default 0) from ``start``:
    ``"earliest"``, ``"latest"`` or an offset."""

    def __init__(
        self,
        bootstrap: list[str],
        *,
        topic: str = "raftcore",
        partition: int = 0,
        start: str | int = "earliest",
        max_wait_ms: int = 500,
        max_bytes: int = 8 << 20,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        client_id: str = "raftcore-consumer",
        security: ClientSecurity | None = None,
    ) -> None:
        if isinstance(start, str) and start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest', 'latest' or an offset, got {start!r}")
        if isinstance(start, int) and start < 0:
            raise ValueError(f"a start offset must be >= 0, got {start}")
        self.cluster = ClusterClient(
            bootstrap,
            topic=topic,
            partition=partition,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            security=security,
        )
        self.topic = topic
        self.partition = partition
        self.start_at = start
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.position: int | None = start if isinstance(start, int) else None
        self.high_watermark = -1
        self.retries = 0
        self.immediate_retries = 0
        self._attempt = 0
        self._started_at: float | None = None  # a first poll soon after shares its time

    async def start(self) -> None:
        self._started_at = asyncio.get_running_loop().time()
        await self.cluster.start()

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Record]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Record]:
        while True:
            for record in await self.poll():
                yield record

    def seek(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.position = offset

    # ---- polling -------------------------------------------------------------------------------

    async def poll(self) -> list[Record]:
        """The next records (possibly none, after ``max_wait_ms``). Leader changes and lost
        connections are retried; OFFSET_OUT_OF_RANGE and other errors raise ConsumeError."""
        position, data = await self._poll_data()
        return self._decode(data, position)

    async def poll_raw(self) -> tuple[int, Any]:
        """Like :meth:`poll`, undecoded: ``(position, data)``, where ``data`` holds whole record
        batches (control batches included, CRCs not checked yet) below the high watermark, the
        first of which may start before ``position``. The position moves past the last one."""
        position, data = await self._poll_data()
        if data:
            scan = scan_batches(data, check_crc=False)
            if scan.count:
                self.position = int(scan.last_offsets[scan.count - 1]) + 1
        return position, data

    async def _poll_data(self) -> tuple[int, Any]:
        loop = asyncio.get_running_loop()
        budget = self.cluster.request_timeout_s
        deadline = loop.time() + budget  # no leader served us by then: give up
        started, self._started_at = self._started_at, None
        if started is not None and deadline - budget - started < budget:
            deadline = started + budget  # finding the leader at start() took part of it
        why = "no leader known"
        while True:
            left = max(0.01, deadline - loop.time())
            try:
                if self.position is None:
                    self.position = await self._list_offset_once(
                        EARLIEST if self.start_at == "earliest" else LATEST, min(left, budget)
                    )
                position = self.position
                data, outcome = await self._fetch_once(left)
                if outcome != "ok":
                    why = "the node it asked is not the leader any more"
            except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
                logger.debug("fetch failed: %s", exc)
                outcome, data = "retry", None
                why = describe(exc)
                if isinstance(exc, asyncio.TimeoutError):
                    hung = self.cluster.leader
                    why = f"node {hung.leader_id if hung else '?'} did not answer"
                    # who leads now, asked of the others (a little past the deadline at most)
                    await self.cluster.leader_timed_out(max(deadline - loop.time(), 0.1 * budget))
                    now = self.cluster.leader
                    if now is not None and now != hung:  # another leader, or a newer epoch
                        deadline = loop.time() + budget  # a new leader: it gets its timeout
                        outcome = "moved"
            if outcome == "ok":
                self._attempt = 0
                return position, data
            if loop.time() >= deadline:
                raise ConsumeError(
                    Errors.REQUEST_TIMED_OUT,
                    f"no leader served a fetch within {budget:g} s ({why})",
                )
            if outcome == "moved":
                self.immediate_retries += 1
                continue
            self._attempt += 1
            self.retries += 1
            self.cluster.request_refresh()
            pause = min(self.cluster.backoff_s(self._attempt), deadline - loop.time())
            await asyncio.sleep(max(0.0, pause))

    async def list_offset(self, timestamp: int) -> int:
        """The offset for ``timestamp`` (EARLIEST: the log start, LATEST: the high watermark)
        from the leader. A leader change, a new leader not ready yet or a lost connection is
        retried, with backoff, for up to the request timeout; other errors raise
        ConsumeError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cluster.request_timeout_s
        attempt = 0
        while True:
            try:
                return await self._list_offset_once(timestamp)
            except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError):
                attempt += 1
                if loop.time() + self.cluster.backoff_s(attempt) >= deadline:
                    raise
                self.cluster.request_refresh()
                await asyncio.sleep(self.cluster.backoff_s(attempt))

    async def _list_offset_once(self, timestamp: int, timeout_s: float | None = None) -> int:
        conn, _ = await self.cluster.leader_connection()
        cls = request_spec(ApiKey.LIST_OFFSETS).cls
        body = cls(
            replica_id=-1,
            isolation_level=1,
            topics=[
                cls.ListOffsetsTopic(
                    name=self.topic,
                    partitions=[
                        cls.ListOffsetsPartition(
                            partition_index=self.partition,
                            current_leader_epoch=-1,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        resp = await conn.request(
            ApiKey.LIST_OFFSETS,
            LIST_OFFSETS_VERSION,
            body,
            # a hung leader: not the default 30 s
            timeout_s=self.cluster.request_timeout_s if timeout_s is None else timeout_s,
        )
        part = resp.topics[0].partitions[0]
        if part.error_code in LEADER_ERRORS:
            raise ConnectionClosed(f"ListOffsets: {error_name(part.error_code)}")
        if part.error_code != Errors.NONE:
            raise ConsumeError(part.error_code, f"ListOffsets: {error_name(part.error_code)}")
        return part.offset

    async def _fetch_once(self, timeout_s: float | None = None) -> tuple[Any, str]:
        """One fetch from the leader, unanswered for at most ``timeout_s`` (default the request
        timeout); the leader holds it at most ``max_wait_ms``, or half of ``timeout_s``."""
        conn, leader = await self.cluster.leader_connection()
        topic_id = self.cluster.topic_id
        if topic_id is None:
            raise NoLeaderError("no topic id yet")
        cls = request_spec(ApiKey.FETCH).cls
        position = self.position
        assert position is not None
        timeout = self.cluster.request_timeout_s if timeout_s is None else timeout_s
        body = cls(
            replica_id=-1,
            max_wait_ms=max(0, min(self.max_wait_ms, int(timeout * 500))),
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=1,
            session_id=0,
            session_epoch=-1,
            topics=[
                cls.FetchTopic(
                    topic_id=topic_id,
                    partitions=[
                        cls.FetchPartition(
                            partition=self.partition,
                            current_leader_epoch=leader.epoch,
                            fetch_offset=position,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=self.max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        resp = await conn.request(
            ApiKey.FETCH,
            FETCH_VERSION,
            body,
            timeout_s=timeout,
        )
        if resp.error_code != Errors.NONE:
            raise ConsumeError(resp.error_code)
        part = resp.responses[0].partitions[0]
        error = part.error_code
        if error in LEADER_ERRORS:
            hint = part.current_leader
            if (
                hint is not None
                and hint.leader_id >= 0
                and self.cluster.learn_leader(
                    hint.leader_id, hint.leader_epoch, getattr(resp, "node_endpoints", None)
                )
            ):
                return None, "moved"
            return None, "retry"
        if error == Errors.OFFSET_OUT_OF_RANGE:
            raise ConsumeError(error, await self._out_of_range(position, timeout))
        if error != Errors.NONE:
            raise ConsumeError(error, f"fetch at offset {position}: {error_name(error)}")
        self.high_watermark = part.high_watermark
        return part.records, "ok"

    async def _out_of_range(self, position: int, timeout_s: float) -> str:
        """OFFSET_OUT_OF_RANGE in words: where the log starts and ends (the answer carries
        neither, as Kafka's does not), asked of the leader."""
        said = f"fetch at offset {position}: OFFSET_OUT_OF_RANGE"
        try:
            start = await self._list_offset_once(EARLIEST, timeout_s)
            end = await self._list_offset_once(LATEST, timeout_s)
        except (RaftcoreError, NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError):
            return said
        if position < start:
            return (
                f"{said}: offset {position} is below the log start offset {start} (the "
                f"records before it were removed by retention or a snapshot); the log holds "
                f"offsets {start}..{end - 1}"
            )
        return f"{said}: the log holds offsets {start}..{end - 1} (high watermark {end})"

    def _decode(self, data: Any, position: int) -> list[Record]:
        out: list[Record] = []
        if not data:
            return out
        next_offset = position
        for batch in iter_batches(data):
            # A batch may start before the position (the fetch returns whole batches); its
            # records below the position were already returned.
            last = batch.last_offset
            if last < position:
                continue
            if not batch.is_control:
                out.extend(r for r in batch.records() if r.offset >= position)
            next_offset = last + 1
        self.position = next_offset
        return out
