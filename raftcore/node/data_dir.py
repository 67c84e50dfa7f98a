"""The node's data directory: formatting it (``raftcore format``), the ``meta.properties`` that
names its cluster and node, and what counts as durable in the log when fsyncs are periodic.

Layout::

    <data-dir>/meta.properties   cluster id, node id, directory id and initial voters
    <data-dir>/quorum-state      the quorum state (epoch, vote, leader)
    <data-dir>/log/              the segmented log, and beside its segments the snapshots
    <data-dir>/state/            the LMDB state machine (``--state-machine lmdb``)
    <data-dir>/<topic>-<p>/      partition p >= 1 of the topic (``--partitions``): its own
                                 quorum-state and log/, laid out as partition 0's above
    <data-dir>/__consumer_offsets-<p>/  partition p of ``__consumer_offsets`` (consumer
                                 groups), made at the first start: raftcore.node.offsets_groups
    <data-dir>/__cluster_metadata-0/  the metadata group (topics created at run time), over the
                                 same voters; its replicas' directories are
                                 :mod:`raftcore.node.topic_dirs`'

Partition 0 of the topic lives in the data directory itself. ``raftcore format`` makes every
partition's directory (with an empty quorum-state) and records their count
(``partitions=N``); a node refuses to start when a formatted partition's directory is missing
or it is started with another count: a group that found nothing would start as an empty voter,
and two such voters are a majority that can lose acknowledged records. The same holds for the
metadata group: ``raftcore format`` makes its directory and says so in ``meta.properties``
(``cluster.metadata=1``); a directory formatted by a release before it gets the metadata group
at its first start (the upgrade in place), and one that says it has it but lost it is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from raftcore.checkpoint import write_atomically
from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.raft.quorum_store import FILE_NAME as QUORUM_STATE
from raftcore.raft.quorum_store import FileQuorumStateStore
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import directory_id_text, parse_directory_id

__all__ = [
    "LOG_DIR",
    "METADATA_DIR",
    "META_PROPERTIES",
    "STATE_DIR",
    "DataDirIdentity",
    "check_meta_properties",
    "format_command",
    "format_data_dir",
    "group_directory",
    "new_directory_id",
    "read_directory_id",
    "read_meta_properties",
    "refuse_unformatted",
    "replace_directory_id",
]

META_PROPERTIES = "meta.properties"
METADATA_DIR = "__cluster_metadata-0"  # the metadata group's (Kafka's name)
_METADATA_KEY = "cluster.metadata"  # in meta.properties: the metadata group was made
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
LOG_DIR = "log"
STATE_DIR = "state"


@dataclass(frozen=True)
class DataDirIdentity:
    """What ``meta.properties`` says of this replica: its directory id, and the first voter
    set it was formatted with (``initial.voters``): the ids of a new cluster's voters, empty
    for a replica formatted to join an existing cluster (an observer until added), or None for
    a directory of a release before ``raftcore format`` (it starts as it always did)."""

    directory_id: bytes
    initial_voters: frozenset[int] | None

    @property
    def joins(self) -> bool:
        """Formatted without a voter set: it never bootstraps one, never votes, until the
        voter set in the log names it (``add-voter``, ``--auto-join``)."""
        return self.initial_voters is not None and not self.initial_voters


def group_directory(data_dir: Path, topic: str, partition: int) -> Path:
    """Where the Raft group of ``topic`` partition ``partition`` keeps its quorum-state and its
    log: the data directory itself for partition 0, ``<topic>-<partition>/`` in it (Kafka's
    log directory name) for the others. A topic name must be one Kafka allows (letters,
    digits, ``.``, ``_``, ``-``; at most 249 characters), so that it names a directory in the
    data directory and nothing else."""
    if partition == 0:
        return data_dir
    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise RaftcoreError(
            f"topic {topic!r}: a topic name is 1 to 249 of the letters, digits, '.', '_' and '-'"
        )
    return data_dir / f"{topic}-{partition}"


def format_data_dir(
    data_dir: str | os.PathLike[str],
    *,
    cluster_id: str,
    node_id: int,
    initial_voters: Collection[int] | None,
    topic: str = "raftcore",
    partitions: int = 1,
) -> bytes:
    """Format ``data_dir`` (Kafka's ``kafka-storage format``), creating it if need be: write
    ``meta.properties`` (cluster id, node id, a new directory id, and ``initial.voters``: the
    ids of the first voter set, or nothing for a replica that joins an existing cluster) and
    an empty quorum-state (epoch 0, no vote), so that a quorum-state missing later is known
    lost, empty log or not. ``initial_voters`` None formats a joining replica. With
    ``partitions`` above 1, the same for each partition's directory (:func:`group_directory`),
    and ``partitions=N`` in ``meta.properties``.

    Refuses (RaftcoreError, one line) a directory already formatted or holding a log or a
    quorum-state: formatting never replaces a replica. Returns the new directory id."""
    path = Path(data_dir)
    if path.exists() and not path.is_dir():
        raise RaftcoreError(f"{path}: not a directory (a file is in the way)")
    held = [name for name in (META_PROPERTIES, QUORUM_STATE, LOG_DIR) if _holds(path / name)]
    if held:
        raise RaftcoreError(
            f"{path} is already formatted or holds a replica's data ({', '.join(held)}); "
            "refusing to format it (an empty directory only)"
        )
    voters = sorted(set(initial_voters or ()))
    if initial_voters is not None and node_id not in voters:
        raise RaftcoreError(
            f"node {node_id} is not one of the initial voters {voters}: format it with "
            "--no-initial-voters to join an existing cluster"
        )
    if partitions < 1:
        raise RaftcoreError(f"partitions must be >= 1, got {partitions}")
    groups = [group_directory(path, topic, p) for p in range(partitions)]  # names checked
    groups.append(path / METADATA_DIR)
    path.mkdir(parents=True, exist_ok=True)
    # the quorum-states first: a directory with meta.properties always has them
    for group in groups:
        group.mkdir(exist_ok=True)
        FileQuorumStateStore(group, cluster_id=cluster_id).write(ElectionState(epoch=0))
    directory_id = new_directory_id()
    counted = "" if partitions == 1 else f"partitions={partitions}\n"
    write_atomically(
        path / META_PROPERTIES,
        (
            f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
            f"directory.id={directory_id_text(directory_id)}\n"
            f"initial.voters={','.join(str(v) for v in voters)}\n{counted}"
            f"{_METADATA_KEY}=1\n"
        ).encode(),
    )
    return directory_id


def _holds(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists()


def format_command(data_dir: str | os.PathLike[str], cluster_id: str, node_id: int) -> str:
    """How to format this directory, for the one-line refusal of an unformatted one."""
    base = f"raftcore format --data-dir {data_dir} --cluster-id={cluster_id} --id {node_id}"
    return (
        f"format it first: '{base} --initial-voters VOTERS' (or --standalone) for a new "
        f"cluster, or '{base} --no-initial-voters' to join an existing one as an observer "
        "(docs/operations.md)"
    )


def refuse_unformatted(data_dir: Path, cluster_id: str, node_id: int) -> NoReturn:
    """RaftcoreError (one line) for a data directory without ``meta.properties``: never
    formatted (how to format it), or formatted once and the file lost (what to do)."""
    held = [name for name in (QUORUM_STATE, LOG_DIR, STATE_DIR) if _holds(data_dir / name)]
    if held:
        raise RaftcoreError(
            f"{data_dir / META_PROPERTIES} is missing while {data_dir} holds a replica's data "
            f"({', '.join(held)}): refusing to start, since which replica this was is lost; "
            "restore the file, or wipe the directory and format it with --no-initial-voters "
            "to come back as a new replica (docs/operations.md)"
        )
    raise RaftcoreError(
        f"{data_dir} is not formatted; " + format_command(data_dir, cluster_id, node_id)
    )


def check_meta_properties(cfg: NodeConfig) -> DataDirIdentity:
    """The data directory names its cluster and node (Kafka's ``meta.properties``), written
    by :func:`format_data_dir` and checked on every start, so that a node never joins another
    cluster (or takes another node's place) with a log that is not theirs, and never formats
    itself: two wiped voters that did would be a majority of an empty log.

    Refused (RaftcoreError, one line): a directory that was never formatted, and one that
    holds a log or a quorum-state but lost its ``meta.properties`` (it was formatted once:
    its directory id, and with it which replica it is, is gone; the operator restores the
    file or wipes the directory and formats it to join as a new replica).

    A ``meta.properties`` without a directory id (written by a release before directory ids)
    gets one, rewritten whole and atomically, the first time the node starts."""
    path = cfg.data_dir / META_PROPERTIES
    if not path.exists():
        refuse_unformatted(cfg.data_dir, cfg.cluster_id, cfg.node_id)
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
    initial = _initial_voters(path, props)
    _check_partitions(cfg, path, props)
    if initial and cfg.voters and initial != frozenset(cfg.voters):
        raise RaftcoreError(
            f"{path} was formatted with initial voters {sorted(initial)}, but the node is "
            f"started with voters {sorted(cfg.voters)}; refusing to start"
        )
    _check_metadata_group(cfg, path, props)
    written = props.get("directory.id")
    if written is None:  # an older release's directory: give it its id, in place
        directory_id = new_directory_id()
        _add_property(path, "directory.id", directory_id_text(directory_id))
        return DataDirIdentity(directory_id, initial)
    try:
        return DataDirIdentity(parse_directory_id(written), initial)
    except ValueError as exc:
        raise RaftcoreError(f"{path}: directory.id: {exc}; refusing to start") from None


def _check_partitions(cfg: NodeConfig, path: Path, props: dict[str, str]) -> None:
    """The node is started with the partition count its directory was formatted with, and
    every partition's directory is there: a group never starts empty where a replica was."""
    text = props.get("partitions", "1")  # a directory formatted before the count: one
    try:
        formatted = int(text)
    except ValueError:
        raise RaftcoreError(
            f"{path}: partitions: not a number: {text!r}; refusing to start"
        ) from None
    if formatted != cfg.partitions:
        raise RaftcoreError(
            f"{path} was formatted with {formatted} partition(s), but the node is started "
            f"with --partitions {cfg.partitions}; refusing to start (the count is fixed when "
            "the directory is formatted)"
        )
    for partition in range(1, formatted):
        group = group_directory(cfg.data_dir, cfg.topic, partition)
        if not (group / QUORUM_STATE).is_file():
            raise RaftcoreError(
                f"{group / QUORUM_STATE} of {cfg.topic} partition {partition} is missing; "
                "refusing to start, since an empty voter of it could lose acknowledged "
                "records: restore the directory (docs/cluster.md)"
            )


def _check_metadata_group(cfg: NodeConfig, path: Path, props: dict[str, str]) -> None:
    """The metadata group's directory is there; a directory of a release before it gets one
    (an empty quorum-state, a voter of the static voters as the other partitions are), and
    ``meta.properties`` says so from then on, so that losing it later is refused."""
    group = cfg.data_dir / METADATA_DIR
    if props.get(_METADATA_KEY) == "1":
        if not (group / QUORUM_STATE).is_file():
            raise RaftcoreError(
                f"{group / QUORUM_STATE} of the metadata group is missing; refusing to start, "
                "since an empty voter of it could lose created topics: restore the directory "
                "(docs/cluster.md)"
            )
        return
    group.mkdir(exist_ok=True)
    if not (group / QUORUM_STATE).is_file():
        FileQuorumStateStore(group, cluster_id=cfg.cluster_id).write(ElectionState(epoch=0))
    _add_property(path, _METADATA_KEY, "1")


def _add_property(path: Path, key: str, value: str) -> None:
    """Append ``key=value`` to ``meta.properties``, rewritten whole and atomically."""
    text = path.read_text(encoding="utf-8")
    ending = "" if text.endswith("\n") or not text else "\n"
    write_atomically(path, f"{text}{ending}{key}={value}\n".encode())


def _initial_voters(path: Path, props: dict[str, str]) -> frozenset[int] | None:
    text = props.get("initial.voters")
    if text is None:
        return None
    try:
        return frozenset(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise RaftcoreError(
            f"{path}: initial.voters: not a list of node ids: {text!r}; refusing to start"
        ) from None


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
