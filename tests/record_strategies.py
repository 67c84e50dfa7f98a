"""Hypothesis strategies for record batches, shared by the codec test files.

A record is generated as ``(key, value, headers, timestamp)``. Payload sizes favour the points
where a zig-zag varint length grows a byte (63 -> 64, 8191 -> 8192), empty payloads and None.
"""

from __future__ import annotations

import os

from hypothesis import strategies as st

from raftcore.records import BatchBuilder

INT16 = (-(2**15), 2**15 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# Lengths whose zig-zag varint is at the edge of 1, 2 and 3 bytes.
VARINT_EDGE_SIZES = (0, 1, 63, 64, 65, 127, 128, 8191, 8192)


def example_count(default: int) -> int:
    """Hypothesis examples per test: ``default`` scaled by RAFTCORE_TEST_EXAMPLES_SCALE."""
    scale = float(os.environ.get("RAFTCORE_TEST_EXAMPLES_SCALE", "1"))
    return max(1, int(default * scale))


def _repeat(pattern_and_size: tuple[bytes, int]) -> bytes:
    pattern, size = pattern_and_size
    return (pattern * (size // len(pattern) + 1))[:size]


payloads = st.one_of(
    st.binary(max_size=24),
    # Repetitive (compressible) payloads at the varint edges and beyond.
    st.tuples(st.binary(min_size=1, max_size=6), st.sampled_from(VARINT_EDGE_SIZES)).map(_repeat),
    st.tuples(st.binary(min_size=1, max_size=6), st.integers(0, 3000)).map(_repeat),
    # Incompressible ones: peers then fall back to an uncompressed batch.
    st.binary(min_size=60, max_size=300),
)
nullable_payloads = st.none() | payloads

header_keys = st.text(st.characters(codec="utf-8"), max_size=10)
headers = st.lists(st.tuples(header_keys, st.none() | st.binary(max_size=16)), max_size=4)

# Kafka timestamps are milliseconds since the epoch, -1 meaning "none". Any two of these differ
# by less than 2**63, so every timestamp delta fits a varlong.
timestamps = st.one_of(st.just(-1), st.integers(0, 2**42), st.integers(2**42, 2**62))

records = st.tuples(nullable_payloads, nullable_payloads, headers, timestamps)
record_lists = st.lists(records, min_size=1, max_size=8)

compressions = st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"])

batch_params = st.fixed_dictionaries(
    {
        "base_offset": st.one_of(st.integers(0, 1000), st.integers(0, 2**62)),
        "leader_epoch": st.integers(-1, INT32[1]),
        "producer_id": st.one_of(st.just(-1), st.integers(*INT64)),
        "producer_epoch": st.one_of(st.just(-1), st.integers(*INT16)),
        "base_sequence": st.one_of(st.just(-1), st.integers(*INT32)),
    }
)


def build_batch(
    recs: list[tuple], *, compression: str = "none", control: bool = False, **params
) -> bytes:
    """Encode ``recs`` ((key, value, headers, timestamp) tuples) with raftcore's builder, each
    record with its own timestamp."""
    builder = BatchBuilder(compression=compression, control=control, **params)
    for key, value, hdrs, timestamp in recs:
        builder.append(key, value, hdrs, timestamp_ms=timestamp)
    return builder.build()


def expected_records(
    recs: list[tuple], base_offset: int, *, log_append_time: bool = False
) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of ``recs`` once written from ``base_offset``."""
    max_timestamp = max(r[3] for r in recs)
    return [
        (
            base_offset + i,
            max_timestamp if log_append_time else timestamp,
            key,
            value,
            [tuple(h) for h in hdrs],
        )
        for i, (key, value, hdrs, timestamp) in enumerate(recs)
    ]
