"""What the node does when a piece of it fails: an exception out of a step of the Raft core
stops the node (the step was left half done), and a failing response handler does not end
the connection to a peer."""

from __future__ import annotations

import asyncio
import struct

import pytest
from test_node import cluster, leader_of, run

from raftcore.node.transport import PeerConnection

pytestmark = pytest.mark.timeout(60)


def test_an_exception_out_of_a_core_step_stops_the_node(tmp_path, caplog):
    """Before, only RaftInvariantError stopped the node; anything else escaped into the
    callback that ran the step (a timer, a peer's read loop) and left the node running with a
    core whose step was half done."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)

            def broken_poll(now):
                raise OSError(5, "Input/output error")

            follower.core.poll = broken_poll
            follower._on_poll_timer()
            assert follower._closing is not None
            await asyncio.wait_for(asyncio.shield(follower._closing), 5)
            assert follower._server is None or not follower._server.is_serving()
            # The others go on.
            others = [n for n in nodes if n is not follower]
            await leader_of(others)

    run(main())
    assert "a step of the Raft core failed; stopping" in caplog.text


def test_a_peer_connection_survives_a_failing_response_handler():
    """The handler raising on one response must not end the task reading the connection:
    the next response is still delivered (a dead reader would leave the peer silent
    forever, the connection open and nothing reconnecting)."""

    async def main():
        async def serve(reader, writer):
            for correlation_id in (1, 2):
                writer.write(struct.pack(">ii", 4, correlation_id))
            await writer.drain()
            await asyncio.sleep(5)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        seen: list[int] = []
        second = asyncio.Event()

        def on_response(correlation_id: int, frame: bytes) -> None:
            seen.append(correlation_id)
            if correlation_id == 1:
                raise ValueError("a handler bug")
            second.set()

        peer = PeerConnection("test", "127.0.0.1", port, on_response)
        peer.start()
        try:
            await asyncio.wait_for(second.wait(), 5)
        finally:
            await peer.stop()
            server.close()
        assert seen == [1, 2]

    asyncio.run(main())
