"""The node's scrubber: every sealed segment's bytes checked again in the background (the check
of ``verify-log``, raftcore.log.scrub), at a bounded rate, once after the log opens and then on
a schedule. A damaged batch it finds is logged (one ERROR line per finding) and reported to the
Raft core, which has it repaired from a peer and never serves it meanwhile
(raftcore.raft.damage).

The checks run on a worker thread (reading files through their own descriptors); the finding is
reported on the event loop, the only thread that may touch the core.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from raftcore.log.scrub import SegmentDamage, scrub_segment, sealed_segments
from raftcore.raft.damage import Damage

__all__ = ["AFTER_FINDING_S", "Scrubber"]

logger = logging.getLogger(__name__)

AFTER_FINDING_S = 10.0  # a pass that found damage is followed by another this soon


class Scrubber:
    """Scrub passes over ``log``'s sealed segments at ``bytes_per_second``, every
    ``interval_ms`` (the first right after the start); ``report(damage)`` on the event loop."""

    def __init__(
        self,
        log: Any,
        *,
        bytes_per_second: int,
        interval_ms: int,
        report: Callable[[Damage], None],
        prefix: str = "",
    ) -> None:
        self.log = log
        self.bytes_per_second = bytes_per_second
        self.interval_s = interval_ms / 1000
        self.report = report
        self.prefix = prefix
        self.bytes_scrubbed = 0  # metrics
        self.passes = 0
        self.found = 0
        self._stopped = threading.Event()
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self.bytes_per_second > 0:
            self._task = asyncio.ensure_future(self._run())

    def close(self) -> None:
        self._stopped.set()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped.is_set():
            found = await loop.run_in_executor(None, self.scrub_pass)
            for damage in found:
                self.report(damage)
            await asyncio.sleep(AFTER_FINDING_S if found else self.interval_s)

    def scrub_pass(self) -> list[Damage]:
        """One pass (on a worker thread): the first damage of each damaged sealed segment."""
        found: list[Damage] = []
        if self.log.closed:
            return found
        for segment in sealed_segments(self.log):
            if self._stopped.is_set():
                break
            damage = scrub_segment(segment, pace=self._pace)
            if damage is not None:
                self.found += 1
                logger.error("%s scrubber: damaged batch in %s", self.prefix, damage)
                found.append(_as_damage(damage))
        self.passes += 1
        return found

    def _pace(self, n: int) -> bool:
        self.bytes_scrubbed += n
        return not self._stopped.wait(n / self.bytes_per_second)


def _as_damage(found: SegmentDamage) -> Damage:
    return Damage(found.offset, f"{found.file} at byte {found.position}: {found.reason}")
