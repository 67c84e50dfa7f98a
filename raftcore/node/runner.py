"""Run one node as a process: ``raftcore node ...``. SIGTERM or SIGINT stops it gracefully (a
leader resigns first) and the process exits with status 0; SIGKILL is what the crash tests use.

A node that cannot go on (:meth:`RaftNode.wait_closed` raises: its log or quorum-state cannot
be written, an fsync failed, the state machine failed; a damaged batch is repaired instead,
raftcore.raft.damage) has logged one CRITICAL line naming the cause; the process then exits with
status 1 (``EXIT_FAILED``) at once, without waiting for a signal, so that a supervisor
(systemd's ``Restart=on-failure``, a liveness check that watches the process) sees it. If the
close does not finish within ``FAILED_EXIT_S`` (a disk that hangs), the process exits anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import STATE_DIR
from raftcore.node.metrics_http import bind_metrics
from raftcore.node.node import RaftNode
from raftcore.node.preflight import bind_listener, check_open_files

__all__ = ["EVENT_LOOPS", "EXIT_FAILED", "FAILED_EXIT_S", "check_event_loop", "run_node"]

logger = logging.getLogger(__name__)

EXIT_FAILED = 1  # the exit status of a node that stopped itself after a failure
FAILED_EXIT_S = 1.0  # the longest a node that failed takes to exit


def open_state_machine(config: NodeConfig, kind: str, map_size: int) -> Any:
    """The node's state machine: None, or ``lmdb`` in ``<data-dir>/state/``."""
    if kind == "none":
        return None
    if kind == "lmdb":
        from raftcore.statemachine import LmdbStateMachine

        return LmdbStateMachine(
            config.data_dir / STATE_DIR, map_size=map_size, log_prefix=f"[node {config.node_id}]"
        )
    raise ValueError(f"unknown state machine {kind!r} (none or lmdb)")


async def _serve(
    config: NodeConfig,
    ready_file: str | None,
    state_machine: str,
    map_size: int,
    *,
    listen_socket: socket.socket | None = None,
    node_listen_socket: socket.socket | None = None,
    metrics_socket: socket.socket | None = None,
) -> int:
    machine = open_state_machine(config, state_machine, map_size)
    try:
        node = RaftNode(config, state_machine=machine)
        node.metrics_socket = metrics_socket
        return await _serve_node(node, config, ready_file, listen_socket, node_listen_socket)
    finally:
        if machine is not None:
            machine.close()


def _listening_line(config: NodeConfig) -> str:
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]  # asyncio, uvloop
    nodes = "" if config.node_listen is None else f" (clients), {config.node_listen} (nodes)"
    return (
        f"raftcore node {config.node_id} listening on {config.listen}{nodes} "
        f"({_peers_text(config)}, "
        f"data {config.data_dir}, cluster {config.cluster_id}, event loop {loop})"
    )


def _peers_text(config: NodeConfig) -> str:
    if config.voters:
        return f"voters {','.join(f'{k}@{v}' for k, v in sorted(config.voters.items()))}"
    return f"joining through {','.join(map(str, config.bootstrap))}"


async def _serve_node(
    node: RaftNode,
    config: NodeConfig,
    ready_file: str | None,
    listen_socket: socket.socket | None = None,
    node_listen_socket: socket.socket | None = None,
) -> int:
    """Serve until a signal (status 0) or a failure of the node (status 1)."""
    await node.start(listen_socket=listen_socket, node_listen_socket=node_listen_socket)
    tune_gc()
    print(_listening_line(config), file=sys.stderr, flush=True)  # bound and serving now
    if ready_file:
        # Written after the listener is bound: a supervisor may connect once it exists.
        tmp = f"{ready_file}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()} {config.listen}\n")
        os.replace(tmp, ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    signalled = asyncio.ensure_future(stop.wait())
    ended = asyncio.ensure_future(node.wait_closed())
    failed = False
    try:
        await asyncio.wait({signalled, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        failed = ended.done() and not ended.cancelled() and ended.exception() is not None
        ended.cancel()
        if failed:
            _exit_within(FAILED_EXIT_S, config.node_id)  # the node said why (CRITICAL)
        else:
            logger.info("node %d stopping", config.node_id)
        await node.stop()
    if failed:
        logger.info("node %d exits with status %d", config.node_id, EXIT_FAILED)
        return EXIT_FAILED
    return 0


def _exit_within(seconds: float, node_id: int) -> None:
    """End the process after ``seconds`` if it has not ended by then: a close held up by a
    disk that hangs (an fsync, an apply) must not keep a failed node's process alive."""

    def exit_now() -> None:
        logger.error(
            "node %d did not close within %.1f s of its failure; exiting now", node_id, seconds
        )
        os._exit(EXIT_FAILED)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()


EVENT_LOOPS = ("asyncio", "uvloop")


def check_event_loop(name: str) -> None:
    """ValueError (one line for the CLI) unless ``name`` is an event loop this process has."""
    if name not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {name!r} (one of {', '.join(EVENT_LOOPS)})")
    if name == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError("--event-loop uvloop needs the uvloop package: pip install uvloop")


# The node process's cyclic garbage collector (an embedding host keeps its own settings).
# Python collects its youngest generation every 700 new container objects. A leader serving
# many Produce requests makes that many every few requests, and every collection walks what
# the requests in flight hold: with 1,024 writers, about a sixth of the leader's loop went to
# collections (py-spy --native, bench/peers/profile_leader.py). What the node made while
# starting is frozen (never walked again), and the youngest generation is collected every
# GC_YOUNGEST allocations: cyclic garbage waits longer (a few MB at most), reference counting
# frees the rest at once as before.
GC_YOUNGEST = 50_000


def tune_gc() -> None:
    """Freeze what exists now and collect the youngest generation less often."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNGEST, middle, oldest)


def _runner(event_loop: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    check_event_loop(event_loop)
    if event_loop == "uvloop":
        import uvloop

        return uvloop.run  # type: ignore[no-any-return]
    return asyncio.run


def run_node(
    config: NodeConfig,
    *,
    ready_file: str | None = None,
    state_machine: str = "none",
    state_map_size: int = 16 << 30,
    event_loop: str = "asyncio",
) -> int:
    """Serve until SIGTERM/SIGINT (exit status 0) or until the node fails (EXIT_FAILED, after
    one CRITICAL line naming the cause). Returns the process exit status. ``state_machine``:
    ``none`` or ``lmdb`` (see :func:`open_state_machine`). ``event_loop``: ``asyncio`` or
    ``uvloop`` (the uvloop package's libuv loop: the same node, less time per request).

    The listen address is bound first, before anything is written into the data directory:
    a port in use ends here with ListenError (``cannot listen on HOST:PORT: address already
    in use``) and the directory as it was; so do the node listener's and the metrics port."""
    assert config.listen is not None
    run = _runner(event_loop)
    check_open_files(config)  # OpenFilesError: ulimit -n too low for its partitions
    sock = bind_listener(config.listen)
    node_sock = metrics_sock = None
    try:
        if config.node_listen is not None:
            node_sock = bind_listener(config.node_listen)
        metrics_sock = bind_metrics(config)
    except BaseException:
        sock.close()
        if node_sock is not None:
            node_sock.close()
        raise
    status = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            status = run(
                _serve(
                    config,
                    ready_file,
                    state_machine,
                    state_map_size,
                    listen_socket=sock,
                    node_listen_socket=node_sock,
                    metrics_socket=metrics_sock,
                )
            )
    finally:
        sock.close()
        if node_sock is not None:
            node_sock.close()
        if metrics_sock is not None:
            metrics_sock.close()
    return status
