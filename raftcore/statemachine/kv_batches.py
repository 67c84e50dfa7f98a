"""Committed batches as key/value operations, checked once for every key/value state machine:
the batches must continue from the applied offset without overlap (a batch at or below it was
applied already), and records whose key breaks the key rule are skipped with a warning naming
their offsets -- the same records on every replica, since the rule depends on the bytes alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from raftcore.records import KvPairs
from raftcore.statemachine.api import MAX_KEY_SIZE, StateMachineError

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch

__all__ = ["decode_batches"]

logger = logging.getLogger(__name__)


def decode_batches(
    batches: Sequence[CommittedBatch],
    applied_offset: int,
    *,
    prefix: str = "",
    max_key_size: int = MAX_KEY_SIZE,
    seal: bool = False,
) -> tuple[list[KvPairs], int, int]:
    """The pairs of each batch, the applied offset after them, and how many records were
    skipped. Raises StateMachineError, before anything is applied, if a batch starts below
    ``applied_offset`` or below the end of the batch before it. ``seal``: the values come
    sealed with their checksum (:mod:`raftcore.statemachine.checksums`), made as they are
    decoded."""
    decoded: list[KvPairs] = []
    expected = applied_offset
    skipped = 0
    for batch in batches:
        first = batch.first_offset
        if first < expected:
            raise StateMachineError(
                f"{prefix} batch {batch.base_offset}..{batch.last_offset} (from offset "
                f"{first}) was applied already: the applied offset is {expected}"
            )
        kv = batch.kv_pairs(max_key_size, seal=seal)
        if kv.skipped:
            skipped += len(kv.skipped)
            offset, reason = kv.skipped[0]
            logger.warning(
                "%s skipping %d record(s) of batch %d..%d whose key is not 1..%d bytes "
                "(first: offset %d, %s)",
                prefix,
                len(kv.skipped),
                batch.base_offset,
                batch.last_offset,
                max_key_size,
                offset,
                reason,
            )
        decoded.append(kv)
        expected = batch.last_offset + 1
    return decoded, expected, skipped
