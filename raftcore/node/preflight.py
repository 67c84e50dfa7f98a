"""What a node checks before it writes anything: that its data directory can be one, and that
its listen address can be bound.

A node that fails to start must leave its data directory as it found it (absent, or as it
was): ``meta.properties``, the log and the quorum-state file are written only once these
checks passed and the listener is bound (:func:`bind_listener` hands the bound socket to the
node, so no other process can take the port in between).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from raftcore import connect_errors
from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError

__all__ = ["ListenError", "bind_listener", "check_data_dir", "check_data_dir_identity"]


class ListenError(RaftcoreError):
    """The listen address cannot be bound: ``cannot listen on HOST:PORT: REASON``."""


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
