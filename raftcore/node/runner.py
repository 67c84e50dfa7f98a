"""Run one node as a process: ``raftcore node ...``. SIGTERM or SIGINT stops it gracefully (a
leader resigns first); SIGKILL is what the crash tests use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import STATE_DIR
from raftcore.node.node import RaftNode

__all__ = ["run_node"]

logger = logging.getLogger(__name__)


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
    config: NodeConfig, ready_file: str | None, state_machine: str, map_size: int
) -> None:
    machine = open_state_machine(config, state_machine, map_size)
    try:
        await _serve_node(RaftNode(config, state_machine=machine), config, ready_file)
    finally:
        if machine is not None:
            machine.close()


async def _serve_node(node: RaftNode, config: NodeConfig, ready_file: str | None) -> None:
    await node.start()
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
    try:
        await stop.wait()
    finally:
        logger.info("node %d stopping", config.node_id)
        await node.stop()


def run_node(
    config: NodeConfig,
    *,
    ready_file: str | None = None,
    state_machine: str = "none",
    state_map_size: int = 16 << 30,
) -> int:
    """Serve until SIGTERM/SIGINT. Returns the process exit status. ``state_machine``:
    ``none`` or ``lmdb`` (see :func:`open_state_machine`)."""
    print(
        f"raftcore node {config.node_id} listening on {config.listen} "
        f"(voters {','.join(f'{k}@{v}' for k, v in sorted(config.voters.items()))}, "
        f"data {config.data_dir}, cluster {config.cluster_id})",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, ready_file, state_machine, state_map_size))
    return 0
