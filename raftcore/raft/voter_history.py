"""The voter set and kraft.version in force at every offset of the log (KIP-853; Kafka's
KRaftControlRecordStateMachine over its VoterSetHistory).

The set in force is the latest ``Voters`` control record in the snapshot and the log,
**uncommitted included**: a leader that appends a change counts by the new set at once, and so
does every replica that has the record. A truncation that removes a ``Voters`` record gives the
previous set back; a snapshot carries the set in force at its end in its header batch. Before
any ``Voters`` record (kraft.version 0) the static set from the configuration is in force.

This history is kept beside the log, fed by the core wherever the log changes: the leader's own
appends, a follower's appends (:func:`control_records_in`), truncations, installed snapshots,
and a scan at start-up from the latest snapshot to the log end.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from raftcore.errors import CorruptRecordError
from raftcore.raft.control_records import KRaftVersionMessage, decode_voters
from raftcore.raft.voters import VoterSet
from raftcore.records import ControlRecordType, iter_batches, parse_control_record_key, scan_batches

__all__ = ["VoterHistory", "control_records_in"]

logger = logging.getLogger(__name__)

_CONTROL = 0x20  # the control bit of a batch's attributes
_SCAN_BYTES = 4 << 20


def control_records_in(data: Any, scan: Any = None) -> list[tuple[int, int, bytes]]:
    """(offset, control type, value) of the KRaftVersion and Voters records in ``data`` (whole
    batches). Only control batches are decoded; the rest is a native header scan (``scan``:
    the caller's scan of ``data``, when it made one)."""
    if len(data) == 0:
        return []
    if scan is None:
        scan = scan_batches(data, check_crc=False)
    if scan.count == 0 or not (scan.attributes[: scan.count] & _CONTROL).any():
        return []
    found: list[tuple[int, int, bytes]] = []
    for i in np.flatnonzero(scan.attributes[: scan.count] & _CONTROL):
        start = int(scan.positions[i])
        (batch,) = iter_batches(memoryview(data)[start : start + int(scan.sizes[i])])
        for record in batch.records():
            kind = parse_control_record_key(record.key)
            if kind in (ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS):
                found.append((record.offset, kind, bytes(record.value or b"")))
    return found


class VoterHistory:
    """Voter sets and kraft.version levels by the offset of the record that set them."""

    def __init__(self, static: VoterSet, *, prefix: str = "") -> None:
        self.static = static
        self.prefix = prefix
        self._offsets: list[int] = []  # of Voters records, ascending
        self._sets: list[VoterSet] = []
        self._version_offsets: list[int] = []  # of KRaftVersion records, ascending
        self._versions: list[int] = []

    # ---- what is in force --------------------------------------------------------------------

    def latest(self) -> VoterSet:
        """The voter set in force now: the last Voters record's, committed or not."""
        return self._sets[-1] if self._sets else self.static

    def latest_offset(self) -> int:
        """The offset of the last Voters record (-1: the static set is in force)."""
        return self._offsets[-1] if self._offsets else -1

    def at(self, offset: int) -> VoterSet:
        """The voter set in force for the record at ``offset``."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._sets[i - 1] if i else self.static

    @property
    def kraft_version(self) -> int:
        return self._versions[-1] if self._versions else 0

    def kraft_version_at(self, offset: int) -> int:
        i = bisect.bisect_right(self._version_offsets, offset)
        return self._versions[i - 1] if i else 0

    def uncommitted_change(self, high_watermark: int | None) -> bool:
        """Is the last voter change (or kraft.version change) not committed yet?"""
        hw = -1 if high_watermark is None else high_watermark
        last = max(self.latest_offset(), self._version_offsets[-1] if self._versions else -1)
        return last >= hw

    # ---- keeping it current ------------------------------------------------------------------

    def add(self, offset: int, kind: int, value: bytes) -> None:
        """A KRaftVersion or Voters record at ``offset`` (appended in offset order)."""
        if kind == ControlRecordType.KRAFT_VOTERS:
            voters = decode_voters(value)
            if self._offsets and offset <= self._offsets[-1]:
                raise CorruptRecordError(
                    f"a Voters record at {offset}, not after the one at {self._offsets[-1]}"
                )
            self._offsets.append(offset)
            self._sets.append(voters)
            logger.info("%s voters from offset %d: %r", self.prefix, offset, voters)
        elif kind == ControlRecordType.KRAFT_VERSION:
            message = KRaftVersionMessage.decode(value)
            if self._version_offsets and offset <= self._version_offsets[-1]:
                raise CorruptRecordError(
                    f"a KRaftVersion record at {offset}, not after the one at "
                    f"{self._version_offsets[-1]}"
                )
            self._version_offsets.append(offset)
            self._versions.append(message.kraft_version)

    def add_all(self, records: Iterable[tuple[int, int, bytes]]) -> None:
        for offset, kind, value in records:
            self.add(offset, kind, value)

    def truncate_new(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: records at or past it are gone, and with
        them the sets they brought (the previous set is back in force)."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if i < len(self._offsets):
            logger.info(
                "%s truncation to %d drops the voters of offsets %s",
                self.prefix,
                end_offset,
                self._offsets[i:],
            )
            del self._offsets[i:], self._sets[i:]
        j = bisect.bisect_left(self._version_offsets, end_offset)
        del self._version_offsets[j:], self._versions[j:]

    def reset(self) -> None:
        """Forget everything (a snapshot replaced the whole log)."""
        self._offsets.clear()
        self._sets.clear()
        self._version_offsets.clear()
        self._versions.clear()

    def load_snapshot(self, end_offset: int, extras: Iterable[tuple[int, bytes]]) -> None:
        """The header records of a snapshot ending at ``end_offset``: what they say is in
        force at its last offset."""
        for kind, value in extras:
            self.add(end_offset - 1, kind, value)

    def load_log(self, log: Any, start: int) -> None:
        """Scan ``log`` from ``start`` to its end for KRaftVersion and Voters records."""
        offset, end = start, log.end_offset
        while offset < end:
            data = log.read(offset, _SCAN_BYTES)
            if len(data) == 0:
                break
            scan = scan_batches(data, check_crc=False)
            if scan.count == 0:
                # A batch whose header is damaged (its length cannot be trusted): the core
                # repairs it from the leader (raftcore.raft.damage) and loads the voters again;
                # meanwhile the batches after it are read past it.
                offset = _past_damaged_batch(log, offset, end)
                continue
            try:
                records = control_records_in(data, scan)
            except CorruptRecordError as exc:
                # The voter set cannot be read (or a damaged data batch claims to be a control
                # batch): counting votes by a guess could elect two leaders. Stop, loudly.
                raise CorruptRecordError(
                    f"a control batch of the log is damaged ({exc}): the voter set cannot be "
                    "read; move this data directory aside and start the node on an empty one "
                    "(it comes back a new replica: remove the old voter and add it)"
                ) from exc
            for record in records:
                if record[0] >= offset:
                    self.add(*record)
            offset = int(scan.last_offsets[scan.count - 1]) + 1


def _past_damaged_batch(log: Any, offset: int, end: int) -> int:
    """The base offset of the first batch after the damaged one holding ``offset`` (``end``
    when there is none): the log's own index knows where each batch starts."""
    nxt = offset + 1
    while nxt < end:
        scan = scan_batches(log.read(nxt, 1), check_crc=False)
        if scan.count and int(scan.base_offsets[0]) > offset:
            return int(scan.base_offsets[0])
        if scan.count:
            nxt = int(scan.last_offsets[0]) + 1
        else:
            nxt += 1
    return end
