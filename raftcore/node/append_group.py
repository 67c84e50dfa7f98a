"""Group append for the embedding API: the :meth:`RaftNode.append` calls of one event-loop
iteration are written as one batch -- one encode, one log write, one step of the core, one
tracked append -- and each caller still gets its own offsets and its own verdict
(:meth:`AppendVerdicts.track_parts`).

A caller's records are never split: they stay one run of offsets inside the group's batch, so
they commit or fail together, as one call's batch always did. A group that cannot be written
because the node does not lead (or its log refuses the write) fails every caller with that
error; a group that cannot be encoded (one caller's bad record, or the group grown past
``max_message_bytes``) is written again caller by caller, so only the caller at fault fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftcore.raft import NotLeaderError

if TYPE_CHECKING:
    from raftcore.node.verdicts import AppendVerdicts
    from raftcore.raft import Appended

__all__ = ["MAX_GROUP_RECORDS", "AppendGroup"]

# Records in one group's batch; a call that would take it past this starts the next group.
MAX_GROUP_RECORDS = 16_384


class _Call:
    __slots__ = ("future", "records", "track")

    def __init__(self, records: list[Any], track: bool, future: asyncio.Future[Appended]) -> None:
        self.records = records
        self.track = track
        self.future = future


class AppendGroup:
    """The appends waiting for the end of this loop iteration. ``write(records, track)``
    appends one batch on the leader and returns its :class:`Appended` (untracked by
    ``verdicts``: the group tracks it, whole or in parts)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        write: Callable[[list[Any], bool], Appended],
        verdicts: AppendVerdicts,
        at_iteration_end: Callable[[Callable[[], None]], None],
    ) -> None:
        self._loop = loop
        self._write = write
        self._verdicts = verdicts
        self._at_iteration_end = at_iteration_end
        self._calls: list[_Call] = []
        self._records = 0
        self._waiting = False  # for the end of this iteration

    def add(self, records: list[Any], track: bool) -> asyncio.Future[Appended]:
        """Queue ``records`` for this iteration's batch; the future gets the caller's part."""
        if self._calls and self._records + len(records) > MAX_GROUP_RECORDS:
            self.flush()
        future: asyncio.Future[Appended] = self._loop.create_future()
        self._calls.append(_Call(records, track, future))
        self._records += len(records)
        if not self._waiting:
            self._waiting = True
            self._at_iteration_end(self._end_of_iteration)
        return future

    def _end_of_iteration(self) -> None:
        self._waiting = False
        self.flush()

    def flush(self) -> None:
        """Write what is queued now."""
        calls, self._calls, self._records = self._calls, [], 0
        calls = [c for c in calls if not c.future.cancelled()]  # their callers went away
        if len(calls) == 1:
            self._write_alone(calls[0])
        elif calls:
            self._write_group(calls)

    def _write_alone(self, call: _Call) -> None:
        try:
            appended = self._write(call.records, call.track)
        except Exception as exc:  # the caller's to see
            call.future.set_exception(exc)
            return
        call.future.set_result(self._verdicts.track(appended, self._loop))

    def _write_group(self, calls: list[_Call]) -> None:
        records = [r for c in calls for r in c.records]
        try:
            appended = self._write(records, any(c.track for c in calls))
        except NotLeaderError as exc:  # nobody's records can go in
            for c in calls:
                c.future.set_exception(exc)
            return
        except Exception:  # nothing was written: each on its own, so only the faulty one fails
            for c in calls:
                self._write_alone(c)
            return
        parts = self._verdicts.track_parts(
            appended, [(len(c.records), c.track) for c in calls], self._loop
        )
        for c, part in zip(calls, parts, strict=True):
            c.future.set_result(part)
