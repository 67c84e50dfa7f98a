"""Produce validation (issue 9; Kafka's LogValidator, KIP-467): every record of every produced
batch is decoded before anything is appended. A batch with a right CRC and malformed records is
refused with the index of the bad record and a reason, and nothing is written."""

from __future__ import annotations

import pytest
from crafted_batches import batch, record
from hypothesis import given, settings
from hypothesis import strategies as st
from test_node import cluster, leader_of, raw_request, run
from test_node_acknowledgements import produce_body

from raftcore import crc32c
from raftcore.error_codes import Errors
from raftcore.produce_validation import validate_produced
from raftcore.protocol.api import ApiKey
from raftcore.records import encode_batch, encode_control_batch, iter_batches

pytestmark = pytest.mark.timeout(60)

MALFORMED = {
    "offset deltas out of order": batch([record(1), record(0)]),
    "a gap in the offset deltas": batch([record(0), record(2)], last_delta=1),
    "more records counted than present": batch([record(0)], count=2),
    "fewer records counted than present": batch([record(0), record(1)], count=1, last_delta=1),
    "a record length shorter than its fields": batch([record(0, length_adjust=-1), record(1)]),
    "a record length longer than its fields": batch([record(0), record(1, length_adjust=2)]),
    "a header count past the record": batch([record(0, header_count=5)]),
    "a negative header count": batch([record(0, header_count=-2)]),
    "bytes after the last record": batch([record(0) + b"xx"]),
    "magic 1": batch([record(0)], magic=1),
}


def test_a_well_formed_crafted_batch_is_what_our_encoder_writes():
    # the crafting helper is right, so the malformed cases differ only where they say
    good = batch([record(0), record(1)])
    assert good == encode_batch(
        [(b"k", b"v"), (b"k", b"v")], base_offset=0, leader_epoch=0, timestamp_ms=1
    )
    assert validate_produced(good) is None


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_batch_with_a_right_crc_and_malformed_records_is_refused_as_corrupt(case):
    refusal = validate_produced(MALFORMED[case])
    assert refusal is not None, case
    assert refusal.error_code == Errors.CORRUPT_MESSAGE
    assert refusal.batch_index == 0 and refusal.reason


def test_the_refusal_names_the_bad_batch_and_record():
    data = encode_batch([(b"k", b"v")] * 3) + batch([record(0), record(1), record(0)])
    refusal = validate_produced(data)
    assert (refusal.batch_index, refusal.record_index) == (1, 2)
    assert "record 2" in refusal.reason and "offset delta" in refusal.reason


def test_a_compressed_batch_with_malformed_inner_records_is_refused():
    inner = record(0) + record(0)  # two records at offset delta 0
    import zstandard

    packed = zstandard.ZstdCompressor().compress(inner)
    data = batch([packed], count=2, attributes=4)  # codec 4: zstd
    assert [b.record_count for b in iter_batches(data)] == [2]
    refusal = validate_produced(data)
    assert refusal is not None and refusal.error_code == Errors.CORRUPT_MESSAGE


def test_control_and_transactional_batches_from_clients_are_invalid_records():
    control = encode_control_batch(2, b"\x00\x00", timestamp_ms=1)
    refusal = validate_produced(control)
    assert refusal.error_code == Errors.INVALID_RECORD and "control" in refusal.reason
    transactional = batch([record(0)], attributes=0x10)
    assert validate_produced(transactional).error_code == Errors.INVALID_RECORD


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_mutated_batch_with_a_fresh_crc_is_refused_or_decodes_whole(data):
    """Accepted means every record decodes: never accepted and then unreadable."""
    raw = bytearray(encode_batch([(b"key%d" % i, b"value" * i, [("h", b"x")]) for i in range(4)]))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(raw) - 1))  # in the records
        raw[pos] = data.draw(st.integers(0, 255))
    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    if validate_produced(bytes(raw)) is None:
        for b in iter_batches(bytes(raw)):
            assert len(list(b.records())) == b.record_count


def test_a_node_refuses_a_crc_valid_malformed_batch_and_writes_nothing(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            end = leader.log.end_offset
            bad = batch([record(0), record(1), record(1)], last_delta=2)
            body = produce_body(b"unused")
            body.topic_data[0].partition_data[0].records = bad
            resp = await raw_request(leader, ApiKey.PRODUCE, 10, body)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == Errors.CORRUPT_MESSAGE
            assert [e.batch_index for e in part.record_errors] == [2]
            assert "offset delta" in part.error_message
            assert leader.log.end_offset == end
            # and the log goes on serving the next, good batch
            ok = await raw_request(leader, ApiKey.PRODUCE, 10, produce_body(b"good"))
            assert ok.responses[0].partition_responses[0].error_code == Errors.NONE

    run(main())


def test_a_follower_refuses_a_malformed_batch_from_its_leader_and_appends_nothing():
    from crafted_batches import batch as crafted
    from raft_harness import Harness

    from raftcore.raft import FetchRequest, FetchResponse, LeaderAndEpoch

    h = Harness()
    h.begin_quorum_epoch(2, 1)
    h.flush()
    [fetch] = h.take(FetchRequest, 2)
    h.respond(
        fetch,
        FetchResponse(
            Errors.NONE, 1, 0, LeaderAndEpoch(2, 1), records=crafted([record(1), record(0)])
        ),
    )
    assert h.log.end_offset == 0
