"""How the node's server connections run request handlers (raftcore.node.transport): a handler
that never waits is run to its end at once, with no task; one that waits goes on in a task from
where it stopped; answers go out in request order either way; closing the connection cancels
what still waits."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

import pytest

from raftcore.node.transport import Later, ServerConnection, read_frame

pytestmark = pytest.mark.timeout(30)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class Handlers:
    """Answers b"now:X" at once with X; waits for ``release`` before answering b"wait:X"; and
    records what each handler saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled: list[bytes] = []
        self.tasks_seen: list[asyncio.Task[Any] | None] = []
        self.connections: list[ServerConnection] = []
        self.later: dict[bytes, Later] = {}
        self.went_on_at_once: list[bool] = []

    async def handle(self, conn: ServerConnection, request: bytes) -> Any:
        kind, _, name = bytes(request).partition(b":")  # frames come as bytearrays
        if kind == b"later":  # answered by whoever holds it (a parked fetch's core answer)
            later = Later()
            self.later[name] = later
            return later
        if kind == b"ready":  # answered before the handler even returns
            later = Later()
            later.answer([name])
            return later
        if kind == b"settled":  # waits for what is settled before its task's first step
            loop = asyncio.get_running_loop()
            settled: asyncio.Future[None] = loop.create_future()
            loop.call_soon(settled.set_result, None)
            hops: list[int] = []  # a callback one loop hop after the task's first step
            loop.call_soon(lambda: loop.call_soon(hops.append, 1))
            await settled
            self.went_on_at_once.append(not hops)
        if kind == b"wait":
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
        self.tasks_seen.append((name, len(conn._tasks)))  # type: ignore[arg-type]
        return [name]

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection(reader, writer, self.handle, 1 << 20, "[test]")
        self.connections.append(conn)
        await conn.serve()


@contextlib.asynccontextmanager
async def server_and_client(handlers: Handlers):  # type: ignore[no-untyped-def]
    server = await asyncio.start_server(handlers.accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def test_a_request_answered_without_waiting_is_handled_without_a_task():
    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (reader, writer):
            writer.write(frame(b"now:a") + frame(b"now:b"))
            assert [await read_frame(reader, 100) for _ in range(2)] == [b"a", b"b"]
            # each ran to its end inside the connection's own loop, no task spawned for it
            assert handlers.tasks_seen == [(b"a", 0), (b"b", 0)]
            assert not handlers.connections[0]._tasks

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_waiting_request_goes_on_in_a_task_and_answers_stay_in_request_order():
    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (reader, writer):
            writer.write(frame(b"wait:first") + frame(b"now:second"))
            await asyncio.sleep(0.1)
            conn = handlers.connections[0]
            assert len(conn._tasks) == 1  # the waiting one
            assert handlers.tasks_seen == [(b"second", 1)]  # answered, but not sent before first
            handlers.release.set()
            assert [await read_frame(reader, 100) for _ in range(2)] == [b"first", b"second"]
            await asyncio.sleep(0.05)
            assert not conn._tasks

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_request_whose_wait_is_settled_before_its_task_starts_goes_on_without_a_loop_hop():
    """A Produce queued for its group's write at the end of the iteration waits on a future
    the write settles before the request's task takes its first step: the task goes on at
    once instead of a loop hop later."""

    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (reader, writer):
            writer.write(frame(b"settled:a"))
            assert await read_frame(reader, 100) == b"a"
            assert handlers.went_on_at_once == [True]

    asyncio.run(asyncio.wait_for(main(), 20))


def test_closing_the_connection_cancels_a_request_still_waiting():
    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (_reader, writer):
            writer.write(frame(b"wait:parked"))
            await asyncio.sleep(0.1)
            conn = handlers.connections[0]
            [task] = conn._tasks
            conn.close()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert task.cancelled()
            assert handlers.cancelled == [b"parked"]

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_later_answer_takes_no_task_and_goes_out_in_request_order():
    """A handler may return a Later (the node's raft requests: the core answers a parked fetch
    when records or the high watermark come): no task waits for it, and its answer, when it
    comes, goes out in its turn, before the answers of requests behind it."""

    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (reader, writer):
            writer.write(frame(b"later:first") + frame(b"ready:second") + frame(b"now:third"))
            await asyncio.sleep(0.1)
            conn = handlers.connections[0]
            assert not conn._tasks  # nothing waits in a task
            with pytest.raises(asyncio.TimeoutError):  # second and third wait behind first
                await asyncio.wait_for(read_frame(reader, 100), 0.1)
            handlers.later[b"first"].answer([b"first"])
            got = [await read_frame(reader, 100) for _ in range(3)]
            assert got == [b"first", b"second", b"third"]

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_later_answered_after_the_connection_closed_is_dropped_quietly():
    async def main() -> None:
        handlers = Handlers()
        async with server_and_client(handlers) as (_reader, writer):
            writer.write(frame(b"later:parked"))
            await asyncio.sleep(0.1)
            conn = handlers.connections[0]
            conn.close()
            handlers.later[b"parked"].answer([b"parked"])  # no error, nothing written
            assert conn.closed

    asyncio.run(asyncio.wait_for(main(), 20))
