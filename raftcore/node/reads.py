"""Reads that must see every write acknowledged before they began (linearizable reads): the
read index of Raft's section 6.4.

A linearizable read asks the leader for a read index -- an offset at or above everything
committed when the read arrived -- then waits until the local state machine has applied up to
it, and reads locally. The core decides (:mod:`raftcore.raft.read_index`): it takes the index
and confirms it by a quorum round, so a leader cut off and already replaced never answers
from its stale state; the node only waits for the verdict. Only the leader can give one; any
other replica answers where the leader is (KIP-951: its id, epoch and endpoint), so that the
caller retries there.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.node.leader_retry import TryAgain, until_done
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import LeaderAndEpoch, NotLeaderError
from raftcore.raft.read_index import ReadIndexOutcome

if TYPE_CHECKING:
    from raftcore.endpoints import Endpoint
    from raftcore.node.node import RaftNode

__all__ = [
    "NotLeaderForReadError",
    "ReadWaiters",
    "answer_read_index",
    "read_index",
    "read_index_anywhere",
]


class NotLeaderForReadError(NotLeaderError):
    """A linearizable read asked of a replica that does not lead. ``leader`` (id and epoch) and
    ``endpoint`` (None when unknown) say where to ask instead."""

    def __init__(self, leader: LeaderAndEpoch, endpoint: Endpoint | None, message: str) -> None:
        super().__init__(leader, message)
        self.endpoint = endpoint


class ReadWaiters:
    """The node's reads waiting for the core's verdict, by token."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[ReadIndexOutcome]] = {}

    def wait(self, token: int) -> asyncio.Future[ReadIndexOutcome]:
        fut: asyncio.Future[ReadIndexOutcome] = asyncio.get_running_loop().create_future()
        self._waiting[token] = fut
        return fut

    def forget(self, token: int) -> None:
        self._waiting.pop(token, None)

    def deliver(self, outcomes: list[ReadIndexOutcome]) -> None:
        for outcome in outcomes:
            fut = self._waiting.pop(outcome.read.token, None)
            if fut is not None and not fut.done():
                fut.set_result(outcome)

    def fail_all(self, exc: Exception) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: nobody may be waiting


def _not_leader(node: RaftNode, leader: LeaderAndEpoch) -> NotLeaderForReadError:
    leader_id = leader.leader_id
    endpoint = None if leader_id is None else node.address_book.endpoint_of(leader_id)
    if leader_id == node.config.node_id:
        where = "this node, which no longer leads it (an election is due)"
    elif leader.known:
        where = f"node {leader_id} at {endpoint}"
    else:
        where = "not known yet"
    return NotLeaderForReadError(
        leader,
        endpoint,
        f"{node.prefix} a linearizable read needs the leader; the leader of epoch "
        f"{leader.epoch} is {where}",
    )


async def read_index(node: RaftNode, waiters: ReadWaiters, timeout_s: float = 5.0) -> int:
    """The read index of a linearizable read on ``node``, once a majority of voters confirmed
    that ``node`` still leads (the core's quorum round). Wait for the state machine to apply
    up to it, then read.

    Raises NotLeaderForReadError on any other replica, or when the leadership ends before the
    round completes, naming the leader known; TimeoutError when no majority answers within
    ``timeout_s`` (the leader may be cut off from the quorum).
    """
    core = node.running_core()
    if core is None:
        raise RaftcoreError(f"{node.prefix} not started")
    try:
        read = core.read_index(node.group.clock())
    except NotLeaderError:
        raise _not_leader(node, core.leader_and_epoch()) from None
    fut = waiters.wait(read.token)
    node.poke()  # the round's requests go now
    try:
        outcome = await asyncio.wait_for(fut, timeout_s)
    except asyncio.TimeoutError:
        raise TimeoutError(
            f"{node.prefix} no majority of voters confirmed this node's leadership of epoch "
            f"{read.epoch} within {timeout_s} s: cannot serve a linearizable read"
        ) from None
    finally:
        waiters.forget(read.token)
    if outcome.error != Errors.NONE:
        raise _not_leader(node, outcome.leader)
    return read.index


async def answer_read_index(node: RaftNode, body: Any, cls: Any) -> Any:
    """The leader's answer to another replica's ReadIndex (raftcore's own API): its read
    index, or why not, naming the leader known."""
    timeout_ms = body.timeout_ms if body.timeout_ms > 0 else node.config.request_timeout_ms
    try:
        index = await node.read_index(timeout_ms / 1000)
    except NotLeaderForReadError as exc:
        known = exc.leader.leader_id if exc.leader.known else None
        return cls(
            throttle_time_ms=0,
            error_code=Errors.NOT_LEADER_OR_FOLLOWER,
            error_message=str(exc),
            leader_id=-1 if known is None else known,
            leader_epoch=exc.leader.epoch,
        )
    except TimeoutError as exc:
        return cls(throttle_time_ms=0, error_code=Errors.REQUEST_TIMED_OUT, error_message=str(exc))
    except RaftcoreError as exc:  # stopping
        return cls(
            throttle_time_ms=0, error_code=Errors.BROKER_NOT_AVAILABLE, error_message=str(exc)
        )
    leader = node.leader_and_epoch
    return cls(
        throttle_time_ms=0,
        error_code=Errors.NONE,
        leader_id=node.node_id,
        leader_epoch=leader.epoch,
        read_index=index,
    )


async def read_index_anywhere(node: RaftNode, timeout_s: float = 5.0) -> int:
    """The read index of a linearizable read on any replica: this node's when it leads, else
    the leader's, asked with ReadIndex (as etcd's followers ask theirs), retried while an
    election goes on. The caller then waits until this replica has applied (or knows
    committed) everything below it, and reads locally. TimeoutError after ``timeout_s``."""

    async def attempt(left: float) -> int:
        core = node.running_core()
        assert core is not None  # until_done checked it
        leader = core.leader_hint()
        if core.is_leader():
            try:
                return await read_index(node, node.group.reads, left)
            except NotLeaderForReadError as exc:
                raise TryAgain(str(exc)) from None
        if not leader.known or leader.leader_id == node.node_id:
            raise TryAgain("no leader known")
        assert leader.leader_id is not None
        body = request_spec(ApiKey.READ_INDEX).cls(
            cluster_id=node.config.cluster_id, timeout_ms=max(1, int(left * 1000))
        )
        try:
            answer = await node.request_peer(leader.leader_id, ApiKey.READ_INDEX, 0, body, left)
        except (ConnectionError, asyncio.TimeoutError) as exc:
            raise TryAgain(f"node {leader.leader_id}: {exc or type(exc).__name__}") from None
        if answer.error_code == Errors.NONE:
            return int(answer.read_index)
        why = f"node {leader.leader_id}: {answer.error_message}"
        if answer.error_code not in (
            Errors.NOT_LEADER_OR_FOLLOWER,
            Errors.REQUEST_TIMED_OUT,
            Errors.BROKER_NOT_AVAILABLE,
        ):
            raise RaftcoreError(f"{node.prefix} no read index: {why}")
        raise TryAgain(why)

    return await until_done(
        node, attempt, timeout_s=timeout_s, not_done="no leader gave a read index"
    )
