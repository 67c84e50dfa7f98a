"""What a node's log says of a client connection it closes (issue 12's audit): the client's
address as ``host:port``, as the TLS lines say it, not the repr of a Python tuple."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from pathlib import Path

import pytest

from raftcore.node import Endpoint, NodeConfig, RaftNode
from raftcore.node.local_cluster import free_ports


def test_a_connection_closed_for_a_too_large_frame_names_the_client_as_host_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (port,) = free_ports(1)

    async def scenario() -> str:
        config = NodeConfig(1, {1: Endpoint("127.0.0.1", port)}, str(tmp_path / "n1"), "c")
        node = RaftNode(config)
        await node.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            local = writer.get_extra_info("sockname")
            writer.write(struct.pack(">i", 0x7FFFFFF0))  # a frame far above the limit
            await writer.drain()
            await asyncio.wait_for(reader.read(), 5)  # the node closes the connection
            writer.close()
            return f"{local[0]}:{local[1]}"
        finally:
            await node.stop()

    caplog.set_level(logging.WARNING, logger="raftcore.node.transport")
    client = asyncio.run(asyncio.wait_for(scenario(), 30))
    lines = [r.getMessage() for r in caplog.records if "closing connection from" in r.getMessage()]
    assert lines and f"[node 1] closing connection from {client}: " in lines[0], lines


def test_a_connection_accepted_as_the_node_stops_is_closed_not_left_waiting(
    tmp_path: Path,
) -> None:
    """A connection the server accepted in the loop iteration before it closed starts after
    the node closed the others. Were it served, it would wait for a close that never comes,
    and the end of the loop would cancel it, which asyncio's stream callback (3.11) logs as a
    traceback ("Exception in callback ... streams.py"): the upgrade test saw one."""
    (port,) = free_ports(1)

    async def scenario() -> bytes:
        config = NodeConfig(1, {1: Endpoint("127.0.0.1", port)}, str(tmp_path / "n1"), "c")
        node = RaftNode(config)
        await node.start()
        await node.stop()
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=ours)
        try:  # as the stream protocol starts the connection's task
            await asyncio.wait_for(node.messaging._accept_plain(reader, writer), 5)
            return await asyncio.get_running_loop().sock_recv(theirs, 10)  # b"": closed
        finally:
            theirs.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == b""
