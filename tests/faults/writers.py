"""Concurrent writers, each in its own thread, each writing its own unique values at a bounded
rate and count, and recording every attempt in the shared ``History``.

- ``CkWriter``: confluent-kafka (librdkafka), idempotent, acks=all, partition 0 -- the
  configuration tests/test_real_clients.py uses. The delivery report decides: an offset is
  ``ok``; any error is ``info`` (librdkafka's errors after a send, timeouts included, do not
  say the record is absent). A fatal error (the idempotent producer gave up) ends the client
  session; the writer opens a new one and goes on with its sequence.
- ``RaftcoreWriter``: raftcore.client.Producer (idempotent), one record per send, up to
  ``window`` sends in flight. A ProduceError or a timeout is ``info``. After a delivery timeout
  the producer's sequence has a gap (the expired batch used its numbers), so the writer opens a
  new session (a new producer id), as Kafka's producer resets its idempotent state.

Each record's key is its value, so an LMDB state machine (``--snapshots``) holds one pair per
committed value, which the checker reads back.

No writer retries a value itself: a value is attempted once (the clients' own retries are
theirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

from .history import Attempt, History
from .security import RunSecurity

__all__ = ["CkWriter", "RaftcoreWriter", "Writer"]

TOPIC = "raftcore"


class Writer(threading.Thread):
    def __init__(
        self,
        name: str,
        bootstrap: list[str],
        history: History,
        *,
        rate: float,
        max_count: int,
        window: int,
        drain_s: float = 15.0,
        security: RunSecurity | None = None,
    ) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.writer = name
        self.bootstrap = bootstrap
        self.history = history
        self.rate = rate
        self.max_count = max_count
        self.window = window
        self.drain_s = drain_s
        self.security = security or RunSecurity()
        self.stopping = threading.Event()
        self.seq = 0
        self.sessions = 0
        self.crash: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()

    def _more(self) -> bool:
        return not self.stopping.is_set() and self.seq < self.max_count

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the harness, never silently lost
            self.crash = exc
            self.history.note(f"{self.writer}: writer thread crashed: {exc!r}")

    def _run(self) -> None:
        raise NotImplementedError


class CkWriter(Writer):
    def __init__(self, *args, client_log: logging.Logger | None = None, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.client_log = client_log

    def _config(self, fatal: threading.Event) -> dict:
        def on_error(err) -> None:  # type: ignore[no-untyped-def]
            if err.fatal():
                self.history.note(f"{self.writer}: fatal client error: {err}")
                fatal.set()

        conf = {
            "bootstrap.servers": ",".join(self.bootstrap),
            "client.id": f"rcf-{self.writer}",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 10000,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
            "socket.connection.setup.timeout.ms": 3000,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": on_error,
        }
        if self.client_log is not None:
            conf["logger"] = self.client_log
        conf.update(self.security.confluent())
        return conf

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        while self._more():
            self.sessions += 1
            session = self.sessions
            fatal = threading.Event()
            in_flight = [0]
            mine: list[Attempt] = []
            producer = Producer(self._config(fatal))

            def callback(a: Attempt, in_flight: list[int] = in_flight):  # type: ignore[no-untyped-def]
                def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
                    in_flight[0] -= 1
                    if err is None:
                        self.history.complete(a, "ok", offset=msg.offset())
                    else:
                        self.history.complete(a, "info", error=err.name() or str(err))

                return delivered

            next_at = time.monotonic()
            try:
                while self._more() and not fatal.is_set():
                    if in_flight[0] >= self.window:
                        producer.poll(0.05)
                        continue
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        producer.poll(min(delay, 0.05))
                        continue
                    next_at = max(next_at + 1 / self.rate, time.monotonic() - 1)
                    a = self.history.invoke(self.writer, self.seq, session)
                    self.seq += 1
                    mine.append(a)
                    try:
                        producer.produce(
                            TOPIC,
                            key=a.value,  # unique: the state machine keeps every value
                            value=a.value,
                            partition=0,
                            on_delivery=callback(a),
                        )
                        in_flight[0] += 1
                    except BufferError:  # the client's queue is full: never sent
                        self.history.complete(a, "fail", error="local queue full")
                    except KafkaException as exc:  # refused before sending (fatal state)
                        self.history.complete(a, "fail", error=f"refused: {exc}")
                        raise
                    producer.poll(0)
            except KafkaException as exc:  # a fatal error (poll raises it too): new session
                self.history.note(f"{self.writer}: session {session} ended: {exc}")
            # message.timeout.ms bounds how long librdkafka keeps a message
            with contextlib.suppress(KafkaException):
                producer.flush(self.drain_s)
            for a in mine:
                if a.outcome == "pending":
                    self.history.complete(a, "info", error="no delivery report before the end")
            with contextlib.suppress(Exception):
                producer.purge()
                producer.flush(1)
            del producer


class RaftcoreWriter(Writer):
    _reset_reason = ""

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from raftcore.client import Producer

        while self._more():
            self.sessions += 1
            session = self.sessions
            producer = Producer(
                self.bootstrap,
                request_timeout_ms=3000,
                delivery_timeout_ms=10000,
                client_id=f"rcf-{self.writer}",
                security=self.security.client(),
            )
            try:
                await asyncio.wait_for(producer.start(), 15)
            except Exception as exc:
                self.history.note(f"{self.writer}: session {session} did not start: {exc!r}")
                with contextlib.suppress(Exception):
                    await producer.close()
                await asyncio.sleep(0.5)
                continue
            reset = asyncio.Event()
            slots = asyncio.Semaphore(self.window)
            tasks: set[asyncio.Task[None]] = set()
            next_at = time.monotonic()
            while self._more() and not reset.is_set():
                try:
                    await asyncio.wait_for(slots.acquire(), 0.2)
                except asyncio.TimeoutError:
                    continue
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                next_at = max(next_at + 1 / self.rate, time.monotonic() - 1)
                a = self.history.invoke(self.writer, self.seq, session)
                self.seq += 1
                tasks.add(asyncio.ensure_future(self._one(producer, a, slots, reset)))
                tasks = {t for t in tasks if not t.done()}
            if tasks:
                await asyncio.wait(tasks, timeout=self.drain_s)
            await producer.close()  # fails what is still waiting: indeterminate
            if tasks:
                await asyncio.wait(tasks, timeout=5)
            if reset.is_set():
                self.history.note(f"{self.writer}: new session after {self._reset_reason}")

    async def _one(self, producer, a: Attempt, slots: asyncio.Semaphore, reset) -> None:  # type: ignore[no-untyped-def]
        from raftcore.client import ProduceError
        from raftcore.error_codes import Errors, error_name

        try:
            first, _ = await producer.send([(a.value, a.value)])
            self.history.complete(a, "ok", offset=first)
        except ProduceError as exc:
            self.history.complete(a, "info", error=error_name(exc.error_code) + f" ({exc})")
            if exc.error_code == Errors.REQUEST_TIMED_OUT and not reset.is_set():
                self._reset_reason = f"{a.value.decode()}: {exc}"
                reset.set()
        except Exception as exc:
            self.history.complete(a, "info", error=repr(exc))
            if not reset.is_set():
                self._reset_reason = f"{a.value.decode()}: {exc!r}"
                reset.set()
        finally:
            slots.release()
