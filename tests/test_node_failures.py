"""What the node does when a piece of it fails: an exception out of a step of the Raft core
stops the node (the step was left half done) with one CRITICAL line naming the cause, and
``wait_closed`` raises for its embedder; a failed fsync stops it without writing to its log
again; a leader whose log refuses appends resigns and answers them NOT_LEADER_OR_FOLLOWER;
and a failing response handler does not end the connection to a peer. (The same rules on
node processes: tests/test_disk_failure_processes.py.)"""

from __future__ import annotations

import asyncio
import errno
import logging
import struct

import pytest
from test_node import cluster, leader_of, run

from raftcore.error_codes import Errors
from raftcore.errors import NodeFailedError, RaftcoreError
from raftcore.log.config import RECOVERY_POINT_FILE
from raftcore.node.transport import PeerConnection
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import LogWriteError
from raftcore.records import encode_batch

pytestmark = pytest.mark.timeout(60)


def critical_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]


def test_an_exception_out_of_a_core_step_stops_the_node_with_one_critical_line(tmp_path, caplog):
    """Before, only RaftInvariantError stopped the node; anything else escaped into the
    callback that ran the step (a timer, a peer's read loop) and left the node running with a
    core whose step was half done. The embedder sees it: wait_closed raises, naming the
    cause."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)

            def broken_poll(now):
                raise OSError(errno.EIO, "Input/output error")

            follower.core.poll = broken_poll
            follower.poke()  # as the poll timer does
            with pytest.raises(NodeFailedError) as failed:
                await asyncio.wait_for(follower.wait_closed(), 5)
            assert isinstance(failed.value.__cause__, OSError)
            assert follower.failure is failed.value
            await asyncio.wait_for(follower.stop(), 5)  # waits for the close begun
            assert not any(s.is_serving() for s in follower._servers)
            # The others go on.
            others = [n for n in nodes if n is not follower]
            await leader_of(others)
            return follower.node_id, str(failed.value)

    node_id, message = run(main())
    assert critical_lines(caplog) == [message]
    assert message == (
        f"[node {node_id}] cannot go on, stopping: I/O error: [Errno 5] Input/output error"
    )


def test_wait_closed_returns_after_a_graceful_stop(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            waiting = asyncio.ensure_future(nodes[0].wait_closed())
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await nodes[0].stop()
            await asyncio.wait_for(waiting, 5)  # returns: no failure
            assert nodes[0].failure is None

    run(main())


def test_a_failed_fsync_stops_the_node_and_nothing_more_is_written_to_its_log(tmp_path, caplog):
    """After a failed fsync the page cache may hold what never reached the disk: the node
    stops at once, and its close neither fsyncs again nor moves the clean point (which would
    vouch for the unsynced tail); the next start recovers the log as after a crash.

    One voter: its commit waits for its own fsync, so the append that meets the failed fsync
    is never acknowledged. (With three, the followers' two fsyncs are a majority: when the
    leader's fsync thread runs late, as on a loaded machine, the record commits and the
    append is acknowledged before the leader's fsync fails, rightly.)"""

    async def main():
        async with cluster(tmp_path, size=1) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"v")], wait=True)
            clean_point = leader.config.data_dir / "log" / RECOVERY_POINT_FILE
            before = clean_point.read_bytes()
            log = leader.log
            fsync = log.flush
            flushes = []

            def fails_once():  # then succeeds, as a second fsync after a failed one may
                flushes.append(1)
                if len(flushes) == 1:
                    raise OSError(errno.EIO, "Input/output error")
                return fsync()

            log.flush = fails_once  # the fsync thread calls it
            with pytest.raises(RaftcoreError, match="fsync of the log failed"):
                await leader.append([(b"k", b"w")], wait=True)  # never acknowledged
            with pytest.raises(NodeFailedError) as failed:
                await asyncio.wait_for(leader.wait_closed(), 5)
            await asyncio.wait_for(leader.stop(), 5)
            assert log.closed and flushes == [1]  # abandoned, never flushed again
            assert clean_point.read_bytes() == before
            return str(failed.value)

    message = run(main())
    assert critical_lines(caplog) == [message]
    assert "cannot go on, stopping: fsync of the log failed: I/O error: [Errno 5]" in message


async def dynamic(leader) -> None:  # type: ignore[no-untyped-def]
    """Until the leader has written the voter set into its log (kraft.version 1, once every
    voter told it who it is): no control record of its own comes between a test and its
    appends."""
    for _ in range(250):
        if leader.core.kraft_version == 1 and leader.high_watermark == leader.log.end_offset:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the voter set never reached the log")


def refuse_writes(node):  # type: ignore[no-untyped-def]
    """The node's log refuses every append, as on a full disk (ENOSPC); returns the undo."""
    log = node.log
    saved = log.append_as_leader, log.append_batches_as_leader

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device", str(log.directory))

    log.append_as_leader = log.append_batches_as_leader = full

    def undo() -> None:
        log.append_as_leader, log.append_batches_as_leader = saved

    return undo


def test_a_leader_whose_log_refuses_an_append_resigns_and_another_voter_leads(tmp_path, caplog):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"before")], wait=True)
            await dynamic(leader)
            undo = refuse_writes(leader)
            loop = asyncio.get_running_loop()
            refused_at = loop.time()
            with pytest.raises(LogWriteError) as refused:
                await leader.append([(b"k", b"refused")], wait=True)
            assert isinstance(refused.value.__cause__, OSError)
            others = [n for n in nodes if n is not leader]
            successor = await leader_of(others)
            took_s = loop.time() - refused_at
            await successor.append([(b"k", b"after")], wait=True)
            assert leader.failure is None  # resigned, not stopped
            undo()  # the disk takes writes again: the old leader follows the new one
            for _ in range(250):
                if leader.leader_and_epoch.leader_id == successor.node_id and (
                    leader.high_watermark == successor.high_watermark
                ):
                    break
                await asyncio.sleep(0.02)
            assert leader.leader_and_epoch.leader_id == successor.node_id
            assert leader.high_watermark == successor.high_watermark
            assert leader.listener.values == [b"before", b"after"]
            return took_s

    took_s = run(main())
    assert took_s < 0.3 * 2  # within the election timeout (300 ms) and its random part
    assert not critical_lines(caplog)


def test_a_produce_refused_by_the_leaders_log_is_answered_not_leader_never_a_closed_connection(
    tmp_path,
):
    """Kafka clients (librdkafka, raftcore's producer) go to the new leader on
    NOT_LEADER_OR_FOLLOWER; before, the OSError escaped the handler and the connection was
    closed with a traceback in the log."""
    from test_node import raw_request

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await dynamic(leader)
            epoch = leader.leader_and_epoch.epoch
            refuse_writes(leader)
            cls = request_spec(ApiKey.PRODUCE).cls
            body = cls(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    cls.TopicProduceData(
                        name=leader.config.topic,
                        partition_data=[
                            cls.PartitionProduceData(
                                index=0, records=encode_batch([(b"k", b"v")], base_offset=0)
                            )
                        ],
                    )
                ],
            )
            response = await raw_request(leader, ApiKey.PRODUCE, 10, body)
            return response.responses[0].partition_responses[0], epoch

    part, epoch = run(main())
    assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    # the successor is not known yet: nobody is named, and the client asks again
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, epoch)


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
