"""Scripted scenarios on real node processes, each checking one rule.

- ``deposed_leader_acknowledgement``: issue 9's manual reproduction. A leader whose followers
  are paused takes an acks=all write (it waits), is paused itself, is deposed while paused, and
  the new leader writes other records over the same offsets. When the old leader runs again it
  truncates its unreplicated tail (KIP-279) and fetches the new leader's records: its answer to
  the waiting write must be NOT_LEADER_OR_FOLLOWER (or a timeout), never success with an offset
  that holds someone else's record.
- ``isolated_follower_heal_keeps_epoch``: one follower cut off for ~5 s, then healed, with a
  healthy leader all along. With pre-vote (KIP-996) the follower's failed elections never raise
  the epoch, so the heal costs no election; without it the follower comes back with a higher
  epoch and deposes a healthy leader.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from raftcore.client import Producer
from raftcore.client.connection import Connection
from raftcore.error_codes import Errors, error_name
from raftcore.log import SegmentedLog
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.records import encode_batch

from .network import LoopbackNetwork, Network, make_network
from .nodes import NodeSet
from .probe import QuorumView, probe_once

__all__ = [
    "DeposedLeaderOutcome",
    "EpochOutcome",
    "PartitionsUnavailable",
    "deposed_leader_acknowledgement",
    "isolated_follower_heal_keeps_epoch",
]

PRODUCE_VERSION = 10


class PartitionsUnavailable(Exception):
    """This machine cannot partition nodes (the reason is the message)."""


def _wait_for_leader(
    nodes: NodeSet, among: list[int], newer_than: int = 0, timeout_s: float = 30.0
) -> QuorumView:
    endpoints = {i: nodes.endpoint(i) for i in among}
    deadline = time.monotonic() + timeout_s
    while True:
        view = probe_once(endpoints, timeout_s=1.0)
        if view.leader_id in among and view.leader_epoch > newer_than:
            return view
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no leader among {among} in an epoch after {newer_than} within {timeout_s} s: "
                + view.summary()
            )
        time.sleep(0.1)


def _wait_converged(nodes: NodeSet, timeout_s: float = 30.0) -> QuorumView:
    deadline = time.monotonic() + timeout_s
    while True:
        view = nodes.probe(1.0)
        if view.converged(nodes.node_ids):
            return view
        if time.monotonic() > deadline:
            raise TimeoutError(f"not converged within {timeout_s} s: {view.summary()}")
        time.sleep(0.1)


async def _produce(bootstrap: list[str], values: list[bytes]) -> list[int]:
    async with Producer(bootstrap, request_timeout_ms=5000, delivery_timeout_ms=30000) as p:
        offsets = []
        for value in values:
            first, _ = await p.send([(None, value)])
            offsets.append(first)
        return offsets


def _log_by_offset(data_dir: Path) -> tuple[dict[int, bytes | None], int]:
    """Every offset of a stopped node's log: the data record's value, or a control marker."""
    out: dict[int, bytes | None] = {}
    with SegmentedLog.open(data_dir / "log") as log:
        for b in log.batches():
            if b.is_control:
                for o in range(b.base_offset, b.last_offset + 1):
                    out[o] = f"<control record, epoch {b.partition_leader_epoch}>".encode()
            else:
                for r in b.records():
                    out[r.offset] = r.value
        return out, log.end_offset


# ---- the deposed leader ------------------------------------------------------------------------


@dataclass
class DeposedLeaderOutcome:
    old_leader: int
    old_epoch: int
    new_leader: int = -1
    new_epoch: int = -1
    answer: str = ""  # NONE, an error name, "timeout" or "connection lost"
    error_code: int | None = None
    offset: int = -1  # the offset the old leader answered with (-1 without one)
    offset_before_pause: int = -1  # the old leader's log end when it took the write
    at_offset: bytes | None = None  # what the committed log holds at ``offset``
    found_at: list[int] = field(default_factory=list)  # where the write is in the committed log
    high_watermark: int = -1
    answered_before_pause: str = ""  # set when the scenario did not set up (inconclusive)

    @property
    def acknowledged_what_it_lost(self) -> bool:
        """Success with an offset that does not hold the write: acknowledged data lost."""
        return self.error_code == Errors.NONE and self.at_offset != VALUE

    def describe(self) -> str:
        where = f"at offsets {self.found_at}" if self.found_at else "nowhere"
        return (
            f"old leader n{self.old_leader} (epoch {self.old_epoch}) answered {self.answer}"
            + (f" with offset {self.offset}" if self.offset >= 0 else "")
            + f"; new leader n{self.new_leader} (epoch {self.new_epoch}); the write is {where} "
            f"in the committed log (high watermark {self.high_watermark}); offset "
            f"{self.offset if self.offset >= 0 else self.offset_before_pause} holds "
            f"{self.at_offset!r}"
        )


VALUE = b"written-to-the-leader-that-is-about-to-be-deposed"


def deposed_leader_acknowledgement(
    run_dir: Path, *, pythonpath: str | None = None, log=print
) -> DeposedLeaderOutcome:  # type: ignore[no-untyped-def]
    """Issue 9's manual scenario on three loopback node processes (no partitions needed)."""
    ids = [1, 2, 3]
    net = LoopbackNetwork(ids, reason="not needed")
    # A fetch timeout long enough that the leader still leads (check quorum: 1.5 x 4 s) when it
    # is paused with the write waiting; the election then takes ~4 s after the followers run.
    node_args = ["--election-timeout-ms", "1000", "--fetch-timeout-ms", "4000"]
    nodes = NodeSet(run_dir, net, ids, node_args=node_args, pythonpath=pythonpath)
    try:
        return asyncio.run(asyncio.wait_for(_deposed(nodes, log), 150))
    finally:
        nodes.close()


