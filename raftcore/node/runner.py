"""Run one node as a process: ``raftcore node ...``. SIGTERM or SIGINT stops it gracefully (a
leader resigns first); SIGKILL is what the crash tests use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from raftcore.node.config import NodeConfig
from raftcore.node.node import RaftNode

__all__ = ["run_node"]

logger = logging.getLogger(__name__)


async def _serve(config: NodeConfig, ready_file: str | None) -> None:
    node = RaftNode(config)
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


def run_node(config: NodeConfig, *, ready_file: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT. Returns the process exit status."""
    print(
        f"raftcore node {config.node_id} listening on {config.listen} "
        f"(voters {','.join(f'{k}@{v}' for k, v in sorted(config.voters.items()))}, "
        f"data {config.data_dir}, cluster {config.cluster_id})",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, ready_file))
    return 0
