"""The node's data directory: the ``meta.properties`` that names its cluster and node, and what
counts as durable in the log when fsyncs are periodic.

Layout::

    <data-dir>/meta.properties   cluster id, node id and directory id
    <data-dir>/quorum-state      the quorum state (epoch, vote, leader)
    <data-dir>/log/              the segmented log, and beside its segments the snapshots
    <data-dir>/state/            the LMDB state machine (``--state-machine lmdb``)
"""

from __future__ import annotations

import os
from pathlib import Path

from raftcore.checkpoint import write_atomically
from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.raft.voters import directory_id_text, parse_directory_id

__all__ = [
    "LOG_DIR",
    "META_PROPERTIES",
    "STATE_DIR",
    "check_meta_properties",
    "new_directory_id",
    "read_directory_id",
    "read_meta_properties",
    "replace_directory_id",
]

META_PROPERTIES = "meta.properties"
LOG_DIR = "log"
STATE_DIR = "state"


def check_meta_properties(cfg: NodeConfig) -> bytes:
    """The data directory names its cluster and node (Kafka's ``meta.properties``): written on
    first start, checked on every later one, so that a node never joins another cluster (or
    takes another node's place) with a log that is not theirs. Returns the directory's id.

    The directory id (``directory.id``, Kafka's uuid text) is drawn at random when the
    directory is first formatted: with the node id it names this replica (KIP-853), so a node
    whose disk was wiped comes back as a new replica, never as the voter it was. A
    ``meta.properties`` without one (written by a release before directory ids) gets one,
    rewritten whole and atomically, the first time the node starts."""
    path = cfg.data_dir / META_PROPERTIES
    if not path.exists():
        directory_id = new_directory_id()
        write_atomically(
            path,
            (
                f"version=1\ncluster.id={cfg.cluster_id}\nnode.id={cfg.node_id}\n"
                f"directory.id={directory_id_text(directory_id)}\n"
            ).encode(),
        )
        return directory_id
    text = path.read_text(encoding="utf-8")
    props = _parse_properties(text)
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
    written = props.get("directory.id")
    if written is None:  # an older release's directory: give it its id, in place
        directory_id = new_directory_id()
        ending = "" if text.endswith("\n") or not text else "\n"
        write_atomically(
            path, f"{text}{ending}directory.id={directory_id_text(directory_id)}\n".encode()
        )
        return directory_id
    try:
        return parse_directory_id(written)
    except ValueError as exc:
        raise RaftcoreError(f"{path}: directory.id: {exc}; refusing to start") from None


def _parse_properties(text: str) -> dict[str, str]:
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            props[key.strip()] = value.strip()
    return props


def read_meta_properties(data_dir: Path) -> dict[str, str] | None:
    """The properties of ``data_dir``'s ``meta.properties`` (None: there is none)."""
    try:
        return _parse_properties((data_dir / META_PROPERTIES).read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None


def replace_directory_id(cfg: NodeConfig) -> bytes:
    """Give the data directory a new directory id (the replica lost its quorum-state: it comes
    back as a new replica, KIP-853), rewriting ``meta.properties`` atomically."""
    path = cfg.data_dir / META_PROPERTIES
    directory_id = new_directory_id()
    lines = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.partition("=")[0].strip() != "directory.id"
    ]
    lines.append(f"directory.id={directory_id_text(directory_id)}")
    write_atomically(path, ("\n".join(lines) + "\n").encode())
    return directory_id


def new_directory_id() -> bytes:
    """A random directory id (16 bytes, never all zero: Kafka's ZERO_UUID means none)."""
    while True:
        raw = os.urandom(16)
        if raw != bytes(16):
            return raw


def read_directory_id(data_dir: Path) -> bytes | None:
    """The directory id in ``data_dir``'s ``meta.properties`` (None: no file, or no id yet)."""
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "directory.id":
            return parse_directory_id(value.strip())
    return None