async def _deposed(nodes: NodeSet, log) -> DeposedLeaderOutcome:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    sync = loop.run_in_executor  # the probes run their own event loops: in a thread
    nodes.start_all()
    view = await sync(None, lambda: _wait_for_leader(nodes, nodes.node_ids))
    await _produce(nodes.bootstrap, [b"before-%d" % n for n in range(20)])
    view = await sync(None, lambda: _wait_converged(nodes))
    old = view.leader_id
    out = DeposedLeaderOutcome(old_leader=old, old_epoch=view.leader_epoch)
    out.offset_before_pause = view.high_watermark
    followers = [i for i in nodes.node_ids if i != old]
    log(f"leader n{old} epoch {view.leader_epoch}, hw {view.high_watermark}; pausing {followers}")

    for f in followers:
        nodes.signal(f, signal.SIGSTOP)
    # A fetch parked on the leader would carry the write into a paused follower's socket
    # buffer (and so into its log once it runs again); let the parked fetches expire first.
    await asyncio.sleep(1.0)  # fetch max wait: 500 ms

    host, _, port = nodes.endpoint(old).rpartition(":")
    conn = await Connection.open(host, int(port), client_id="rcf-deposed")
    cls = request_spec(ApiKey.PRODUCE).cls
    body = cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=60_000,
        topic_data=[
            cls.TopicProduceData(
                name="raftcore",
                partition_data=[
                    cls.PartitionProduceData(
                        index=0, records=encode_batch([(None, VALUE)], base_offset=0)
                    )
                ],
            )
        ],
    )
    answer = asyncio.ensure_future(
        conn.request(ApiKey.PRODUCE, PRODUCE_VERSION, body, timeout_s=90)
    )
    await asyncio.sleep(0.5)  # the leader appends it and waits for a majority
    if answer.done():
        out.answered_before_pause = repr(answer.result())
        log(f"the leader answered before it was paused: {out.answered_before_pause}")
    nodes.signal(old, signal.SIGSTOP)
    for f in followers:
        nodes.signal(f, signal.SIGCONT)
    try:
        view = await sync(
            None, lambda: _wait_for_leader(nodes, followers, newer_than=out.old_epoch)
        )
        out.new_leader, out.new_epoch = view.leader_id, view.leader_epoch
        log(f"new leader n{out.new_leader} epoch {out.new_epoch}; writing over the old tail")
        await _produce([nodes.endpoint(f) for f in followers], [b"after-%d" % n for n in range(20)])
    finally:
        nodes.signal(old, signal.SIGCONT)
    try:
        resp = await asyncio.wait_for(answer, 30)
        part = resp.responses[0].partition_responses[0]
        out.error_code = part.error_code
        out.answer = error_name(part.error_code)
        out.offset = part.base_offset if part.error_code == Errors.NONE else -1
    except asyncio.TimeoutError:
        out.answer = "timeout"
    except Exception as exc:
        out.answer = f"connection lost ({exc})"
    await conn.close()
    log(f"the old leader answered: {out.answer} (offset {out.offset})")

    view = await sync(None, lambda: _wait_converged(nodes))
    out.high_watermark = view.high_watermark
    leader = view.leader_id
    nodes.stop_all()
    committed, _ = _log_by_offset(nodes.data_dir(leader))
    committed = {o: v for o, v in committed.items() if o < out.high_watermark}
    probe_at = out.offset if out.offset >= 0 else out.offset_before_pause
    out.at_offset = committed.get(probe_at)
    out.found_at = sorted(o for o, v in committed.items() if v == VALUE)
    return out


