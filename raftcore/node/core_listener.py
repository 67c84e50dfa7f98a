"""The listener a Raft group gives its core: it passes the core's callbacks (commits,
snapshot loads, leader changes) to the application's listener or state machine."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from raftcore.errors import RaftcoreError
from raftcore.raft import CommittedBatch, LeaderAndEpoch
from raftcore.statemachine.store_snapshots import StoreSnapshotReader

if TYPE_CHECKING:
    from raftcore.node.group import RaftGroup

__all__ = ["CoreListener"]

logger = logging.getLogger("raftcore.node.node")  # the node's log lines, as before the split


class CoreListener:
    """Passes the core's callbacks to the application. An exception raised by the
    application's callback is logged and does not reach the core: the node keeps replicating
    (the batches it was given count as delivered)."""

    def __init__(self, group: RaftGroup) -> None:
        self.group = group

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        if self.group.applier is not None:  # a state machine: a failed apply stops the node
            self.group.applier.handle_commit(batches)
            return
        app = self.group.listener
        if app is not None:
            try:
                app.handle_commit(batches)
            except Exception:
                logger.exception(
                    "%s the listener failed on committed offsets %d..%d",
                    self.group.prefix,
                    batches[0].base_offset,
                    batches[-1].last_offset,
                )

    def handle_load_snapshot(self, reader: Any) -> None:
        """KIP-630: the core loads a snapshot. A state machine restores it on the applier
        thread, in order; a listener gets the reader itself; a node with neither (it only
        replicates the log) has nothing to load."""
        if self.group.applier is not None:
            self.group.applier.handle_load_snapshot(StoreSnapshotReader(reader))
            return
        if self.group.listener is None:  # a node that only replicates: nothing to load
            reader.close()
            return
        load = getattr(self.group.listener, "handle_load_snapshot", None)
        if load is None:
            raise RaftcoreError(
                f"{self.group.prefix} the listener must load snapshot {reader.snapshot_id} but "
                "has no handle_load_snapshot"
            )
        started = time.perf_counter()
        load(reader)
        self.group.metrics.snapshot_loaded(time.perf_counter() - started)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        logger.info(
            "%s leader is now %s in epoch %d",
            self.group.prefix,
            leader.leader_id if leader.known else "unknown",
            leader.epoch,
        )
        self.group.leader_changes += 1
        app = self.group.listener
        if app is not None:
            try:
                app.handle_leader_change(leader)
            except Exception:
                logger.exception("%s the listener failed on a leader change", self.group.prefix)
