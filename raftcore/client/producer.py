"""An asyncio producer for raftcore (and Kafka: it speaks Produce v10).

Idempotent by default, as Kafka's producer is since 3.0: it gets a producer id (InitProducerId)
and numbers its batches; a batch retried after a lost answer or a leader change is recognised
by the leader and not written twice. Batches are sent in sequence order with at most
``max_in_flight`` (<= 5, the leader remembers five) unanswered; when one fails, every
unanswered batch is sent again, in order, once the cause is dealt with.

A producer may also resume a known identity (``identity=(producer id, epoch, sequence)``)
instead of asking for one: :mod:`raftcore.client.resumable` does, to write exactly once across
processes. Such a producer never starts a new session: when the leader's sequence for it is not
the one it expects (OUT_OF_ORDER_SEQUENCE_NUMBER on its oldest batch), or a delivery times out,
every unanswered batch fails, and the owner decides (it asks the leader where the log stands).

Leader changes (KIP-951): an error answer that names a leader in a newer epoch than the
producer knew sends the retry there at once; further retries in the same epoch back off
exponentially with jitter while metadata is refreshed in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.connection import ConnectionClosed
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.records import encode_batch
from raftcore.security.config import ClientSecurity

__all__ = ["ProduceError", "Producer"]

logger = logging.getLogger(__name__)

COMPRESSIONS = ("none", "gzip", "zstd")  # what raftcore's batch codec writes
PRODUCE_VERSION = 10
INIT_PRODUCER_ID_VERSION = 4
RETRIABLE = {
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH,
    Errors.LEADER_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT,
    Errors.NOT_ENOUGH_REPLICAS,
    Errors.BROKER_NOT_AVAILABLE,
    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,  # an earlier batch of ours failed: resent in order
}


class ProduceError(RaftcoreError):
    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"produce failed: {error_name(error_code)}")
        self.error_code = error_code


@dataclass
class _Pending:
    sequence: int
    records: list[Any]
    data: bytes | None = None
    attempted: bool = False  # sent at least once: if unanswered, its fate is unknown
    future: asyncio.Future[tuple[int, int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    created: float = field(default_factory=time.monotonic)


class Producer:
    def __init__(
        self,
        bootstrap: list[str],
        *,
        topic: str = "raftcore",
        acks: int = -1,
        idempotent: bool = True,
        compression: str = "none",
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        client_id: str = "raftcore-producer",
        security: ClientSecurity | None = None,
        identity: tuple[int, int, int] | None = None,
    ) -> None:
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1, 0 or 1, got {acks}")
        if idempotent and (acks != -1 or not 1 <= max_in_flight <= 5):
            raise ValueError("an idempotent producer needs acks=-1 and max_in_flight in 1..5")
        if identity is not None and not idempotent:
            raise ValueError("a producer identity needs an idempotent producer")
        if compression not in COMPRESSIONS:
            raise ValueError(
                f"compression {compression!r} is not supported; "
                f"use one of {', '.join(COMPRESSIONS)}"
            )
        self.cluster = ClusterClient(
            bootstrap,
            topic=topic,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            security=security,
        )
        self.topic = topic
        self.acks = acks
        self.idempotent = idempotent
        self.compression = compression
        self.max_in_flight = max_in_flight
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.identity = identity
        self.producer_id, self.producer_epoch, self._sequence = identity or (-1, -1, 0)
        self._queue: list[_Pending] = []  # unanswered, in sequence order
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.retries = 0
        self.immediate_retries = 0

    async def start(self) -> None:
        await self.cluster.start()
        if self.idempotent and self.identity is None:
            await self._init_producer_id()
        self._task = asyncio.ensure_future(self._sender())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for p in self._queue:
            if not p.future.done():
                p.future.set_exception(ProduceError(Errors.BROKER_NOT_AVAILABLE, "producer closed"))
        await self.cluster.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending -------------------------------------------------------------------------------

    async def send(self, records: Iterable[Any]) -> tuple[int, int]:
        """Write ``records`` ((key, value) or (key, value, headers)) as one batch and return
        its (first offset, last offset) once acknowledged (committed, with acks=-1)."""
        recs = list(records)
        if not recs:
            raise ValueError("nothing to send")
        if self._task is None or self._task.done():
            raise ProduceError(Errors.UNKNOWN_SERVER_ERROR, "the producer is not running")
        pending = _Pending(self._sequence, recs)
        self._encode(pending)  # bad records raise here, to the caller, using no sequence number
        if self.idempotent:
            self._sequence = (self._sequence + len(recs)) % 0x80000000
        self._queue.append(pending)
        self._wakeup.set()
        return await pending.future

    def send_nowait(self, records: Iterable[Any]) -> asyncio.Future[tuple[int, int]]:
        """Like ``send`` but returns the future at once (to keep several batches in flight)."""
        return asyncio.ensure_future(self.send(records))

    def _encode(self, p: _Pending) -> bytes:
        if p.data is None:
            p.data = encode_batch(
                p.records,
                base_offset=0,
                leader_epoch=-1,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=p.sequence if self.idempotent else -1,
            )
        return p.data

    async def _sender(self) -> None:
        try:
            await self._send_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail every waiting send rather than hang them
            logger.exception("the producer's sender failed")
            for p in self._queue:
                if not p.future.done():
                    p.future.set_exception(ProduceError(Errors.UNKNOWN_SERVER_ERROR, str(exc)))
            self._queue.clear()

    async def _send_loop(self) -> None:
        attempt = 0
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._expire() and self.idempotent:
                if self.identity is not None:
                    self._fail_all(Errors.REQUEST_TIMED_OUT, "a delivery timed out")
                    continue
                await self._reset_sequences()
            batch = self._queue[: self.max_in_flight]
            if not batch:
                continue
            outcome = await self._send_round(batch)
            if outcome == "ok":
                attempt = 0
                continue
            if outcome == "moved":
                self.immediate_retries += 1
                continue  # KIP-951: a newer leader is known, go there at once
            attempt += 1
            self.retries += 1
            self.cluster.request_refresh()
            await asyncio.sleep(self.cluster.backoff_s(attempt))

    def _expire(self) -> bool:
        """Fail the batches older than the delivery timeout; True if any expired."""
        now = time.monotonic()
        expired = False
        while self._queue and now - self._queue[0].created > self.delivery_timeout_s:
            p = self._queue.pop(0)
            expired = True
            if not p.future.done():
                p.future.set_exception(ProduceError(Errors.REQUEST_TIMED_OUT, "delivery timed out"))
        return expired

    async def _reset_sequences(self) -> None:
        """After an expired batch the leader may still wait for its sequence number, and would
        refuse every later one (OUT_OF_ORDER_SEQUENCE_NUMBER) forever. As Kafka's producer does
        (KIP-360), start a new producer session: batches already sent under the old one may
        have been written, so resending them under new numbers could write them twice -- they
        fail as indeterminate; batches never sent are renumbered from 0."""
        keep = []
        for p in self._queue:
            if p.attempted:
                if not p.future.done():
                    p.future.set_exception(
                        ProduceError(
                            Errors.REQUEST_TIMED_OUT,
                            "an earlier batch's delivery timed out; this batch was sent and its "
                            "fate is unknown (the producer starts a new session)",
                        )
                    )
            else:
                keep.append(p)
        self._queue = keep
        while True:
            try:
                await self._init_producer_id()
                break
            except ProduceError as exc:  # no leader for a whole delivery timeout: keep trying
                logger.warning("no new producer session yet: %s", exc)
                self._expire()
        sequence = 0
        for p in self._queue:  # with the sends that arrived meanwhile, none of them sent
            p.sequence, p.data = sequence, None
            sequence += len(p.records)
        self._sequence = sequence % 0x80000000

    async def _send_round(self, batch: list[_Pending]) -> str:
        """Send ``batch`` (in sequence order, pipelined) to the leader. 'ok' when the first
        one succeeded, 'moved' when a newer leader was learned, 'retry' otherwise."""
        try:
            conn, leader = await self.cluster.leader_connection()
        except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
            logger.debug("no leader connection: %s", exc)
            return "retry"
        cls = request_spec(ApiKey.PRODUCE).cls
        requests = []
        for p in batch:
            p.attempted = True
            body = cls(
                transactional_id=None,
                acks=self.acks,
                timeout_ms=self.request_timeout_ms,
                topic_data=[
                    cls.TopicProduceData(
                        name=self.topic,
                        partition_data=[cls.PartitionProduceData(index=0, records=self._encode(p))],
                    )
                ],
            )
            requests.append(
                asyncio.ensure_future(
                    conn.request(
                        ApiKey.PRODUCE,
                        PRODUCE_VERSION,
                        body,
                        timeout_s=self.request_timeout_ms / 1000,
                        expect_response=self.acks != 0,
                    )
                )
            )
        results = await asyncio.gather(*requests, return_exceptions=True)
        outcome = "ok"
        for p, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                logger.debug("produce to node %d failed: %s", leader.leader_id, result)
                self.cluster.request_refresh()
                return "retry" if outcome == "ok" and p is batch[0] else outcome
            if self.acks == 0:
                self._complete(p, (-1, -1))
                continue
            verdict = self._handle(p, result, leader)
            if verdict != "ok":
                return verdict if p is batch[0] else outcome
        return outcome

    def _handle(self, p: _Pending, resp: Any, leader: Any) -> str:
        part = resp.responses[0].partition_responses[0]
        error = part.error_code
        if error == Errors.NONE:
            count = len(p.records)
            self._complete(p, (part.base_offset, part.base_offset + count - 1))
            return "ok"
        resumed = self.identity is not None and self._queue and p is self._queue[0]
        if error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and resumed:
            # The leader's sequence for this producer is not ours: the owner resyncs.
            self._fail_all(error, "the leader's last sequence for this producer differs")
            return "ok"
        if error in RETRIABLE:
            hint = part.current_leader
            if (
                hint is not None
                and hint.leader_id >= 0
                and self.cluster.learn_leader(
                    hint.leader_id, hint.leader_epoch, resp.node_endpoints
                )
            ):
                return "moved"
            return "retry"
        self._queue.remove(p)
        if not p.future.done():
            p.future.set_exception(ProduceError(error))
        return "ok"

    def _fail_all(self, error: int, why: str) -> None:
        for p in self._queue:
            if not p.future.done():
                p.future.set_exception(ProduceError(error, f"{error_name(error)}: {why}"))
        self._queue.clear()

    def _complete(self, p: _Pending, offsets: tuple[int, int]) -> None:
        if p in self._queue:
            self._queue.remove(p)
        if not p.future.done():
            p.future.set_result(offsets)

    # ---- producer id ---------------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        cls = request_spec(ApiKey.INIT_PRODUCER_ID).cls
        body = cls(
            transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
        )
        attempt = 0
        deadline = time.monotonic() + self.delivery_timeout_s
        while True:
            try:
                conn, _ = await self.cluster.leader_connection()
                resp = await conn.request(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, body)
                if resp.error_code == Errors.NONE:
                    self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                    return
                error = resp.error_code
            except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
                error = Errors.NETWORK_EXCEPTION
                logger.debug("InitProducerId failed: %s", exc)
            attempt += 1
            if time.monotonic() > deadline:
                raise ProduceError(error, "could not get a producer id")
            await self.cluster.refresh_metadata()
            await asyncio.sleep(self.cluster.backoff_s(attempt))