# ---- the isolated follower ---------------------------------------------------------------------


@dataclass
class EpochOutcome:
    follower: int
    leader_before: int
    epoch_before: int
    leader_after: int = -1
    epoch_after: int = -1
    follower_epoch_isolated: int = -1  # the highest epoch the isolated follower reached

    @property
    def epoch_changed(self) -> bool:
        return self.epoch_after != self.epoch_before

    def describe(self) -> str:
        return (
            f"leader n{self.leader_before} epoch {self.epoch_before}; follower n{self.follower} "
            f"isolated reached epoch {self.follower_epoch_isolated}; after the heal: leader "
            f"n{self.leader_after} epoch {self.epoch_after} "
            + ("(epoch changed)" if self.epoch_changed else "(epoch kept)")
        )


def isolated_follower_heal_keeps_epoch(
    run_dir: Path,
    *,
    isolate_s: float = 5.0,
    settle_s: float = 3.0,
    pythonpath: str | None = None,
    log=print,  # type: ignore[no-untyped-def]
) -> EpochOutcome:
    """Partition one follower away from both other nodes for ``isolate_s``, heal, wait
    ``settle_s`` and for convergence; the epochs before and after. Raises
    PartitionsUnavailable where namespaces or nftables are missing."""
    ids = [1, 2, 3]
    net: Network = make_network(ids, partitions=True)
    nodes = None
    try:
        if not net.partitions:
            raise PartitionsUnavailable(net.reason)
        nodes = NodeSet(run_dir, net, ids, pythonpath=pythonpath)
        nodes.start_all()
        _wait_for_leader(nodes, ids)
        asyncio.run(
            asyncio.wait_for(_produce(nodes.bootstrap, [b"x-%d" % n for n in range(20)]), 60)
        )
        view = _wait_converged(nodes)
        follower = next(i for i in ids if i != view.leader_id)
        out = EpochOutcome(follower, view.leader_id, view.leader_epoch)
        others = [i for i in ids if i != follower]
        net.set_blocks({follower: set(others), **{i: {follower} for i in others}})
        log(f"isolated n{follower} from {others} (leader n{view.leader_id}@{view.leader_epoch})")
        deadline = time.monotonic() + isolate_s
        while time.monotonic() < deadline:
            v = probe_once({follower: nodes.endpoint(follower)}, timeout_s=0.5)
            if follower in v.views:
                out.follower_epoch_isolated = max(
                    out.follower_epoch_isolated, v.views[follower].epoch
                )
            time.sleep(0.25)
        net.heal()
        log(f"healed; n{follower} had reached epoch {out.follower_epoch_isolated}")
        time.sleep(settle_s)
        view = _wait_converged(nodes)
        out.leader_after, out.epoch_after = view.leader_id, view.leader_epoch
        return out
    finally:
        if nodes is not None:
            nodes.close()
        net.close()
