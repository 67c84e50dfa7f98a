"""Starting a node's Raft core on its data directory. The core reads the quorum-state and
decides whether it may be itself: a dynamic voter whose quorum-state is lost must never vote
twice in an epoch, so the replica comes back as a new one, with a new directory id (KIP-853),
and the core starts again; a static voter (or a second loss) cannot go on."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from raftcore.errors import LostQuorumStateError
from raftcore.log import SegmentedLog
from raftcore.node.clock import now_ms
from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import replace_directory_id
from raftcore.raft import FileQuorumStateStore, Output, RaftCore
from raftcore.raft.voters import VoterEndpoint

__all__ = ["start_core"]

logger = logging.getLogger("raftcore.node.node")  # the node's log lines


def start_core(
    cfg: NodeConfig,
    log: SegmentedLog,
    *,
    directory: Path,
    rng: random.Random,
    listener: Any,
    listener_start_offset: int | None,
    directory_id: bytes | None,
    joining: bool = False,
    prefix: str,
    committed_offset: int = 0,
    clock: Callable[[], int] = now_ms,
    correlation_ids: Iterator[int] | None = None,
    renews_directory_id: bool = True,
) -> tuple[RaftCore, Output, bytes | None]:
    """The started core, its first output and the directory id it runs with. Raises what
    the core's start raised when the replica cannot be itself. ``committed_offset``: the
    one checkpointed (raftcore.node.committed_checkpoint). ``directory``: where the group
    keeps its quorum-state (the data directory). The data directory is a
    formatted one (:func:`raftcore.node.data_dir.check_meta_properties` passed): its
    quorum-state is expected; ``joining``: it was formatted without a voter set.
    ``correlation_ids``: the node's one source of them (:class:`RaftCore`).
    ``renews_directory_id``: a lost quorum-state may make this replica a new one (the group
    whose directory holds ``meta.properties``); for the other groups it is refused."""
    store = FileQuorumStateStore(directory, cluster_id=cfg.cluster_id)
    # the voter set records where the other nodes reach this one: its node listener
    node_ep = cfg.node_advertised
    assert node_ep is not None  # NodeConfig makes it the listen address when not given
    endpoint = VoterEndpoint(cfg.listener_name, node_ep.host, node_ep.port)
    for attempt in range(2):
        core = RaftCore(
            cfg.node_id,
            cfg.quorum,
            log,
            store,
            rng=rng,
            listener=listener,
            listener_start_offset=listener_start_offset,
            log_prefix=prefix,
            directory_id=directory_id,
            endpoint=endpoint,
            committed_offset=committed_offset,
            formatted=True,
            joining=joining,
            correlation_ids=correlation_ids,
        )
        try:
            return core, core.start(clock()), directory_id
        except LostQuorumStateError as exc:
            if exc.static or attempt or not renews_directory_id:
                raise
            logger.warning("%s %s", prefix, exc)  # never vote twice: a new replica
            directory_id = replace_directory_id(cfg)
    raise AssertionError("unreachable: the second attempt returns or raises")
