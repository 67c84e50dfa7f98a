"""``--partition P``: which partition of the topic a client command speaks to, spelt as Kafka's
console tools spell it (``kafka-console-producer`` and ``kafka-console-consumer`` take
``--topic`` and ``--partition``). Each partition is a Raft group of its own, with its own leader,
log and voters; the commands that read or write one partition (``produce``, ``consume``,
``describe-quorum``) take it, default 0.

A partition the topic does not have is refused by the client once Metadata lists the topic's
partitions (:class:`raftcore.client.cluster.UnknownPartitionError`), in one line:
``topic raftcore has 3 partitions (0..2); no partition 5``."""

from __future__ import annotations

import argparse

from raftcore.cli import args as types

__all__ = ["add_partition_option"]

_HELP = {
    "produce": "the partition every record is written to (0..N-1 of the topic). raftcore "
    "produce does not spread keyed records over the partitions: each run writes to this one "
    "(Kafka clients' partitioners spread keys)",
    "consume": "the partition to read (0..N-1 of the topic); its offsets are its own",
    "describe-quorum": "the partition whose Raft group to describe (each partition has its "
    "own leader, epoch and high watermark)",
}


def add_partition_option(p: argparse.ArgumentParser, command: str) -> None:
    """Add ``--partition`` (default 0) to ``command``'s parser, with that command's help."""
    p.add_argument(
        "--partition",
        type=types.non_negative_int,
        default=0,
        metavar="P",
        help=_HELP[command],
    )
