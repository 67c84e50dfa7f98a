"""An asyncio producer for raftcore (and Kafka: it speaks Produce v10).

Idempotent by default, as Kafka's producer is since 3.0: it gets a producer id (InitProducerId)
and numbers its records; a batch retried after a lost answer or a leader change is recognised
by the leader and not written twice.

**A sliding window of requests.** Batches go to the leader in sequence order, each as soon as
fewer than ``max_in_flight`` requests are unanswered (not in rounds: an answer makes room for
the next request at once). Answers are handled as they come, in request order (a Kafka
connection answers in order). When one fails, no new request is sent; the answers still due
are handled (a later batch that succeeded is done), and then every unanswered batch is sent
again, oldest first, once the cause is dealt with -- never reordered, and never written twice,
since the leader recognises each resent batch it already has. That needs the leader to remember
as many batches per producer as may be unanswered: Kafka brokers remember five (hence Kafka's
limit of five in flight); raftcore nodes remember sixteen
(:data:`raftcore.kafka.producer_state.REMEMBERED_BATCHES`). So ``max_in_flight`` is 5 by
default and may be raised to 16 by whoever knows it talks to raftcore nodes (a client cannot
tell from the protocol, and a window wider than the leader's would turn a lost answer into
OUT_OF_ORDER_SEQUENCE_NUMBER for the oldest batch: not a duplicate, but a failed delivery).

**Packing.** Records queued by several ``send()`` calls that have not gone out yet are packed
into one record batch of up to ``max_request_bytes`` (1 MiB by default, 1-8 MiB accepted;
the request around it included), and each ``send()`` still gets the offsets of its own records.
One batch, not several per request: Produce v3+ carries one batch per partition, and a Kafka
broker (and the node, for a batch with a duplicate in it) refuses more, so bigger batches work
with every broker and keep the leader's checks as they are. A single ``send()`` is never
split (its records stay one batch, so its offsets stay contiguous), even when it alone is
larger. A producer that resumes an identity packs nothing: its batches must be the same in
every attempt.

A producer may also resume a known identity (``identity=(producer id, epoch, sequence)``)
instead of asking for one: :mod:`raftcore.client.resumable` does, to write exactly once across
processes. Such a producer never starts a new session: when the leader's sequence for it is not
the one it expects (OUT_OF_ORDER_SEQUENCE_NUMBER on its oldest batch), or a delivery times out,
every unanswered batch fails, and the owner decides (it asks the leader where the log stands).

Leader changes (KIP-951): an error answer that names a leader in a newer epoch than the
producer knew sends the retry there at once; further retries in the same epoch back off
exponentially with jitter while metadata is refreshed in the background.

**The delivery timeout holds.** Every ``send()`` has an answer within ``delivery_timeout_ms``
of the call (Kafka's ``delivery.timeout.ms``; 120 s by default, as Kafka's), whatever the
producer is waiting for then -- a hung leader, no leader at all, a producer id: a timer fails
its future at that moment. When the records were never sent, that is a
:class:`ProduceError` (REQUEST_TIMED_OUT): they are not in the log. When they were sent and no
verdict came (no answer, or NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT from a leader that may
have appended them: "not acknowledged" is not "not written", see docs/raft.md), it is an
:class:`OutcomeUnknownError`: they may be committed, now or by a later leader. ``close()``
with sends unanswered reports them the same way. ``request_timeout_ms`` bounds one request
(and one wait for a node), not a delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.connection import ConnectionClosed
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.kafka.producer_state import REMEMBERED_BATCHES
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.records import encode_batch
from raftcore.security.config import ClientSecurity

__all__ = ["MAX_IN_FLIGHT", "OutcomeUnknownError", "ProduceError", "Producer"]

logger = logging.getLogger(__name__)

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")  # Kafka's codecs
PRODUCE_VERSION = 10
INIT_PRODUCER_ID_VERSION = 4
KAFKA_MAX_IN_FLIGHT = 5  # what a Kafka broker's idempotence window allows
MAX_IN_FLIGHT = REMEMBERED_BATCHES  # what a raftcore leader's allows (16)
MAX_REQUEST_BYTES = (1 << 20, 8 << 20)  # the accepted range of max_request_bytes
_BATCH_HEADER = 61  # bytes of a record batch before its records
_RECORD_SLACK = 3  # a record's offset delta (and length) varints may grow this much when packed
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
    """The records were not acknowledged. Exactly this class: they are not in the log (never
    sent, or refused with a definite error). The subclass :class:`OutcomeUnknownError`: they
    may be."""

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"produce failed: {error_name(error_code)}")
        self.error_code = error_code


class OutcomeUnknownError(ProduceError):
    """The records were sent and no verdict came before the delivery timeout (or the
    producer's close): they may have been committed, or may be later by the next leader."""

    def __init__(self, error_code: int = Errors.REQUEST_TIMED_OUT, message: str = "") -> None:
        super().__init__(
            error_code,
            message or _UNKNOWN,
        )


_UNKNOWN = "sent, but no verdict within the delivery timeout: it may be committed"
_NOT_SENT = "never sent within the delivery timeout (no leader took it)"


@dataclass(eq=False)  # compared by identity
class _Pending:
    """The records of one ``send()``; numbered from ``sequence``."""

    sequence: int
    records: list[Any]
    data: bytes | None = None  # these records alone, as a batch
    future: asyncio.Future[tuple[int, int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    created: float = field(default_factory=time.monotonic)
    sent: bool = False  # handed to a connection once (its outcome is unknown until answered)

    def fail(self, error: int, why: str = "") -> None:
        """Fail the future: an unknown outcome if these records were ever sent."""
        if self.future.done():
            return
        if self.sent:
            self.future.set_exception(OutcomeUnknownError(error, why))
        else:
            self.future.set_exception(ProduceError(error, why))


@dataclass(eq=False)  # compared by identity: two batches may hold the same bytes
class _Batch:
    """One request's record batch: the records of one or more sends, in sequence order. Once
    sent it never changes (a retry must be the same batch for the leader to recognise it)."""

    sends: list[_Pending]
    data: bytes

    @property
    def created(self) -> float:
        return self.sends[0].created


class Producer:
    def __init__(
        self,
        bootstrap: list[str],
        *,
        topic: str = "raftcore",
        partition: int = 0,
        acks: int = -1,
        idempotent: bool = True,
        compression: str = "none",
        max_in_flight: int = KAFKA_MAX_IN_FLIGHT,
        max_request_bytes: int = MAX_REQUEST_BYTES[0],
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
        if max_in_flight < 1 or (idempotent and (acks != -1 or max_in_flight > MAX_IN_FLIGHT)):
            raise ValueError(
                f"an idempotent producer needs acks=-1 and max_in_flight in 1..{MAX_IN_FLIGHT} "
                f"(at most {KAFKA_MAX_IN_FLIGHT} with a Kafka broker)"
            )
        if not MAX_REQUEST_BYTES[0] <= max_request_bytes <= MAX_REQUEST_BYTES[1]:
            raise ValueError(
                f"max_request_bytes must be in {MAX_REQUEST_BYTES[0]}..{MAX_REQUEST_BYTES[1]}, "
                f"got {max_request_bytes}"
            )
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
            partition=partition,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            security=security,
        )
        self.topic = topic
        self.partition = partition  # every record goes to it: no partitioner here
        self.acks = acks
        self.idempotent = idempotent
        self.compression = compression
        self.max_in_flight = max_in_flight
        self.max_request_bytes = max_request_bytes
        # The request around the batch: header, client id, topic name, fields (< 64 bytes).
        overhead = 64 + len(client_id.encode()) + len(topic.encode())
        self._max_batch_bytes = max_request_bytes - overhead
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.identity = identity
        self.producer_id, self.producer_epoch, self._sequence = identity or (-1, -1, 0)
        self._queue: deque[_Pending] = deque()  # sends not yet in a batch, in sequence order
        self._batches: list[_Batch] = []  # sent and unanswered, in sequence order
        self._wakeup = asyncio.Event()
        self._deadline_hit = False  # a send's delivery timeout passed: the sender expires it
        self._task: asyncio.Task[None] | None = None
        self.retries = 0
        self.immediate_retries = 0

    async def start(self) -> None:
        """Find the leader and (idempotent) get a producer id, within the delivery timeout
        in all (the leader within the request timeout, if shorter)."""
        deadline = time.monotonic() + self.delivery_timeout_s
        await self.cluster.start(min(self.delivery_timeout_s, self.cluster.request_timeout_s))
        if self.idempotent and self.identity is None:
            await self._init_producer_id(deadline)
        self._task = asyncio.ensure_future(self._sender())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._fail_all(Errors.BROKER_NOT_AVAILABLE, "the producer closed before a verdict")
        await self.cluster.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending -------------------------------------------------------------------------------

    async def send(self, records: Iterable[Any]) -> tuple[int, int]:
        """Write ``records`` ((key, value) or (key, value, headers)) and return their (first
        offset, last offset) once acknowledged (committed, with acks=-1). They go as one batch,
        or inside a bigger one with the records of other sends queued with them."""
        return await self._queue_send(records)

    def send_nowait(self, records: Iterable[Any]) -> asyncio.Future[tuple[int, int]]:
        """Like ``send`` but returns the future at once (to keep several batches in flight);
        the records are queued before it returns. Bad records fail the future."""
        try:
            return self._queue_send(records)
        except Exception as exc:
            failed: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed

    def _queue_send(self, records: Iterable[Any]) -> asyncio.Future[tuple[int, int]]:
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
        # The delivery timeout holds whatever the sender waits for then (a hung leader, no
        # leader, a producer id): the future fails at its deadline, the sender tidies up next.
        timer = asyncio.get_running_loop().call_later(
            self.delivery_timeout_s, self._deadline_passed, pending
        )
        pending.future.add_done_callback(lambda _: timer.cancel())
        self._wakeup.set()
        return pending.future

    def _deadline_passed(self, p: _Pending) -> None:
        p.fail(Errors.REQUEST_TIMED_OUT, _UNKNOWN if p.sent else _NOT_SENT)
        self._deadline_hit = True
        self._wakeup.set()

    def _encode(self, p: _Pending) -> bytes:
        if p.data is None:
            p.data = self._encode_records(p.records, p.sequence)
        return p.data

    def _encode_records(self, records: list[Any], sequence: int) -> bytes:
        return encode_batch(
            records,
            base_offset=0,
            leader_epoch=-1,
            compression=self.compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=sequence if self.idempotent else -1,
        )

    def _next_batch(self) -> _Batch | None:
        """The queued sends that fit in one request, as one batch (None: nothing queued)."""
        while self._queue and self._queue[0].future.done():  # expired unsent: never sent now
            self._queue.popleft()
        if not self._queue:
            return None
        first = self._queue.popleft()
        sends = [first]
        if self.identity is None:  # a resumable writer's batches must be as it sent them
            size = len(self._encode(first))
            records = len(first.records)
            while self._queue and not self._queue[0].future.done():
                nxt = self._queue[0]
                grown = size + len(self._encode(nxt)) - _BATCH_HEADER
                if grown + _RECORD_SLACK * (records + len(nxt.records)) > self._max_batch_bytes:
                    break
                sends.append(self._queue.popleft())
                size, records = grown, records + len(nxt.records)
        while len(sends) > 1:
            data = self._encode_records([r for p in sends for r in p.records], first.sequence)
            if len(data) <= self._max_batch_bytes:
                return _Batch(sends, data)
            self._queue.appendleft(sends.pop())  # compression packed worse: one send fewer
        return _Batch(sends, self._encode(first))

    async def _sender(self) -> None:
        try:
            await self._send_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail every waiting send rather than hang them
            logger.exception("the producer's sender failed")
            self._fail_all(Errors.UNKNOWN_SERVER_ERROR, str(exc))

    async def _send_loop(self) -> None:
        attempt = 0
        while True:
            if not self._batches and not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._expire() and self.idempotent:
                if self.identity is not None:
                    self._fail_all(Errors.REQUEST_TIMED_OUT, "a delivery timed out")
                    continue
                await self._reset_sequences()
            if not self._batches and not self._queue:
                continue
            outcome = await self._send_window()
            if outcome in ("ok", "expired"):
                attempt = 0
                continue
            if outcome == "moved":
                self.immediate_retries += 1
                continue  # KIP-951: a newer leader is known, go there at once
            if outcome == "timeout":  # a hung leader: not the same one again at once
                await self.cluster.leader_timed_out()
            attempt += 1
            self.retries += 1
            self.cluster.request_refresh()
            await asyncio.sleep(self.cluster.backoff_s(attempt))

    def _expire(self) -> bool:
        """Fail the batches and sends older than the delivery timeout, oldest first (only
        between windows: nothing is in flight); True if any expired."""
        now = time.monotonic()
        expired = False
        self._deadline_hit = False

        def due(p: _Pending) -> bool:
            return p.future.done() or now - p.created >= self.delivery_timeout_s

        while self._batches and due(self._batches[0].sends[0]):
            expired = True
            self._fail(self._batches.pop(0), Errors.REQUEST_TIMED_OUT)
        while not self._batches and self._queue and due(self._queue[0]):
            expired = True
            self._queue.popleft().fail(Errors.REQUEST_TIMED_OUT, _NOT_SENT)
        return expired

    async def _reset_sequences(self) -> None:
        """After an expired batch the leader may still wait for its sequence number, and would
        refuse every later one (OUT_OF_ORDER_SEQUENCE_NUMBER) forever. As Kafka's producer does
        (KIP-360), start a new producer session: batches already sent under the old one may
        have been written, so resending them under new numbers could write them twice -- they
        fail as indeterminate; sends never sent are renumbered from 0."""
        for batch in self._batches:
            self._fail(
                batch,
                Errors.REQUEST_TIMED_OUT,
                "an earlier batch's delivery timed out; this batch was sent and its fate is "
                "unknown (the producer starts a new session)",
            )
        self._batches = []
        while True:
            try:
                await self._init_producer_id(time.monotonic() + self.delivery_timeout_s)
                break
            except ProduceError as exc:  # no leader for a whole delivery timeout: keep trying
                logger.warning("no new producer session yet: %s", exc)
                self._expire()
        self._queue = deque(p for p in self._queue if not p.future.done())
        sequence = 0
        for p in self._queue:  # with the sends that arrived meanwhile, none of them sent
            p.sequence, p.data = sequence, None
            sequence += len(p.records)
        self._sequence = sequence % 0x80000000

    async def _send_window(self) -> str:
        """Send the unanswered batches, then the queued sends, to the leader, keeping up to
        ``max_in_flight`` requests unanswered, until none is left or one fails. 'ok' when all
        were answered or one failed after others succeeded (resend at once), 'moved' when a
        newer leader was learned, 'timeout' when the leader left a request unanswered for the
        request timeout, 'retry' otherwise."""
        try:
            conn, leader = await self.cluster.leader_connection()
        except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
            logger.debug("no leader connection: %s", exc)
            return "retry"
        window: deque[tuple[_Batch, asyncio.Future[Any]]] = deque()
        failure: str | None = None  # once set, nothing more is sent in this window
        progressed = False
        try:
            while True:
                self._wakeup.clear()  # set by send() and by every answer
                # While nothing failed, the window holds the oldest unanswered batches.
                while (
                    failure is None and not self._deadline_hit and len(window) < self.max_in_flight
                ):
                    if len(window) < len(self._batches):
                        batch = self._batches[len(window)]  # unanswered in an earlier window
                    else:
                        new = self._next_batch()
                        if new is None:
                            break
                        batch = new
                        self._batches.append(batch)
                    window.append((batch, self._request(conn, batch)))
                if not window:
                    break
                batch, answer = window[0]
                if not answer.done():
                    if self._deadline_hit:  # a send's delivery timed out: expire it now
                        return "expired"
                    await self._wakeup.wait()
                    continue
                window.popleft()
                verdict = self._answered(batch, answer, leader.leader_id)
                if verdict == "ok":
                    progressed = progressed or failure is None
                elif failure is None:
                    failure = verdict
        finally:
            for _, answer in window:  # cancelled: nobody will read these
                answer.cancel()
        if failure is None or failure == "stop" or progressed or self._deadline_hit:
            return "ok"  # (a deadline passed: expire first, then go on without a backoff)
        return failure

    def _request(self, conn: Any, batch: _Batch) -> asyncio.Future[Any]:
        for p in batch.sends:  # from now on the leader may append them
            p.sent = True
        cls = request_spec(ApiKey.PRODUCE).cls
        body = cls(
            transactional_id=None,
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topic_data=[
                cls.TopicProduceData(
                    name=self.topic,
                    partition_data=[
                        cls.PartitionProduceData(index=self.partition, records=batch.data)
                    ],
                )
            ],
        )
        answer = asyncio.ensure_future(
            conn.request(
                ApiKey.PRODUCE,
                PRODUCE_VERSION,
                body,
                timeout_s=self.request_timeout_ms / 1000,
                expect_response=self.acks != 0,
            )
        )
        answer.add_done_callback(lambda _: self._wakeup.set())
        return answer

    def _answered(self, batch: _Batch, answer: asyncio.Future[Any], leader_id: int) -> str:
        exc = None if answer.cancelled() else answer.exception()
        if answer.cancelled() or exc is not None:
            logger.debug("produce to node %d failed: %s", leader_id, exc)
            self.cluster.request_refresh()
            # unanswered for the request timeout: the sender asks the others who leads now
            return "timeout" if isinstance(exc, asyncio.TimeoutError) else "retry"
        if self.acks == 0:
            self._complete(batch, -1)
            return "ok"
        return self._handle(batch, answer.result())

    def _handle(self, batch: _Batch, resp: Any) -> str:
        part = resp.responses[0].partition_responses[0]
        error = part.error_code
        if error == Errors.NONE:
            self._complete(batch, part.base_offset)
            return "ok"
        resumed = self.identity is not None and self._batches and batch is self._batches[0]
        if error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and resumed:
            # The leader's sequence for this producer is not ours: the owner resyncs.
            self._fail_all(error, "the leader's last sequence for this producer differs")
            return "stop"
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
        if batch in self._batches:
            self._batches.remove(batch)
        self._fail(batch, error)
        return "ok"

    def _fail(self, batch: _Batch, error: int, why: str = "") -> None:
        for p in batch.sends:
            p.fail(error, why)

    def _fail_all(self, error: int, why: str) -> None:
        message = f"{error_name(error)}: {why}"
        for batch in self._batches:
            self._fail(batch, error, message)
        for p in self._queue:
            p.fail(error, message)
        self._batches = []
        self._queue.clear()

    def _complete(self, batch: _Batch, base_offset: int) -> None:
        """Each send of the batch gets its own records' offsets ((-1, -1) with acks=0)."""
        if batch in self._batches:
            self._batches.remove(batch)
        offset = base_offset
        for p in batch.sends:
            count = len(p.records)
            if not p.future.done():
                p.future.set_result((offset, offset + count - 1) if offset >= 0 else (-1, -1))
            if offset >= 0:
                offset += count

    # ---- producer id ---------------------------------------------------------------------------

    async def _init_producer_id(self, deadline: float | None = None) -> None:
        """A producer id from the leader, retried until ``deadline`` (default: a delivery
        timeout from now); no request or wait goes past it."""
        cls = request_spec(ApiKey.INIT_PRODUCER_ID).cls
        body = cls(
            transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
        )
        attempt = 0
        if deadline is None:
            deadline = time.monotonic() + self.delivery_timeout_s

        def left() -> float:
            return max(0.01, deadline - time.monotonic())

        while True:
            timed_out = False
            try:
                conn, _ = await asyncio.wait_for(self.cluster.leader_connection(), left())
                resp = await conn.request(
                    ApiKey.INIT_PRODUCER_ID,
                    INIT_PRODUCER_ID_VERSION,
                    body,
                    # a hung leader: not 30 s, and not past the deadline
                    timeout_s=min(self.request_timeout_ms / 1000, left()),
                )
                if resp.error_code == Errors.NONE:
                    self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                    return
                error = resp.error_code
            except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
                error = Errors.NETWORK_EXCEPTION
                logger.debug("InitProducerId failed: %s", exc)
                timed_out = isinstance(exc, asyncio.TimeoutError)
            attempt += 1
            if time.monotonic() >= deadline:
                raise ProduceError(
                    error,
                    f"could not get a producer id in time ({error_name(error)}"
                    f"{', the leader did not answer' if timed_out else ''}): nothing was sent",
                )
            if timed_out:  # a hung leader: the others are asked first who leads now
                await self.cluster.leader_timed_out(left())
            else:
                await self.cluster.refresh_metadata(left())
            await asyncio.sleep(min(self.cluster.backoff_s(attempt), left()))
