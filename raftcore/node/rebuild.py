"""Rebuilding a damaged state machine: a value that fails its checksum
(:mod:`raftcore.statemachine.checksums`) means the state on this disk can no longer be
trusted, so it is built again from what can be: the latest snapshot and the log.

The state machine tells ``damaged(exc)`` (from whichever thread read the value: the loop for
a local read, the snapshot thread, the applier's); the rest happens on the loop:

1. one ERROR line naming the damaged key and saying what follows;
2. the applier drops what is queued and resets the state to an empty one at offset 0
   (``Applier.rewind``), after the apply in progress;
3. the core's listener feed starts over (``RaftCore.rewind_listener``): it hands over the
   latest snapshot (verified; the restore replaces the whole state and clears the damage),
   then every committed batch after it, as on a first start. Without a snapshot, the log
   from its start offset (0: every record is still there). Where the latest snapshot is
   damaged too, a follower downloads the leader's copy of it first
   (:mod:`raftcore.raft.fetch_snapshot`).

Until the restore, every read and every snapshot of the state machine raises
DamagedValueError: a damaged value is never served nor copied into a snapshot. Records
committed meanwhile are applied once the rebuild reaches them; nothing is lost, since the
log and the snapshot hold everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

__all__ = ["StateRebuild"]

logger = logging.getLogger(__name__)


class StateRebuild:
    """Starts a rebuild of the node's state machine when it reports damage; see the module
    docstring. ``rewind_applier`` and ``rewind_feed`` are the applier's and the core's halves
    (run on the loop)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        rewind_applier: Callable[[], None],
        rewind_feed: Callable[[], None],
        prefix: str = "",
    ) -> None:
        self.loop = loop
        self.rewind_applier = rewind_applier
        self.rewind_feed = rewind_feed
        self.prefix = prefix
        self.closing = False
        self.rebuilds = 0  # rebuilds started (a metric and for tests)

    def damaged(self, exc: BaseException) -> None:
        """The state machine found damage (any thread): rebuild it, on the loop."""
        if self.closing:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: the node has stopped
            self.loop.call_soon_threadsafe(self._start, exc)

    def _start(self, exc: BaseException) -> None:
        if self.closing:
            return
        self.rebuilds += 1
        logger.error(
            "%s state machine damaged: %s; rebuilding it from the latest snapshot and the log "
            "(no value is read from it or copied into a snapshot until then)",
            self.prefix,
            exc,
        )
        self.rewind_applier()
        self.rewind_feed()

    def close(self) -> None:
        self.closing = True
