"""What a consumer is served from a leader's log (raftcore.raft.serving.read_committed), rule
by rule, in the order the rules are checked, on an InMemoryLog."""

from __future__ import annotations

from typing import Any

from raftcore.error_codes import Errors
from raftcore.raft.serving import ServingRule, read_committed
from raftcore.records import scan_batches
from raftcore.testing import InMemoryLog

EPOCH = 4


def _log(batches: int = 3, per_batch: int = 2) -> InMemoryLog:
    """``batches`` batches of ``per_batch`` records, all of epoch 4: offsets 0..5 by default."""
    log = InMemoryLog()
    log.initialize_leader_epoch(EPOCH)
    for _ in range(batches):
        log.append_as_leader([(b"k", b"v")] * per_batch, EPOCH)
    return log


def _read(log: InMemoryLog, offset: int = 0, **kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "leader": True,
        "epoch": EPOCH,
        "high_watermark": log.end_offset,
        "offset": offset,
        "max_bytes": 1 << 20,
    }
    args.update(kwargs)
    return read_committed(log, **args)


def _offsets(records: Any) -> list[tuple[int, int]]:
    scan = scan_batches(records, check_crc=True)
    return [(int(scan.base_offsets[i]), int(scan.last_offsets[i])) for i in range(scan.count)]


def test_only_the_leader_serves_committed_records() -> None:
    read = _read(_log(), leader=False)
    assert read.rule is ServingRule.NOT_LEADER
    assert read.error_code == Errors.NOT_LEADER_OR_FOLLOWER and read.names_the_leader
    assert (read.records, read.high_watermark, read.log_start_offset) == (b"", -1, -1)


def test_a_reader_of_an_older_leader_epoch_is_fenced() -> None:
    """KIP-320: the epoch the reader believes in is older than the leader's."""
    read = _read(_log(), leader_epoch=EPOCH - 1)
    assert read.rule is ServingRule.FENCED and read.error_code == Errors.FENCED_LEADER_EPOCH


def test_a_reader_of_a_newer_leader_epoch_is_told_it_is_unknown() -> None:
    read = _read(_log(), leader_epoch=EPOCH + 1)
    assert read.rule is ServingRule.UNKNOWN_EPOCH
    assert read.error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_a_reader_that_names_no_epoch_or_the_leaders_is_served() -> None:
    for epoch in (-1, EPOCH):
        assert _read(_log(), leader_epoch=epoch).rule is ServingRule.SERVED


def test_fencing_is_checked_before_the_high_watermark() -> None:
    read = _read(_log(), leader_epoch=EPOCH - 1, high_watermark=None)
    assert read.rule is ServingRule.FENCED


def test_a_new_leader_serves_nothing_until_it_knows_its_high_watermark() -> None:
    """KIP-595: no high watermark before a record of the leader's own epoch is committed."""
    read = _read(_log(), high_watermark=None)
    assert read.rule is ServingRule.NOT_READY
    assert read.error_code == Errors.NOT_LEADER_OR_FOLLOWER and read.names_the_leader


def test_an_offset_past_the_log_end_is_out_of_range() -> None:
    log = _log()
    assert _read(log, offset=log.end_offset).rule is ServingRule.SERVED  # the end: nothing yet
    read = _read(log, offset=log.end_offset + 1)
    assert read.rule is ServingRule.OUT_OF_RANGE
    assert read.error_code == Errors.OFFSET_OUT_OF_RANGE and not read.names_the_leader
    assert (read.high_watermark, read.log_start_offset) == (-1, -1)


def test_an_offset_below_the_log_start_is_out_of_range() -> None:
    log = _log()
    log.truncate_fully_and_start_at(10)
    assert _read(log, offset=9, high_watermark=10).rule is ServingRule.OUT_OF_RANGE


def test_only_batches_wholly_below_the_high_watermark_are_served() -> None:
    read = _read(_log(), high_watermark=4)
    assert read.rule is ServingRule.SERVED
    assert _offsets(read.records) == [(0, 1), (2, 3)]
    assert (read.high_watermark, read.log_start_offset) == (4, 0)


def test_a_batch_the_high_watermark_cuts_is_not_served() -> None:
    assert _offsets(_read(_log(), high_watermark=3).records) == [(0, 1)]


def test_a_reader_at_the_high_watermark_gets_no_records_but_the_offsets() -> None:
    read = _read(_log(), offset=4, high_watermark=4)
    assert (read.rule, read.records, read.high_watermark) == (ServingRule.SERVED, b"", 4)


def test_the_first_batch_comes_whole_whatever_max_bytes() -> None:
    """KIP-74: a reader always gets the first batch, even when it is larger than asked."""
    assert _offsets(_read(_log(), max_bytes=1).records) == [(0, 1)]


def test_zero_max_bytes_reads_nothing() -> None:
    read = _read(_log(), max_bytes=0)
    assert (read.rule, read.records, read.high_watermark) == (ServingRule.SERVED, b"", 6)


def test_a_damaged_batch_and_what_follows_stay_in_the_log() -> None:
    log = _log()
    log.corrupt(2, 70, 0)  # a bit of the second batch's records
    read = _read(log)
    assert read.rule is ServingRule.SERVED
    assert _offsets(read.records) == [(0, 1)]
    assert read.damage is not None and read.damage.offset == 2


def test_a_read_that_finds_only_damage_is_a_storage_error() -> None:
    log = _log()
    log.corrupt(0, 70, 0)
    read = _read(log)
    assert read.rule is ServingRule.DAMAGED
    assert read.error_code == Errors.KAFKA_STORAGE_ERROR and not read.names_the_leader
    assert (read.records, read.high_watermark, read.log_start_offset) == (b"", 6, 0)
    assert read.damage is not None and read.damage.offset == 0
