"""What a node checks before it writes anything: that its data directory can be one, that its
listen address can be bound, and that the process may open the files it will need.

A node that fails to start must leave its data directory as it found it (absent, or as it
was): ``meta.properties``, the log and the quorum-state file are written only once these
checks passed and the listener is bound (:func:`bind_listener` hands the bound socket to the
node, so no other process can take the port in between).
"""

from __future__ import annotations

import logging
import os
import resource
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from raftcore import connect_errors
from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError
from raftcore.node.connection_limits import FD_RESERVE

if TYPE_CHECKING:
    from raftcore.node.config import NodeConfig

__all__ = [
    "OpenFilesError",
    "ListenError",
    "bind_listener",
    "check_data_dir",
    "check_data_dir_identity",
    "check_open_files",
    "open_files_needed",
]

logger = logging.getLogger("raftcore.node.node")  # the node's log lines

# Per partition (Raft group) past the first: its active segment's log and index (measured: 2
# each), and room for a segment roll or a snapshot written at the same time. The first is in
# FD_RESERVE, the descriptors a one-partition node needs besides its client connections.
OPEN_FILES_PER_PARTITION = 4


class ListenError(RaftcoreError):
    """The listen address cannot be bound: ``cannot listen on HOST:PORT: REASON``."""


class OpenFilesError(RaftcoreError):
    """The process may not open as many files as the node needs (``ulimit -n``)."""


def open_files_needed(config: NodeConfig) -> int:
    """The descriptors a node may hold at once: every client connection ``max.connections``
    allows, ``FD_RESERVE`` for what one partition's node holds besides them (its log
    segment and index, a snapshot written or served, the peers, the listeners, the state
    machine), and ``OPEN_FILES_PER_PARTITION`` for each further partition."""
    return config.max_connections + FD_RESERVE + OPEN_FILES_PER_PARTITION * (config.partitions - 1)


def _needs(config: NodeConfig, needed: int) -> str:
    return (
        f"this node needs about {needed} open files (max.connections "
        f"{config.max_connections}, {FD_RESERVE} for itself and "
        f"{OPEN_FILES_PER_PARTITION} per further partition of {config.partitions})"
    )


def check_open_files(config: NodeConfig) -> None:
    """Before a ``raftcore node`` process starts its node: raise the soft open-files limit
    to what the node needs (to the hard limit, as Go's runtime does), or OpenFilesError in
    one line saying what it needs, what is allowed and what to change. Topics created later
    are not counted: each partition takes up to four."""
    needed = open_files_needed(config)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        raised = hard if hard != resource.RLIM_INFINITY else max(needed, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        except (ValueError, OSError):
            raised = soft
        if raised >= needed:
            logger.info(
                "[node %d] open-files limit raised from %d to %d (it needs about %d)",
                config.node_id,
                soft,
                raised,
                needed,
            )
            return
    raise OpenFilesError(
        f"{_needs(config, needed)} but may open {soft} (hard limit {hard}): raise it "
        f"(ulimit -n {needed}) or lower --max-connections"
    )


def warn_if_open_files_short(config: NodeConfig, prefix: str) -> None:
    """One WARNING at a node's start (an embedder's too, whose process limit is its own)
    when the process may open fewer files than the node needs: accepted connections could
    then take the descriptors the node needs to roll a segment or write its quorum state,
    and a node that cannot do that stops."""
    needed = open_files_needed(config)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        logger.warning(
            "%s %s but the process may open only %d (ulimit -n): raise the limit or lower "
            "--max-connections to %d",
            prefix,
            _needs(config, needed),
            soft,
            max(1, soft - (needed - config.max_connections)),
        )


def check_data_dir(path: str | os.PathLike[str]) -> None:
    """ValueError (one line, naming the path) unless ``path`` is a writable directory, or
    does not exist and can be created (its nearest existing ancestor is a writable
    directory). Creates nothing."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise ValueError(f"--data-dir {p}: not a directory (a file is in the way)")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ValueError(f"--data-dir {p}: not writable")
        return
    ancestor = p.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"--data-dir {p}: cannot be created ({ancestor} is not a directory)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"--data-dir {p}: cannot be created ({ancestor} is not writable)")


def check_data_dir_identity(path: str | os.PathLike[str], node_id: int, cluster_id: str) -> None:
    """ValueError (one line, naming the options) when the directory's ``meta.properties``
    is missing or was written for another cluster or another node id: checked before the
    port is bound, so that a node started on another's directory says so as a usage error
    (the node checks it again when it opens the directory,
    :func:`raftcore.node.data_dir.check_meta_properties`).
    A directory without the file is refused too: it was never formatted (the line says how
    to format it), or it lost the file (the line says what to do)."""
    from raftcore.node.data_dir import read_meta_properties, refuse_unformatted

    p = Path(path)
    props = read_meta_properties(p)
    if props is None:
        try:
            refuse_unformatted(p, cluster_id, node_id)
        except RaftcoreError as exc:
            raise ValueError(str(exc)) from None
    if props.get("cluster.id") != cluster_id:
        raise ValueError(
            f"--data-dir {p} belongs to cluster {props.get('cluster.id')!r}, not --cluster-id "
            f"{cluster_id!r}; refusing to start"
        )
    if props.get("node.id") != str(node_id):
        raise ValueError(
            f"--data-dir {p} belongs to node {props.get('node.id')}, not --id {node_id}; "
            "refusing to start"
        )


def bind_listener(endpoint: Endpoint, backlog: int = 100) -> socket.socket:
    """A socket bound to ``endpoint`` and listening (non-blocking, SO_REUSEADDR as asyncio
    sets it), for ``asyncio.start_server(sock=...)``. ListenError when it cannot be bound.
    A host name is resolved and its first address bound."""
    where = f"{endpoint.host}:{endpoint.port}"
    try:
        infos = socket.getaddrinfo(
            endpoint.host or None,
            endpoint.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {where}: {connect_errors.describe(exc)}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise ListenError(f"cannot listen on {where}: {reason}") from None
    return sock
