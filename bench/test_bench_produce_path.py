"""The leader's produce path, per batch (issue 25): from a Produce request's records to their
bytes in the log, without the network or the core's step.

Side by side, one group per batch size:

- ``once``: what a produced batch takes now. ``validate_produced`` checks every CRC and
  record; the scan of its headers (the producer state reads it) goes with the records, and the
  log restamps offsets and epoch where the batch lies in the receive buffer and writes it,
  without a second walk or CRC check.
- ``before``: the same validation and scan, then the log's unchecked append, the path every
  produced batch took before: a restamped copy, scanned again and CRC-checked as it is
  written (an embedded caller's batches still take it).

Batch sizes: one 100-byte record (a small write) and 1,000 records of 16+100 bytes. Both
append to a SegmentedLog in /dev/shm (no fsync), started afresh at the same size for both.
The ratio is in docs/benchmarks.md.
"""

import shutil
import tempfile

import pytest

from raftcore.kafka.produce_validation import validate_produced
from raftcore.log import SegmentedLog
from raftcore.records import encode_batch, scan_batches

SIZES = {
    "1 record": [(None, b"v" * 100)],
    "1000 records": [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(1000)],
}
LOG_BYTES = 64 << 20  # the log starts afresh past this (in both)


class Leader:
    """A leader's log with the produce path's steps; it drops its segments now and then."""

    def __init__(self, directory: str) -> None:
        self.log = SegmentedLog.open(directory, segment_bytes=16 << 20)
        self.written = 0

    def produce(self, received: bytearray | bytes, *, once: bool) -> int:
        assert validate_produced(received) is None
        scan = scan_batches(received, check_crc=False)  # the producer state reads its headers
        if once:
            first, _ = self.log.append_batches_as_leader(received, 1, checked=scan)
        else:
            first, _ = self.log.append_batches_as_leader(received, 1)
        self.written += len(received)
        if self.written > LOG_BYTES:
            self.log.truncate_fully_and_start_at(self.log.end_offset)
            self.written = 0
        return first


@pytest.fixture
def leader():
    directory = tempfile.mkdtemp(prefix="raftcore-bench-produce-", dir="/dev/shm")
    leader = Leader(directory)
    yield leader
    leader.log.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("path", ["once", "before"])
def test_produce_path_per_batch(benchmark, leader, size, path):
    benchmark.group = f"produce path per batch: {size}"
    batch = encode_batch(SIZES[size], timestamp_ms=1_700_000_000_000)
    # The framing hands each request over as a writable copy (a bytearray): ``once`` restamps
    # it in place; ``before`` took it as bytes and restamped a copy.
    received = bytearray(batch) if path == "once" else batch
    first = benchmark(leader.produce, received, once=path == "once")
    assert first >= 0 and leader.log.end_offset > first
