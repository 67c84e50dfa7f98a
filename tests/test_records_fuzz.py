"""Fuzzing of every decoder: random bytes, and valid batches with flipped, cut, inserted or
overwritten bytes -- with the CRC left stale (the CRC must catch it) and with the CRC re-stamped
(the parser's own bounds checks must catch it). The only exceptions allowed are
CorruptRecordError and, for snappy/lz4 codec bits, UnsupportedCompressionError. A native crash
shows up as a failed subprocess test, not a dead test run.

RAFTCORE_FUZZ_EXAMPLES raises the number of examples (default: a CI-sized run)."""

import contextlib
import os
import struct
import subprocess
import sys
import textwrap

import crc32c as crc32c_package
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcore.records import (
    CorruptRecordError,
    UnsupportedCompressionError,
    check_batch_crcs,
    control_record_key,
    encode_batch,
    find_batch,
    iter_batches,
    scan_batches,
    span_batches,
)

EXAMPLES = int(os.environ.get("RAFTCORE_FUZZ_EXAMPLES", "300"))
ALLOWED = (CorruptRecordError, UnsupportedCompressionError)
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def seed_batches():
    out = []
    for compression in ("none", "gzip", "zstd"):
        out.append(
            encode_batch(
                [
                    (b"key-%d" % i, b"value" * i, [(f"h{i}", b"x" * i)] if i % 3 else None)
                    for i in range(12)
                ],
                base_offset=40,
                leader_epoch=3,
                compression=compression,
                timestamp_ms=99,
            )
        )
        out.append(
            encode_batch(
                [(control_record_key(2), b"\x00\x00\x00\x01")],
                compression=compression,
                control=True,
            )
        )
        out.append(encode_batch([(None, None)], compression=compression))
    return out


SEEDS = seed_batches()


def restamp_crc(data: bytearray) -> None:
    if len(data) >= 21:
        data[17:21] = struct.pack(">I", crc32c_package.crc32c(bytes(data[21:])))


def exercise(data: bytes) -> list:
    """Run every decoder over data; return what was read. Raise only allowed errors."""
    out = []
    try:
        for batch in iter_batches(data):
            fields = (
                batch.base_offset,
                batch.last_offset,
                batch.record_count,
                batch.compression,
                batch.is_control,
                batch.size_in_bytes,
            )
            valid = batch.is_valid()
            try:
                if batch.is_control:
                    batch.control_type  # noqa: B018
                records = [
                    (r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()
                ]
                assert valid, "records() returned data from a batch whose CRC fails"
                out.append((fields, records))
            except ALLOWED:
                pass
    except ALLOWED:
        pass
    scan = scan_batches(data)
    assert 0 <= scan.valid_end <= len(data) and scan.count >= 0
    assert check_batch_crcs(data) in (-1, *range(len(data) + 1))
    for offset in (0, 41, 10**6):
        try:
            pos = find_batch(data, offset)
            assert 0 <= pos <= len(data)
        except ALLOWED:
            pass
    with contextlib.suppress(ALLOWED):
        assert 0 <= span_batches(data, 0, -1, 100) <= len(data)
    return out


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, ops) -> bytearray:
    buf = bytearray(data)
    for op, where, value in ops:
        if not buf:
            break
        i = where % len(buf)
        if op == "flip":
            buf[i] ^= 1 << (value % 8)
        elif op == "set":
            buf[i] = value
        elif op == "cut":
            del buf[i:]
        elif op == "insert":
            buf[i:i] = bytes([value]) * (1 + value % 5)
        else:
            del buf[i : i + 1 + value % 9]
    return buf


@fuzz
@given(st.binary(max_size=600))
def test_random_bytes_raise_only_corrupt_record_errors(data):
    exercise(data)


@fuzz
@given(st.sampled_from(SEEDS), mutations, st.booleans())
def test_mutated_batches_raise_only_corrupt_record_errors(seed, ops, restamp):
    data = mutate(seed, ops)
    if restamp:
        restamp_crc(data)
    exercise(bytes(data))


@fuzz
@given(st.sampled_from(SEEDS), st.integers(21, 10**6), st.integers(0, 7))
def test_a_flipped_bit_after_the_crc_field_is_caught_by_the_crc(seed, where, bit):
    data = bytearray(seed)
    data[where % (len(data) - 21) + 21] ^= 1 << bit
    try:
        batch = next(iter_batches(bytes(data)))
    except CorruptRecordError:
        return  # a header field's sanity check caught it first
    assert not batch.is_valid()
    try:
        batch.records()
        raise AssertionError("records() of a corrupt batch")
    except CorruptRecordError:
        pass


@fuzz
@given(st.sampled_from(SEEDS), st.integers(61, 10**6), st.binary(min_size=1, max_size=8))
def test_overwritten_record_bytes_with_a_fresh_crc_never_escape_the_batch(seed, where, junk):
    # The CRC no longer protects anything: only the parser's bounds checks stand.
    data = bytearray(seed)
    i = where % max(1, len(data) - 61) + 61
    data[i : i + len(junk)] = junk
    data = data[: len(seed)]
    data[8:12] = struct.pack(">i", len(data) - 12)
    restamp_crc(data)
    exercise(bytes(data))


@fuzz
@given(st.sampled_from(SEEDS), st.integers(0, 2**31 - 1), st.integers(-(2**31), -1))
def test_absurd_counts_and_lengths_in_the_header_are_refused(seed, big, negative):
    for offset, value in ((57, big), (57, negative), (23, negative), (8, big), (8, negative)):
        data = bytearray(seed)
        data[offset : offset + 4] = struct.pack(">i", value)
        restamp_crc(data)
        exercise(bytes(data))


FUZZ_LOOP = textwrap.dedent(
    """
    import random, struct, sys
    import crc32c
    from raftcore.records import (CorruptRecordError, UnsupportedCompressionError, encode_batch,
                                  iter_batches, scan_batches, find_batch, span_batches,
                                  check_batch_crcs)
    rng = random.Random(int(sys.argv[1]))
    seeds = [encode_batch([(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(20)],
                          compression=c) for c in ("none", "gzip", "zstd")]
    for n in range(int(sys.argv[2])):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(data))
            r = rng.random()
            if r < 0.5:
                data[i] = rng.randrange(256)
            elif r < 0.7:
                del data[i:]
                if not data:
                    break
            else:
                data[i:i] = rng.randbytes(rng.randint(1, 9))
        if rng.random() < 0.7 and len(data) > 21:
            data[17:21] = struct.pack(">I", crc32c.crc32c(bytes(data[21:])))
        data = bytes(data)
        try:
            for b in iter_batches(data):
                list(b.records())
        except (CorruptRecordError, UnsupportedCompressionError):
            pass
        scan_batches(data); check_batch_crcs(data)
        for f in (lambda: find_batch(data, 5), lambda: span_batches(data, 0, -1, 10)):
            try:
                f()
            except CorruptRecordError:
                pass
    print("ok")
    """
)


def test_a_long_fuzz_loop_in_a_subprocess_never_crashes_the_interpreter(tmp_path):
    # A segfault here fails this test instead of killing the test run.
    count = max(2000, EXAMPLES * 10)
    result = subprocess.run(
        [sys.executable, "-c", FUZZ_LOOP, "7", str(count)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=tmp_path,  # import the installed raftcore, not the checkout
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "ok"
