"""The check of every record of every batch a follower copies from its leader (control batches
included: a leader writes them), before anything is appended: a malformed batch never enters a
replica's log by replication. The walk is native (``raftcore._native.validation``); what a
producer may send is checked by :mod:`raftcore.kafka.produce_validation` over the same walk."""

from __future__ import annotations

from raftcore._native.validation import validate_batches
from raftcore.errors import CorruptRecordError

__all__ = ["check_well_formed"]


def check_well_formed(data: bytes | memoryview) -> None:
    """Raise CorruptRecordError unless every record of every batch in ``data`` is well formed
    (control batches included: a leader writes them). Followers check what a leader sends
    with it, so a malformed batch never enters a replica's log by replication either."""
    fault = validate_batches(data, client=False)
    if fault is not None:
        _, _, _, reason = fault
        raise CorruptRecordError(reason)
