"""The node's data directory: the ``meta.properties`` that names its cluster and node, and what
counts as durable in the log when fsyncs are periodic.

Layout::

    <data-dir>/meta.properties   cluster and node id
    <data-dir>/quorum-state      the quorum state (epoch, vote, leader)
    <data-dir>/log/              the segmented log, and beside its segments the snapshots
    <data-dir>/state/            the LMDB state machine (``--state-machine lmdb``)
"""

from __future__ import annotations

from typing import Any

from raftcore.checkpoint import write_atomically
from raftcore.errors import RaftcoreError
from raftcore.log import SegmentedLog
from raftcore.node.config import NodeConfig

__all__ = ["LOG_DIR", "META_PROPERTIES", "STATE_DIR", "UnsyncedView", "check_meta_properties"]

META_PROPERTIES = "meta.properties"
LOG_DIR = "log"
STATE_DIR = "state"


def check_meta_properties(cfg: NodeConfig) -> None:
    """The data directory names its cluster and node (Kafka's ``meta.properties``): written on
    first start, checked on every later one, so that a node never joins another cluster (or
    takes another node's place) with a log that is not theirs."""
    path = cfg.data_dir / META_PROPERTIES
    if not path.exists():
        write_atomically(
            path,
            f"version=1\ncluster.id={cfg.cluster_id}\nnode.id={cfg.node_id}\n".encode(),
        )
        return
    props = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            props[key.strip()] = value.strip()
    if props.get("cluster.id") != cfg.cluster_id:
        raise RaftcoreError(
            f"{cfg.data_dir} belongs to cluster {props.get('cluster.id')!r}, not "
            f"{cfg.cluster_id!r}; refusing to start"
        )
    if props.get("node.id") != str(cfg.node_id):
        raise RaftcoreError(
            f"{cfg.data_dir} belongs to node {props.get('node.id')}, not {cfg.node_id}; "
            "refusing to start"
        )


class UnsyncedView:
    """The log as the core sees it with ``flush="interval"``: everything appended counts as
    durable at once, so acknowledgements and votes do not wait for the periodic fsync (which is
    what that mode trades away: a crash of a majority can lose acknowledged records)."""

    def __init__(self, log: SegmentedLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    @property
    def flushed_offset(self) -> int:
        return self._log.end_offset
